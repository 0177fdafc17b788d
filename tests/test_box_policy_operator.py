"""The box policy with the real operator against the emulator: a refused template gets no pod and no
credentials Secret, a `Ready=False PolicyViolation` condition and one Warning Event naming the field,
while a healthy box beside it is served; fixing the template brings the pod; an allowed template's pod
carries the restricted profile's defaults; the policy can be switched off by the platform admin."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controller import constants as C
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in
from test_box_policy import restricted_problems

pytestmark = pytest.mark.component

PRIVILEGED = {"spec": {"containers": [
    {"name": "box", "image": "agentbox-box:dev"},
    {"name": "side", "image": "agentbox-box:dev", "securityContext": {"privileged": True}}]}}
FIELD = "spec.template.spec.containers[1].securityContext.privileged"


def ready(world: World, name: str) -> dict[str, Any]:
    box = world.box(name) or {}
    return next((c for c in (box.get("status") or {}).get("conditions") or [] if c["type"] == C.COND_READY), {})


def pod(world: World, name: str) -> dict[str, Any] | None:
    return world.kube.get("v1/pods", world.namespace, name)


def warnings(world: World, name: str) -> list[dict[str, Any]]:
    return [e for e in world.events(name) if e.get("type") == "Warning"]


async def subscription(world: World) -> None:
    world.provider.add_login("tok-a", "acct-a")
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")


async def test_privileged_template_gets_no_pod_and_one_warning_while_a_healthy_box_runs(world: World):
    world.start_operator()
    await subscription(world)
    await world.add_box("bad", "claude-code", "claude-a", template=PRIVILEGED)
    await world.add_box("good", "claude-code", "claude-a")

    await eventually(lambda: ready(world, "bad").get("reason") == C.R_POLICY_VIOLATION, 15,
                     what="the refused box's condition")
    cond = ready(world, "bad")
    assert cond["status"] == "False" and FIELD in cond["message"]
    assert world.box("bad")["status"]["state"] == "Error"

    # The healthy box beside it is served: pod created, started, Ready. Its tab waits on a limit three
    # hours away, exhausted in the usage API too: nothing to resume during the test, whatever the hour
    # (a reset in 2100 printed as 'resets 12am' was the next midnight: resumed when run between 0:00 and 1:00)
    world.provider.set_windows("acct-a", five_hour=(100.0, utc_in(3 * 3600)), weekly=(40.0, utc_in(86400)))
    await world.run_pod("good", [TabSpec("main", fake_agent_argv("claude-code", time.time() + 3 * 3600))])
    await eventually(lambda: ready(world, "good").get("status") == "True", 15, what="the healthy box Ready")

    assert pod(world, "bad") is None
    assert world.kube.get("v1/secrets", world.namespace, "bad-credentials") is None, "nothing written for it"
    found = warnings(world, "bad")
    assert len(found) == 1, [e["message"] for e in found]
    assert found[0]["reason"] == C.R_POLICY_VIOLATION and FIELD in found[0]["message"]
    assert warnings(world, "good") == []

    # The good box's pod carries the restricted profile's defaults the controller fills in.
    spec = pod(world, "good")["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}.items() <= spec["securityContext"].items()
    assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    assert restricted_problems(spec) == [], "the pod as created (credentials volume included) is restricted"

    # The author fixes the template: the pod comes, the condition clears.
    fixed = {"spec": {"containers": [PRIVILEGED["spec"]["containers"][0]]}}
    await world.patch(world.box_path("bad"), {"spec": {"template": fixed}})
    await eventually(lambda: pod(world, "bad"), 15, what="the fixed box's pod")
    await eventually(lambda: ready(world, "bad").get("reason") == C.R_POD_PENDING, 10, what="the condition cleared")


@pytest.mark.parametrize("template, field", [
    ({"spec": {"containers": [{"name": "box", "image": "i"}], "hostPID": True}}, "spec.template.spec.hostPID"),
    ({"spec": {"containers": [{"name": "box", "image": "i"}],
               "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "spec.template.spec.volumes[0].hostPath"),
    ({"spec": {"containers": [{"name": "box", "image": "i"}], "serviceAccountName": "ci-deployer"}},
     "spec.template.spec.serviceAccountName"),
    ({"spec": {"containers": [{"name": "box", "image": "i"}],
               "volumes": [{"name": "s", "secret": {"secretName": "claude-login"}}]}},
     "spec.template.spec.volumes[0].secret.secretName"),
], ids=["hostPID", "hostPath", "serviceAccount", "other-secret"])
async def test_each_escape_is_refused_by_the_operator(world: World, template: dict[str, Any], field: str):
    world.start_operator()
    await subscription(world)
    await world.add_box("bad", "claude-code", "claude-a", template=template)
    await eventually(lambda: ready(world, "bad").get("reason") == C.R_POLICY_VIOLATION, 15, what="the condition")
    assert field in ready(world, "bad")["message"]
    await eventually(lambda: warnings(world, "bad"), 10, what="the Warning Event")
    assert pod(world, "bad") is None


async def test_policy_off_lets_the_template_through(world: World):
    world.settings = world.settings.model_copy(update={"box_policy": False})
    world.start_operator()
    await subscription(world)
    await world.add_box("bad", "claude-code", "claude-a", template=PRIVILEGED)
    created = await eventually(lambda: pod(world, "bad"), 15, what="the pod")
    assert created["spec"]["containers"][1]["securityContext"] == {"privileged": True}
    assert "automountServiceAccountToken" not in created["spec"]
