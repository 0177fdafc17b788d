"""Box reconcile against the real operator: the credentials Secret and the pod it creates, the
status it writes (metav1 conditions, observedGeneration), idempotence, Ready following the pod, and
garbage collection of the children when the box goes."""

from __future__ import annotations

import base64
import logging
import re
from datetime import datetime
from typing import Any

import pytest

from controller import constants as C
from agentbox_sim.world import World, claude_login, codex_login, eventually

pytestmark = pytest.mark.component

CONDITION_KEYS = {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # metav1.Condition validation


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def pod(world: World, name: str) -> dict[str, Any] | None:
    return world.kube.get("v1/pods", world.namespace, name)


def secret(world: World, name: str) -> dict[str, Any] | None:
    return world.kube.get("v1/secrets", world.namespace, name)


def reasons(world: World, box: str) -> list[str]:
    return [e["reason"] for e in world.events(box)]


def assert_metav1_conditions(obj: dict[str, Any]) -> None:
    conds = obj["status"]["conditions"]
    assert len({c["type"] for c in conds}) == len(conds), "one condition per type"
    for cond in conds:
        assert set(cond) == CONDITION_KEYS, cond
        assert cond["status"] in ("True", "False", "Unknown"), cond
        assert REASON_RE.match(cond["reason"]), cond
        assert isinstance(cond["message"], str) and len(cond["message"]) <= 32768
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cond["lastTransitionTime"]), cond
        datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00"))
        assert cond["observedGeneration"] == obj["metadata"]["generation"], cond


