"""Bad input against the real operator: every mistake a user can make in an AgentBox or a
Subscription ends as a condition with a reason and a Warning Event naming the field; nothing else
is touched (no pod, no box Secret, the user's Secrets untouched); a good box created alongside
still gets its pod; and the login file's content never shows up in a status, an Event or a log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from controller import constants as C
from controller.sim.world import World, claude_login, codex_login, eventually

pytestmark = pytest.mark.component

# Fake token text planted in the broken login files: must never leave the Secrets.
LEAK_ACCESS = "sk-ant-oat01-LEAKCHECK-a1b2c3d4e5"
LEAK_REFRESH = "sk-ant-ort01-LEAKCHECK-f6e7d8c9b0"
LEAK_CODEX = "codex-access-LEAKCHECK-0099887766"
LEAKS = (LEAK_ACCESS, LEAK_REFRESH, LEAK_CODEX)
GOOD_TOKEN = "tok-good-claude"

# How long the reconcile waits before retrying a missing dependency (boxes.py `_fail` retry),
# read from the settings once it is one.
RETRY_S = 30.0


def sub_path(world: World, name: str = "") -> str:
    base = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{world.namespace}/{C.SUBSCRIPTION_PLURAL}"
    return f"{base}/{name}" if name else base


def subscription(world: World, name: str) -> dict[str, Any]:
    return world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, name) or {}


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def warnings(world: World, name: str, reason: str) -> list[str]:
    return [e["message"] for e in world.events(name) if e.get("type") == "Warning" and e.get("reason") == reason]


def pods(world: World) -> list[str]:
    return sorted(p["metadata"]["name"] for p in world.kube.objects("v1/pods", world.namespace))


def secrets(world: World) -> dict[str, dict[str, Any]]:
    return {s["metadata"]["name"]: s for s in world.kube.objects("v1/secrets", world.namespace)}


# (box, agent, subscription, extra spec) -> (reason, the field its message names)
BAD_BOXES = {
    "b-nosub": ("claude-code", "missing", {}, C.R_SUBSCRIPTION_NOT_FOUND, "spec.subscription"),
    "b-nosecret": ("claude-code", "s-nosecret", {}, C.R_SECRET_NOT_FOUND, "spec.credentialsSecretRef.name"),
    "b-nokey": ("claude-code", "s-nokey", {}, C.R_SECRET_KEY_MISSING, "spec.credentialsSecretRef.key"),
    "b-badjson": ("claude-code", "s-badjson", {}, C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
    "b-wrongprov": ("claude-code", "s-wrongprov", {}, C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
    "b-mismatch": ("codex", "s-good", {}, C.R_PROVIDER_MISMATCH, "spec.subscription"),
    "b-shell": ("shell", "s-good", {}, C.R_UNSUPPORTED_AGENT, "spec.agent"),
    "b-notemplate": ("claude-code", "s-good", {"template": {"spec": {}}}, C.R_INVALID_SPEC,
                     "spec.template.spec.containers"),
    "b-nocontainers": ("claude-code", "s-good", {"template": {"spec": {"containers": []}}}, C.R_INVALID_SPEC,
                       "spec.template.spec.containers"),
}

# Subscription -> (CredentialsValid reason, field named)
BAD_SUBS = {
    "s-nosecret": (C.R_SECRET_NOT_FOUND, "spec.credentialsSecretRef.name"),
    "s-nokey": (C.R_SECRET_KEY_MISSING, "spec.credentialsSecretRef.key"),
    "s-badjson": (C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
    "s-wrongprov": (C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
}


async def test_bad_inputs_get_reasons_and_a_good_box_still_runs(world: World, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    world.start_operator()
    world.provider.add_login(GOOD_TOKEN, "acct-good")

    # The user's Secrets: one good, one without the key, one not JSON (cut off mid-token), one a Codex
    # auth.json where a Claude Code login is expected.
    await world.add_secret("login-good", "credentials.json", claude_login(GOOD_TOKEN))
    await world.add_secret("login-nokey", "other.json", claude_login("tok-other"))
    await world.add_secret("login-badjson", "credentials.json",
                           '{"claudeAiOauth": {"accessToken": "%s", "refreshToken": "%s", "expiresAt": 41'
                           % (LEAK_ACCESS, LEAK_REFRESH))
    await world.add_secret("login-codex", "credentials.json", codex_login(LEAK_CODEX, "acct-x"))
    await world.add_subscription("s-good", "anthropic", "login-good", "credentials.json")
    await world.add_subscription("s-nosecret", "anthropic", "login-absent", "credentials.json")
    await world.add_subscription("s-nokey", "anthropic", "login-nokey", "credentials.json")
    await world.add_subscription("s-badjson", "anthropic", "login-badjson", "credentials.json")
    await world.add_subscription("s-wrongprov", "anthropic", "login-codex", "credentials.json")
    user_secrets = {name: s for name, s in secrets(world).items()}
    user_subs = {name: subscription(world, name)["spec"] for name in ("s-good", *BAD_SUBS)}

    # An unknown agent never reaches the operator: the CRD schema refuses it with 422 naming spec.agent.
    with pytest.raises(RuntimeError) as refused:
        await world.add_box("b-unknown", "cursor", "s-good")
    assert "422" in str(refused.value) and "spec.agent" in str(refused.value), str(refused.value)
    assert world.box("b-unknown") is None

    for name, (agent, sub, extra, _, _) in BAD_BOXES.items():
        await world.add_box(name, agent, sub, **extra)
    await world.add_box("b-good", "claude-code", "s-good")

    # The good box gets its pod and Secret whatever its neighbours do.
    await eventually(lambda: (world.box("b-good").get("status") or {}).get("pod") == "b-good", 20,
                     what="status.pod of the good box")
    assert "b-good" in pods(world)
    assert "b-good-credentials" in secrets(world)

    # Every bad box: Ready False with its reason, a message naming the field, state Error, and a
    # Warning Event with the same reason naming the field.
    for name, (_, _, _, reason, field) in BAD_BOXES.items():
        await eventually(lambda: condition(world.box(name), C.COND_READY).get("reason") == reason, 20,
                         what=f"{name}: Ready reason {reason}")
        cond = condition(world.box(name), C.COND_READY)
        assert cond["status"] == "False", (name, cond)
        assert field in cond["message"], (name, cond["message"])
        assert world.box(name)["status"]["state"] == "Error"
        await eventually(lambda: warnings(world, name, reason), 10, what=f"{name}: Warning Event {reason}")
        assert all(field in m for m in warnings(world, name, reason)), (name, warnings(world, name, reason))
    assert "shell does not run on a subscription" in condition(world.box("b-shell"), C.COND_READY)["message"]
    assert "not valid JSON" in condition(world.box("b-badjson"), C.COND_READY)["message"]
    assert "Codex auth.json" in condition(world.box("b-wrongprov"), C.COND_READY)["message"]
    assert "is for anthropic" in condition(world.box("b-mismatch"), C.COND_READY)["message"]

    # Every bad Subscription: CredentialsValid False with the reason, and a Warning Event.
    for name, (reason, field) in BAD_SUBS.items():
        await eventually(lambda: condition(subscription(world, name), C.COND_CREDENTIALS_VALID).get("reason") == reason,
                         15, what=f"{name}: CredentialsValid reason {reason}")
        cond = condition(subscription(world, name), C.COND_CREDENTIALS_VALID)
        assert cond["status"] == "False" and field in cond["message"], (name, cond)
        assert subscription(world, name)["status"]["state"] == "Unknown"
        await eventually(lambda: warnings(world, name, reason), 10, what=f"{name}: Warning Event {reason}")
        assert all(field in m for m in warnings(world, name, reason))
    await eventually(lambda: condition(subscription(world, "s-good"), C.COND_CREDENTIALS_VALID).get("status") == "True",
                     10, what="s-good: CredentialsValid True")

    # Nothing else touched: one pod, one box Secret, the user's Secrets and Subscription specs as created.
    assert pods(world) == ["b-good"]
    now = secrets(world)
    assert sorted(now) == sorted([*user_secrets, "b-good-credentials"])
    for name, before in user_secrets.items():
        assert now[name]["data"] == before["data"], f"Secret {name} was modified"
        assert now[name]["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], name
        assert not now[name]["metadata"].get("ownerReferences"), name
    for name, spec in user_subs.items():
        assert subscription(world, name)["spec"] == spec
    for name in BAD_BOXES:
        assert not (world.box(name).get("status") or {}).get("pod"), name

    # The planted token text appears nowhere but in the user's Secrets.
    await world.stop_operator()  # flush: every log line and Event is written
    places = {
        "box status": json.dumps([b.get("status") for b in world.kube.objects(C.AGENTBOX_PLURAL, world.namespace)]),
        "subscription status": json.dumps([s.get("status") for s in
                                           world.kube.objects(C.SUBSCRIPTION_PLURAL, world.namespace)]),
        "events": json.dumps(world.events()),
        "operator log": caplog.text + "\n".join(r.getMessage() + repr(r.args) + str(r.exc_text or "")
                                                for r in caplog.records),
        "box credentials Secrets": json.dumps([s for n, s in secrets(world).items() if n.endswith("-credentials")]),
    }
    assert len(caplog.records) > 20, "the operator's log was captured"
    for where, text in places.items():
        for leak in LEAKS:
            assert leak not in text, f"login content {leak[:12]}... leaked into the {where}"


async def test_missing_subscription_then_created_recovers(world: World):
    """A box naming a Subscription that does not exist yet: SubscriptionNotFound, no pod; the
    Subscription and its Secret appear (the Secret last); the reconcile retries and the box gets
    its pod. The Subscription's CredentialsValid follows its Secret without any edit."""
    world.start_operator()
    world.provider.add_login("tok-late", "acct-late")
    await world.add_box("b-late", "claude-code", "late")
    await eventually(lambda: condition(world.box("b-late"), C.COND_READY).get("reason") == C.R_SUBSCRIPTION_NOT_FOUND,
                     15, what="SubscriptionNotFound")
    await eventually(lambda: warnings(world, "b-late", C.R_SUBSCRIPTION_NOT_FOUND), 10)
    assert "spec.subscription" in warnings(world, "b-late", C.R_SUBSCRIPTION_NOT_FOUND)[0]
    assert pods(world) == []

    await world.add_subscription("late", "anthropic", "late-login", "credentials.json")
    await eventually(lambda: condition(subscription(world, "late"), C.COND_CREDENTIALS_VALID).get("reason")
                     == C.R_SECRET_NOT_FOUND, 10, what="CredentialsValid SecretNotFound")
    await world.add_secret("late-login", "credentials.json", claude_login("tok-late"))

    retry = getattr(world.settings, "retry_delay_s", RETRY_S)
    await eventually(lambda: "b-late" in pods(world), retry + 15, what="the box pod after the retry")
    await eventually(lambda: (world.box("b-late").get("status") or {}).get("pod") == "b-late", 10)
    assert condition(world.box("b-late"), C.COND_READY)["reason"] == C.R_POD_PENDING
    assert world.box("b-late")["status"]["subscription"] == "late"
    assert any(e["reason"] == "CreatedPod" for e in world.events("b-late"))
    # The reader re-checks the login every usage interval; jitter is only applied to reads.
    await eventually(lambda: condition(subscription(world, "late"), C.COND_CREDENTIALS_VALID).get("status") == "True",
                     world.settings.usage_interval_s + 10, what="CredentialsValid True once the Secret exists")