def assert_owned_by(child: dict[str, Any], box: dict[str, Any]) -> None:
    refs = child["metadata"].get("ownerReferences") or []
    assert refs == [{"apiVersion": C.API_VERSION, "kind": C.AGENTBOX_KIND, "name": box["metadata"]["name"],
                     "uid": box["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}], refs


def our_labels(box: str) -> dict[str, str]:
    return {C.LABEL_MANAGED_BY: C.MANAGER_NAME, C.LABEL_NAME: "agentbox", C.LABEL_BOX: box}


async def claude_box(world: World, name: str = "box-a", **spec: Any) -> str:
    login = claude_login("tok-a")
    world.provider.add_login("tok-a", "acct-a")
    await world.add_secret("claude-login", "credentials.json", login)
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box(name, "claude-code", "claude-a", **spec)
    return login


async def test_good_box_gets_secret_pod_and_status(world: World):
    world.start_operator()
    template = {
        "metadata": {"labels": {"team": "infra"}, "annotations": {"note": "kept"}},
        "spec": {
            "containers": [
                {"name": "box", "image": "agentbox-box:dev",
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                 "env": [{"name": "TZ", "value": "UTC"}]},
                {"name": "sidecar", "image": "busybox"},
            ],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    }
    login = await claude_box(world, template=template)
    await eventually(lambda: pod(world, "box-a"), 15, what="the box pod")
    await eventually(lambda: (world.box("box-a").get("status") or {}).get("pod") == "box-a", 10, what="status.pod")
    box = world.box("box-a")

    # The box credentials Secret: the login under the agent's own file name, owned by the box.
    sec = secret(world, "box-a-credentials")
    assert sec is not None
    assert set(sec["data"]) == {"credentials.json"}
    assert base64.b64decode(sec["data"]["credentials.json"]).decode() == login
    assert sec.get("type") == "Opaque"
    assert_owned_by(sec, box)
    assert sec["metadata"]["labels"] == our_labels("box-a")

    # The pod from spec.template, owned by the box, with our labels and the Secret mounted read-only.
    p = pod(world, "box-a")
    assert_owned_by(p, box)
    assert p["metadata"]["labels"] == {"team": "infra", **our_labels("box-a")}
    from controller.domain.podheal import template_hash

    # The template's own annotations are kept; the controller adds the digest of the template it built from.
    assert p["metadata"]["annotations"] == {"note": "kept",
                                            C.ANNOTATION_TEMPLATE_HASH: template_hash(box["spec"]["template"])}
    volumes = {v["name"]: v for v in p["spec"]["volumes"]}
    assert volumes["work"] == {"name": "work", "emptyDir": {}}
    assert volumes[C.CREDENTIALS_VOLUME]["secret"]["secretName"] == "box-a-credentials"
    assert [c["name"] for c in p["spec"]["containers"]] == ["box", "sidecar"]
    for ctr in p["spec"]["containers"]:
        mounts = [m for m in ctr["volumeMounts"] if m["name"] == C.CREDENTIALS_VOLUME]
        assert mounts == [{"name": C.CREDENTIALS_VOLUME, "mountPath": "/var/run/agentbox/credentials",
                           "readOnly": True}], ctr["name"]
        assert {"name": "AGENTBOX_AGENT", "value": "claude-code"} in ctr["env"]
    box_ctr = p["spec"]["containers"][0]
    assert {"name": "work", "mountPath": "/work"} in box_ctr["volumeMounts"]
    assert {"name": "TZ", "value": "UTC"} in box_ctr["env"]
    assert p["spec"]["containers"][0]["image"] == "agentbox-box:dev"

    # Status: pod, subscription, observedGeneration, metav1 conditions; Events for what was created.
    assert box["status"]["observedGeneration"] == box["metadata"]["generation"] == 1
    assert box["status"]["subscription"] == "claude-a"
    assert box["status"]["state"] == "Pending"
    ready = condition(box, C.COND_READY)
    assert (ready["status"], ready["reason"]) == ("False", C.R_POD_PENDING)
    assert_metav1_conditions(box)
    await eventually(lambda: {"CreatedSecret", "CreatedPod"} <= set(reasons(world, "box-a")), 10)
    assert all(e["type"] == "Normal" for e in world.events("box-a"))


async def test_codex_box_secret_uses_auth_json(world: World):
    world.start_operator()
    login = codex_login("tok-x", "acct-x")
    world.provider.add_login("tok-x", "acct-x")
    await world.add_secret("codex-login", "auth.json", login)
    await world.add_subscription("codex-a", "openai", "codex-login", "auth.json")
    await world.add_box("box-x", "codex", "codex-a")
    await eventually(lambda: secret(world, "box-x-credentials"), 15, what="the box Secret")
    sec = secret(world, "box-x-credentials")
    assert set(sec["data"]) == {"auth.json"}
    assert base64.b64decode(sec["data"]["auth.json"]).decode() == login
    assert_owned_by(sec, world.box("box-x"))
    await eventually(lambda: pod(world, "box-x"), 10)
    assert {"name": "AGENTBOX_AGENT", "value": "codex"} in pod(world, "box-x")["spec"]["containers"][0]["env"]


async def test_reconcile_is_idempotent(world: World, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="kopf")
    world.start_operator()
    await claude_box(world)
    await eventually(lambda: (world.box("box-a").get("status") or {}).get("pod") == "box-a", 15)
    await eventually(lambda: {"CreatedSecret", "CreatedPod"} <= set(reasons(world, "box-a")), 10)
    pod_before = pod(world, "box-a")
    secret_before = secret(world, "box-a-credentials")
    ready_before = condition(world.box("box-a"), C.COND_READY)

    def handled() -> int:
        return sum(1 for r in caplog.records if r.getMessage() == "Handler 'reconcile-box' succeeded.")

    runs = handled()
    assert runs >= 1
    # A label changes no spec: the update handler runs the reconcile again, which changes nothing.
    await world.patch(world.box_path("box-a"), {"metadata": {"labels": {"touched": "yes"}}})
    await eventually(lambda: handled() > runs, 10, what="the reconcile after the label change")
    assert world.box("box-a")["metadata"]["generation"] == 1
    after = pod(world, "box-a")
    assert after["metadata"]["uid"] == pod_before["metadata"]["uid"]
    assert after["metadata"]["resourceVersion"] == pod_before["metadata"]["resourceVersion"]
    assert secret(world, "box-a-credentials")["metadata"]["resourceVersion"] == \
        secret_before["metadata"]["resourceVersion"]
    assert len(world.kube.objects("v1/pods", world.namespace)) == 1
    assert sorted(s["metadata"]["name"] for s in world.kube.objects("v1/secrets", world.namespace)) == \
        ["box-a-credentials", "claude-login"]
    assert reasons(world, "box-a").count("CreatedPod") == 1
    assert reasons(world, "box-a").count("CreatedSecret") == 1
    assert "UpdatedSecret" not in reasons(world, "box-a")
    ready = condition(world.box("box-a"), C.COND_READY)
    assert ready["lastTransitionTime"] == ready_before["lastTransitionTime"]

    # A spec change that needs no new child: generation 2 is observed, still one pod, no new Events.
    runs = handled()
    await world.patch(world.box_path("box-a"), {"spec": {"whenAgentStops": {"resumeAfterReset": False}}})
    await eventually(lambda: (world.box("box-a").get("status") or {}).get("observedGeneration") == 2, 10,
                     what="observedGeneration 2")
    box = world.box("box-a")
    assert box["metadata"]["generation"] == 2
    assert_metav1_conditions(box)
    assert pod(world, "box-a")["metadata"]["uid"] == pod_before["metadata"]["uid"]
    assert reasons(world, "box-a").count("CreatedPod") == 1
    assert handled() > runs


async def test_ready_follows_the_pod(world: World):
    world.start_operator()
    await claude_box(world)
    await eventually(lambda: condition(world.box("box-a"), C.COND_READY).get("reason") == C.R_POD_PENDING, 15)
    pending_at = condition(world.box("box-a"), C.COND_READY)["lastTransitionTime"]
    await world.kube.set_pod_phase(world.namespace, "box-a", "Running")
    # The container runs but nothing started the tmux session: not Ready, and the box is not "Running".
    await eventually(lambda: condition(world.box("box-a"), C.COND_READY).get("reason") == C.R_SESSION_MISSING,
                     world.settings.scan_interval_s + 10, what="Ready False SessionMissing")
    assert condition(world.box("box-a"), C.COND_READY)["status"] == "False"
    assert world.box("box-a")["status"]["state"] != "Running"
    world.tmux("box-a", "new-session", "-d", "-s", C.TMUX_SESSION, "-n", "main")
    await eventually(lambda: condition(world.box("box-a"), C.COND_READY).get("status") == "True",
                     world.settings.scan_interval_s + 10, what="Ready True once the pod runs its session")
    box = world.box("box-a")
    ready = condition(box, C.COND_READY)
    assert ready["reason"] == C.R_RECONCILED
    assert ready["lastTransitionTime"] >= pending_at
    assert_metav1_conditions(box)
    # The pod stops running: Ready goes back to False.
    await world.kube.set_pod_phase(world.namespace, "box-a", "Failed")
    await eventually(lambda: condition(world.box("box-a"), C.COND_READY).get("status") == "False",
                     world.settings.scan_interval_s + 10, what="Ready False once the pod failed")
    # The condition may already show the next healing step (the Failed pod deleted, a new one created);
    # the Warning posted when the Failed pod was seen names its phase.
    await eventually(lambda: any(e["reason"] == "ReplacingPod" and e["type"] == "Warning" and "Failed" in e["message"]
                                 for e in world.events("box-a")), 10, what="ReplacingPod Warning naming Failed")


async def test_box_without_subscription_has_no_credentials(world: World):
    """An agent that does not run on a subscription (shell): a pod without the credentials volume,
    no box Secret; Ready follows its pod too."""
    world.start_operator()
    await world.add_box("box-sh", "shell", None)
    await eventually(lambda: pod(world, "box-sh"), 15, what="the shell box pod")
    p = pod(world, "box-sh")
    assert all(v["name"] != C.CREDENTIALS_VOLUME for v in p["spec"].get("volumes") or [])
    assert all(m["name"] != C.CREDENTIALS_VOLUME for c in p["spec"]["containers"] for m in c.get("volumeMounts") or [])
    assert secret(world, "box-sh-credentials") is None
    await world.kube.set_pod_phase(world.namespace, "box-sh", "Running")
    await eventually(lambda: condition(world.box("box-sh"), C.COND_READY).get("reason") == C.R_SESSION_MISSING,
                     world.settings.scan_interval_s + 10, what="no session yet: not Ready")
    world.tmux("box-sh", "new-session", "-d", "-s", C.TMUX_SESSION, "-n", "main")
    await eventually(lambda: condition(world.box("box-sh"), C.COND_READY).get("status") == "True",
                     world.settings.scan_interval_s + 10, what="Ready True for the shell box")
    assert_metav1_conditions(world.box("box-sh"))


async def test_deleting_the_box_collects_pod_and_secret(world: World):
    world.start_operator()
    await claude_box(world)
    await eventually(lambda: pod(world, "box-a") and secret(world, "box-a-credentials"), 15)
    await world.kube.delete_object(C.AGENTBOX_PLURAL, world.namespace, "box-a")
    await eventually(lambda: world.box("box-a") is None, 15, what="the box gone (finalizer released)")
    await eventually(lambda: pod(world, "box-a") is None and secret(world, "box-a-credentials") is None, 10,
                     what="pod and Secret garbage-collected")
    # The user's Secret and Subscription stay.
    assert secret(world, "claude-login") is not None
    assert world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, "claude-a") is not None
