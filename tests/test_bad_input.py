"""Bad input against the real operator (issue 9): every mistake a user (or a box) can make ends as a
condition with a reason and ONE Warning Event naming the field; nothing else is touched (no pod, no box
Secret, the user's Secrets and Subscriptions as created); a healthy box beside them is still resumed on
time; and the planted login text never shows up in a status, an Event or a log.

Three groups, each ONE run shared by its cases (the first case of a group runs it; the others read the
snapshot it left), so 80-odd cases cost three worlds:

* SCHEMA: objects the CRD schema refuses (422 naming the field; nothing stored; the operator never
  sees them). API emulator only.
* SPEC: AgentBoxes and Subscriptions the schema accepts and the controller must refuse: missing
  dependencies, broken logins, malformed `spec.template` shapes, an unknown `spec.container`, a bad
  time zone, bad rotation groups. One operator run with all of them and one healthy box.
* BOX: input that only the running box gives: invalid user patterns, bad annotations, bad usage files
  in the box, a screen too large to capture, a limit line dated in year 9999. One operator run with a
  pod per case and one healthy box.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

import pytest

from controller import constants as C
from agentbox_sim.world import TabSpec, World, claude_login, codex_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component

# Fake token text planted in the broken login files: must never leave the Secrets.
LEAK_ACCESS = "sk-ant-oat01-LEAKCHECK-a1b2c3d4e5"
LEAK_REFRESH = "sk-ant-ort01-LEAKCHECK-f6e7d8c9b0"
LEAK_CODEX = "codex-access-LEAKCHECK-0099887766"
LEAKS = (LEAK_ACCESS, LEAK_REFRESH, LEAK_CODEX)
GOOD_TOKEN = "tok-good-claude"
GOOD = "b-good"
IMG = "agentbox-box:dev"


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def ctr(**kw: Any) -> dict[str, Any]:
    return {"name": "box", "image": IMG, **kw}


def tmpl(spec: Any = None, **top: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": [ctr()]} if spec is None else spec, **top}}


# ------------------------------------------------------------------------------------------------ snapshots
@dataclass
class Snapshot:
    """What a group run left behind (plain data, read by every case of the group)."""

    boxes: dict[str, dict[str, Any]] = field(default_factory=dict)
    subs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    pods: set[str] = field(default_factory=set)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    user_secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    user_subs: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)     # SCHEMA: case -> error text
    good_reset: float = 0.0
    good_sent_at: float | None = None
    good_submits: list[str] = field(default_factory=list)
    logs: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def warnings(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if (e.get("involvedObject") or {}).get("name") == name
                and e.get("type") == "Warning"]

    def normal(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events if (e.get("involvedObject") or {}).get("name") == name
                and e.get("type") == "Normal"]


_RUNS: dict[str, Snapshot | BaseException] = {}


async def group(name: str, tmp_path_factory: pytest.TempPathFactory,
                runner: Callable[[World], Awaitable[Snapshot]], settings: Any = None) -> Snapshot:
    """Run a group once per session; every case of it reads the same snapshot."""
    if name not in _RUNS:
        from harness.world_fixtures import FAST

        try:
            async with World(tmp_path_factory.mktemp(name) / "world", settings or FAST) as world:
                _RUNS[name] = await runner(world)
        except BaseException as exc:  # noqa: BLE001 - reported by every case of the group
            _RUNS[name] = exc
    result = _RUNS[name]
    if isinstance(result, BaseException):
        raise RuntimeError(f"the {name} group run failed: {result!r}") from result
    return result


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage() + repr(record.args) + str(record.exc_text or ""))
        except Exception:  # noqa: BLE001
            self.lines.append(str(record.msg))


async def healthy_box(world: World, reset_in: float = 8.0) -> float:
    """The good box: its tab hits a limit that resets in `reset_in` s and must be resumed then."""
    reset = float(math.ceil(time.time() + reset_in))
    world.provider.add_login(GOOD_TOKEN, "acct-good")
    world.provider.set_windows("acct-good", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                               weekly=(40.0, utc_in(86400)))
    await world.add_secret("login-good", "credentials.json", claude_login(GOOD_TOKEN))
    await world.add_subscription("s-good", "anthropic", "login-good", "credentials.json")
    await world.add_box(GOOD, "claude-code", "s-good")
    return reset


async def finish(world: World, snap: Snapshot, logs: _Logs) -> Snapshot:
    """Wait for the good box's resume, then take the snapshot."""
    await world.run_pod(GOOD, [TabSpec("main", fake_agent_argv("claude-code", snap.good_reset))])

    def sent() -> float | None:
        return next((e["t"] for e in world.agent_log(GOOD, "main") if e["event"] == "submit"), None)
    await eventually(sent, snap.good_reset - time.time() + 40, what="the healthy box resumed")
    snap.good_sent_at = sent()
    from harness.world_fixtures import watcher_passes

    snap.extra["passes"] = {name: watcher_passes(world, name) for name in snap.extra.get("boxes", [])}
    await world.stop_operator()  # flush: every Event and log line is written
    snap.good_submits = [e["text"] for e in world.agent_log(GOOD, "main") if e["event"] == "submit"]
    snap.boxes = {b["metadata"]["name"]: b for b in world.kube.objects(C.AGENTBOX_PLURAL, world.namespace)}
    snap.subs = {s["metadata"]["name"]: s for s in world.kube.objects(C.SUBSCRIPTION_PLURAL, world.namespace)}
    snap.events = world.events()
    snap.pods = {p["metadata"]["name"] for p in world.kube.objects("v1/pods", world.namespace)}
    snap.secrets = {s["metadata"]["name"]: s for s in world.kube.objects("v1/secrets", world.namespace)}
    snap.logs = "\n".join(logs.lines)
    return snap


def assert_good_box_served(snap: Snapshot) -> None:
    assert snap.good_submits == ["continue"], snap.good_submits
    assert snap.good_sent_at is not None and snap.good_reset <= snap.good_sent_at <= snap.good_reset + 30, \
        (snap.good_reset, snap.good_sent_at)


def assert_one_warning(snap: Snapshot, name: str, reason: str, field_: str) -> None:
    warned = snap.warnings(name)
    assert [e["reason"] for e in warned] == [reason], [(e["reason"], e["message"]) for e in warned]
    assert int(warned[0].get("count") or 1) == 1, warned[0]
    assert field_ in warned[0]["message"], warned[0]["message"]


# ================================================================================================ SCHEMA
SCHEMA_BOXES: dict[str, tuple[dict[str, Any], str]] = {
    "agent-unknown": ({"agent": "cursor"}, "spec.agent"),
    "agent-missing": ({"agent": None}, "agent"),
    "template-missing": ({"template": None}, "template"),
    "template-string": ({"template": "pod.yaml"}, "spec.template"),
    "timezone-too-long": ({"timeZone": "A" * 65}, "spec.timeZone"),
    "container-too-long": ({"container": "c" * 64}, "spec.container"),
    "subscription-empty": ({"subscription": ""}, "spec.subscription"),
    "subscription-too-long": ({"subscription": "s" * 254}, "spec.subscription"),
    "subscription-path": ({"subscription": "../other-ns"}, "spec.subscription"),
    "subscription-upper": ({"subscription": "Claude_Main"}, "spec.subscription"),
    # A Subscription of another namespace (`team-b/s-x`) is no name at all: refused by the schema.
    "rotation-name-slash": ({"whenAgentStops": {"rotation": {"enabled": True, "group": "Selected",
                                                             "subscriptions": ["a", "team-b/s-x"]}}},
                            "spec.whenAgentStops.rotation.subscriptions[1]"),
    "patterns-too-many": ({"detection": {"patterns": [{"regex": f"x{i}"} for i in range(33)]}}, "spec.detection.patterns"),
    "pattern-empty": ({"detection": {"patterns": [{"regex": ""}]}}, "spec.detection.patterns[0].regex"),
    "pattern-too-long": ({"detection": {"patterns": [{"regex": "x" * 501}]}}, "spec.detection.patterns[0].regex"),
    "pattern-kind": ({"detection": {"patterns": [{"regex": "x", "kind": "other"}]}}, "spec.detection.patterns[0].kind"),
    "pattern-no-regex": ({"detection": {"patterns": [{"kind": "usage"}]}}, "regex"),
    "patterns-not-list": ({"detection": {"patterns": "limit"}}, "spec.detection.patterns"),
    "rotation-group": ({"whenAgentStops": {"rotation": {"enabled": True, "group": "Some"}}},
                       "spec.whenAgentStops.rotation.group"),
    "resume-not-bool": ({"whenAgentStops": {"resumeAfterReset": "yes"}}, "spec.whenAgentStops.resumeAfterReset"),
    "rotation-too-many": ({"whenAgentStops": {"rotation": {"enabled": True, "group": "Selected",
                                                           "subscriptions": [f"s{i}" for i in range(65)]}}},
                          "spec.whenAgentStops.rotation.subscriptions"),
}
SCHEMA_SUBS: dict[str, tuple[dict[str, Any], str]] = {
    "sub-provider": ({"provider": "google"}, "spec.provider"),
    "sub-no-ref": ({"credentialsSecretRef": None}, "credentialsSecretRef"),
    "sub-ref-empty-name": ({"credentialsSecretRef": {"name": "", "key": "k"}}, "spec.credentialsSecretRef.name"),
    "sub-ref-name-path": ({"credentialsSecretRef": {"name": "a/../b", "key": "k"}}, "spec.credentialsSecretRef.name"),
    "sub-reserve-high": ({"reserve": {"fiveHourPercent": 150}}, "spec.reserve.fiveHourPercent"),
    "sub-reserve-negative": ({"reserve": {"weeklyPercent": -1}}, "spec.reserve.weeklyPercent"),
}


async def _schema_run(world: World) -> Snapshot:
    snap = Snapshot()
    for name, (change, _) in SCHEMA_BOXES.items():
        spec = {"agent": "claude-code", "subscription": "s-good", **tmpl(), **change}
        spec = {k: v for k, v in spec.items() if v is not None}
        try:
            await world.create(world.box_path(), {"apiVersion": C.API_VERSION, "kind": C.AGENTBOX_KIND,
                                                  "metadata": {"name": name}, "spec": spec})
            snap.refused[name] = ""
        except RuntimeError as exc:
            snap.refused[name] = str(exc)
    for name, (change, _) in SCHEMA_SUBS.items():
        spec = {"provider": "anthropic", "credentialsSecretRef": {"name": "login", "key": "credentials.json"}, **change}
        spec = {k: v for k, v in spec.items() if v is not None}
        try:
            await world.create(world.sub_path(), {"apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND,
                                                  "metadata": {"name": name}, "spec": spec})
            snap.refused[name] = ""
        except RuntimeError as exc:
            snap.refused[name] = str(exc)
    snap.boxes = {b["metadata"]["name"]: b for b in world.kube.objects(C.AGENTBOX_PLURAL, world.namespace)}
    snap.subs = {s["metadata"]["name"]: s for s in world.kube.objects(C.SUBSCRIPTION_PLURAL, world.namespace)}
    return snap


@pytest.mark.parametrize("case", [*SCHEMA_BOXES, *SCHEMA_SUBS])
async def test_schema_refuses_naming_the_field(case: str, tmp_path_factory: pytest.TempPathFactory):
    snap = await group("schema", tmp_path_factory, _schema_run)
    field_ = {**SCHEMA_BOXES, **SCHEMA_SUBS}[case][1]
    text = snap.refused[case]
    assert "422" in text and field_ in text, text
    assert case not in snap.boxes and case not in snap.subs, "nothing stored"


# ================================================================================================ SPEC
# box -> (agent, subscription, extra spec, Ready reason, the field the message names)
SPEC_BOXES: dict[str, tuple[str, str | None, dict[str, Any], str, str]] = {
    # dependencies and logins
    "b-nosub": ("claude-code", "missing", {}, C.R_SUBSCRIPTION_NOT_FOUND, "spec.subscription"),
    "b-nosecret": ("claude-code", "s-nosecret", {}, C.R_SECRET_NOT_FOUND, "spec.credentialsSecretRef.name"),
    "b-nokey": ("claude-code", "s-nokey", {}, C.R_SECRET_KEY_MISSING, "spec.credentialsSecretRef.key"),
    "b-badjson": ("claude-code", "s-badjson", {}, C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
    "b-wrongprov": ("claude-code", "s-wrongprov", {}, C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
    "b-mismatch": ("codex", "s-good", {}, C.R_PROVIDER_MISMATCH, "spec.subscription"),
    "b-shell": ("shell", "s-good", {}, C.R_UNSUPPORTED_AGENT, "spec.agent"),
    "b-shell-rotation": ("shell", None, {"whenAgentStops": {"rotation": {"enabled": True}}}, C.R_UNSUPPORTED_AGENT,
                         "spec.agent"),
    "b-codex-nosub": ("codex", None, {}, C.R_INVALID_SPEC, "spec.subscription"),
    # spec.template shapes the CRD leaves open
    "t-notemplate": ("claude-code", "s-good", tmpl({}), C.R_INVALID_SPEC, "spec.template.spec.containers"),
    "t-nocontainers": ("claude-code", "s-good", tmpl({"containers": []}), C.R_INVALID_SPEC,
                       "spec.template.spec.containers"),
    "t-no-spec": ("claude-code", "s-good", {"template": {"metadata": {}}}, C.R_INVALID_SPEC, "spec.template.spec"),
    "t-spec-string": ("claude-code", "s-good", tmpl("pod"), C.R_INVALID_SPEC, "spec.template.spec"),
    "t-spec-list": ("claude-code", "s-good", tmpl([]), C.R_INVALID_SPEC, "spec.template.spec"),
    "t-containers-object": ("claude-code", "s-good", tmpl({"containers": ctr()}), C.R_INVALID_SPEC,
                            "spec.template.spec.containers"),
    "t-containers-string": ("claude-code", "s-good", tmpl({"containers": "box"}), C.R_INVALID_SPEC,
                            "spec.template.spec.containers"),
    "t-container-string": ("claude-code", "s-good", tmpl({"containers": ["box"]}), C.R_INVALID_SPEC,
                           "spec.template.spec.containers[0]"),
    "t-container-noname": ("claude-code", "s-good", tmpl({"containers": [{"image": IMG}]}), C.R_INVALID_SPEC,
                           "spec.template.spec.containers[0].name"),
    "t-container-name-number": ("claude-code", "s-good", tmpl({"containers": [ctr(name=5)]}), C.R_INVALID_SPEC,
                                "spec.template.spec.containers[0].name"),
    "t-container-name-upper": ("claude-code", "s-good", tmpl({"containers": [ctr(name="Box")]}), C.R_INVALID_SPEC,
                               "spec.template.spec.containers[0].name"),
    "t-container-noimage": ("claude-code", "s-good", tmpl({"containers": [{"name": "box"}]}), C.R_INVALID_SPEC,
                            "spec.template.spec.containers[0].image"),
    "t-container-image-number": ("claude-code", "s-good", tmpl({"containers": [ctr(image=7)]}), C.R_INVALID_SPEC,
                                 "spec.template.spec.containers[0].image"),
    "t-duplicate-names": ("claude-code", "s-good", tmpl({"containers": [ctr(), ctr()]}), C.R_INVALID_SPEC,
                          "spec.template.spec.containers[1].name"),
    "t-command-string": ("claude-code", "s-good", tmpl({"containers": [ctr(command="sleep 1")]}), C.R_INVALID_SPEC,
                         "spec.template.spec.containers[0].command"),
    "t-env-object": ("claude-code", "s-good", tmpl({"containers": [ctr(env={"A": "1"})]}), C.R_INVALID_SPEC,
                     "spec.template.spec.containers[0].env"),
    "t-env-string": ("claude-code", "s-good", tmpl({"containers": [ctr(env=["A=1"])]}), C.R_INVALID_SPEC,
                     "spec.template.spec.containers[0].env[0]"),
    "t-env-badname": ("claude-code", "s-good", tmpl({"containers": [ctr(env=[{"name": "1 A"}])]}), C.R_INVALID_SPEC,
                      "spec.template.spec.containers[0].env[0].name"),
    "t-env-value-number": ("claude-code", "s-good", tmpl({"containers": [ctr(env=[{"name": "A", "value": 5}])]}),
                           C.R_INVALID_SPEC, "spec.template.spec.containers[0].env[0].value"),
    "t-mounts-object": ("claude-code", "s-good", tmpl({"containers": [ctr(volumeMounts={"v": "/v"})]}),
                        C.R_INVALID_SPEC, "spec.template.spec.containers[0].volumeMounts"),
    "t-mount-nopath": ("claude-code", "s-good", tmpl({"containers": [ctr(volumeMounts=[{"name": "v"}])],
                                                      "volumes": [{"name": "v", "emptyDir": {}}]}),
                       C.R_INVALID_SPEC, "spec.template.spec.containers[0].volumeMounts[0].mountPath"),
    "t-volumes-object": ("claude-code", "s-good", tmpl({"containers": [ctr()], "volumes": {"v": {}}}),
                         C.R_INVALID_SPEC, "spec.template.spec.volumes"),
    "t-volume-string": ("claude-code", "s-good", tmpl({"containers": [ctr()], "volumes": ["v"]}),
                        C.R_INVALID_SPEC, "spec.template.spec.volumes[0]"),
    "t-volume-noname": ("claude-code", "s-good", tmpl({"containers": [ctr()], "volumes": [{"emptyDir": {}}]}),
                        C.R_INVALID_SPEC, "spec.template.spec.volumes[0].name"),
    "t-init-object": ("claude-code", "s-good", tmpl({"containers": [ctr()], "initContainers": {}}),
                      C.R_INVALID_SPEC, "spec.template.spec.initContainers"),
    "t-metadata-list": ("claude-code", "s-good", tmpl(None, metadata=[]), C.R_INVALID_SPEC, "spec.template.metadata"),
    "t-labels-list": ("claude-code", "s-good", tmpl(None, metadata={"labels": ["a"]}), C.R_INVALID_SPEC,
                      "spec.template.metadata.labels"),
    "t-label-number": ("claude-code", "s-good", tmpl(None, metadata={"labels": {"team": 7}}), C.R_INVALID_SPEC,
                       "spec.template.metadata.labels.team"),
    "t-annotations-list": ("claude-code", "s-good", tmpl(None, metadata={"annotations": ["a"]}), C.R_INVALID_SPEC,
                           "spec.template.metadata.annotations"),
    # other fields the schema cannot check
    "c-unknown": ("claude-code", "s-good", {"container": "tmux"}, C.R_INVALID_SPEC, "spec.container"),
    "c-unknown-of-two": ("claude-code", "s-good", {"container": "db", **tmpl({"containers": [
        ctr(), ctr(name="web")]})}, C.R_INVALID_SPEC, "spec.container"),
    "z-unknown-zone": ("claude-code", "s-good", {"timeZone": "Mars/Olympus_Mons"}, C.R_INVALID_SPEC, "imeZone"),
    "z-offset-zone": ("claude-code", "s-good", {"timeZone": "UTC+5"}, C.R_INVALID_SPEC, "imeZone"),
    "r-not-listed": ("claude-code", "s-good", {"whenAgentStops": {"rotation": {
        "enabled": True, "group": "Selected", "subscriptions": ["s-nokey"]}}}, C.R_INVALID_SPEC,
        "spec.whenAgentStops.rotation.subscriptions"),
    "r-only-itself": ("claude-code", "s-good", {"whenAgentStops": {"rotation": {
        "enabled": True, "group": "Selected", "subscriptions": ["s-good"]}}}, C.R_INVALID_SPEC,
        "spec.whenAgentStops.rotation.subscriptions"),
    "r-absent": ("claude-code", "s-good", {"whenAgentStops": {"rotation": {
        "enabled": True, "group": "Selected", "subscriptions": ["s-good", "s-absent"]}}}, C.R_INVALID_SPEC,
        "spec.whenAgentStops.rotation.subscriptions"),
    "r-other-provider": ("claude-code", "s-good", {"whenAgentStops": {"rotation": {
        "enabled": True, "group": "Selected", "subscriptions": ["s-good", "s-codex"]}}}, C.R_INVALID_SPEC,
        "spec.whenAgentStops.rotation.subscriptions"),
}

# Subscription -> (CredentialsValid reason, field named)
SPEC_SUBS = {
    "s-nosecret": (C.R_SECRET_NOT_FOUND, "spec.credentialsSecretRef.name"),
    "s-nokey": (C.R_SECRET_KEY_MISSING, "spec.credentialsSecretRef.key"),
    "s-badjson": (C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
    "s-wrongprov": (C.R_INVALID_LOGIN, "spec.credentialsSecretRef"),
}


async def _spec_run(world: World) -> Snapshot:
    logs = _Logs()
    logging.getLogger().addHandler(logs)
    try:
        world.start_operator()
        snap = Snapshot(good_reset=await healthy_box(world, 10.0))
        # The user's Secrets: one without the key, one not JSON (cut off mid-token), one a Codex
        # auth.json where a Claude Code login is expected.
        await world.add_secret("login-nokey", "other.json", claude_login("tok-other"))
        await world.add_secret("login-badjson", "credentials.json",
                               '{"claudeAiOauth": {"accessToken": "%s", "refreshToken": "%s", "expiresAt": 41'
                               % (LEAK_ACCESS, LEAK_REFRESH))
        await world.add_secret("login-codex", "credentials.json", codex_login(LEAK_CODEX, "acct-x"))
        await world.add_secret("login-codex-ok", "auth.json", codex_login("tok-codex-ok", "acct-c"))
        await world.add_subscription("s-nosecret", "anthropic", "login-absent", "credentials.json")
        await world.add_subscription("s-nokey", "anthropic", "login-nokey", "credentials.json")
        await world.add_subscription("s-badjson", "anthropic", "login-badjson", "credentials.json")
        await world.add_subscription("s-wrongprov", "anthropic", "login-codex", "credentials.json")
        await world.add_subscription("s-codex", "openai", "login-codex-ok", "auth.json")
        snap.user_secrets = {s["metadata"]["name"]: s for s in world.kube.objects("v1/secrets", world.namespace)}
        snap.user_subs = {s["metadata"]["name"]: s["spec"] for s in world.kube.objects(C.SUBSCRIPTION_PLURAL,
                                                                                       world.namespace)}
        for name, (agent, sub, extra, _, _) in SPEC_BOXES.items():
            await world.add_box(name, agent, sub, **extra)
        for name, (_, _, _, reason, _) in SPEC_BOXES.items():
            await eventually(lambda: condition(world.box(name), C.COND_READY).get("reason") == reason, 30,
                             what=f"{name}: Ready reason {reason}")
        for name, (reason, _) in SPEC_SUBS.items():
            await eventually(lambda: condition(world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, name),
                                               C.COND_CREDENTIALS_VALID).get("reason") == reason, 20,
                             what=f"{name}: CredentialsValid reason {reason}")
        return await finish(world, snap, logs)
    finally:
        logging.getLogger().removeHandler(logs)


async def spec_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return await group("spec", tmp_path_factory, _spec_run)


@pytest.mark.parametrize("name", list(SPEC_BOXES))
async def test_a_bad_box_gets_a_reason_one_warning_and_nothing_else(name: str,
                                                                    tmp_path_factory: pytest.TempPathFactory):
    snap = await spec_snapshot(tmp_path_factory)
    _, _, _, reason, field_ = SPEC_BOXES[name]
    box = snap.boxes[name]
    cond = condition(box, C.COND_READY)
    assert cond["status"] == "False" and cond["reason"] == reason, cond
    assert field_ in cond["message"], cond["message"]
    assert box["status"]["state"] == "Error"
    assert_one_warning(snap, name, reason, field_)
    assert not set(snap.normal(name)) & {"CreatedPod", "CreatedSecret", "UpdatedSecret"}, snap.normal(name)
    assert name not in snap.pods and f"{name}-credentials" not in snap.secrets
    assert not (box.get("status") or {}).get("pod")
    assert_good_box_served(snap)


@pytest.mark.parametrize("name", list(SPEC_SUBS))
async def test_a_bad_subscription_gets_a_reason_and_one_warning(name: str, tmp_path_factory: pytest.TempPathFactory):
    snap = await spec_snapshot(tmp_path_factory)
    reason, field_ = SPEC_SUBS[name]
    cond = condition(snap.subs[name], C.COND_CREDENTIALS_VALID)
    assert cond["status"] == "False" and cond["reason"] == reason and field_ in cond["message"], cond
    assert snap.subs[name]["status"]["state"] == "Unknown"
    assert_one_warning(snap, name, reason, field_)
    assert snap.subs[name]["spec"] == snap.user_subs[name]
    assert_good_box_served(snap)


async def test_nothing_else_is_touched_and_no_login_leaks(tmp_path_factory: pytest.TempPathFactory):
    snap = await spec_snapshot(tmp_path_factory)
    assert snap.pods == {GOOD}
    assert sorted(snap.secrets) == sorted([*snap.user_secrets, f"{GOOD}-credentials"])
    for name, before in snap.user_secrets.items():
        now = snap.secrets[name]
        assert now["data"] == before["data"], f"Secret {name} was modified"
        assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], name
        assert not now["metadata"].get("ownerReferences"), name
    for name, spec in snap.user_subs.items():
        assert snap.subs[name]["spec"] == spec
    assert condition(snap.subs["s-good"], C.COND_CREDENTIALS_VALID).get("status") == "True"
    places = {
        "box status": json.dumps([b.get("status") for b in snap.boxes.values()]),
        "subscription status": json.dumps([s.get("status") for s in snap.subs.values()]),
        "events": json.dumps(snap.events),
        "operator log": snap.logs,
        "box credentials Secrets": json.dumps([s for n, s in snap.secrets.items() if n.endswith("-credentials")]),
    }
    assert len(snap.logs.splitlines()) > 20, "the operator's log was captured"
    for where, text in places.items():
        for leak in LEAKS:
            assert leak not in text, f"login content {leak[:12]}... leaked into the {where}"
    assert_good_box_served(snap)


# ================================================================================================ BOX
BAD_PATTERNS = ["(unclosed", "a{2,1}", "[z-a]", "(?P<x>a)(?P<x>b)", "*start"]
STATUSLINE = ".agentbox/statusline.json"

# case -> (box, InputIgnored/NeedsAttention reason, the field or file the message names)
BOX_CASES: dict[str, tuple[str, str, str]] = {
    **{f"pattern-{i}": ("w-patterns", C.R_INVALID_PATTERN, f"spec.detection.patterns[{i}].regex")
       for i in range(len(BAD_PATTERNS))},
    "annotation-not-a-date": ("w-ann-text", C.R_INVALID_ANNOTATION, f"metadata.annotations[{C.ANNOTATION_RESUME_AT}]"),
    "annotation-year-9999": ("w-ann-9999", C.R_INVALID_ANNOTATION, f"metadata.annotations[{C.ANNOTATION_RESUME_AT}]"),
    "statusline-too-large": ("w-file-huge", C.R_INVALID_BOX_FILE, f"~/{STATUSLINE}"),
    "statusline-not-json": ("w-file-text", C.R_INVALID_BOX_FILE, f"~/{STATUSLINE}"),
    "statusline-bad-field": ("w-file-field", C.R_INVALID_BOX_FILE, "used_percentage"),
    "screen-too-large": ("w-screen-huge", C.R_BOX_OUTPUT_TOO_LARGE, "printed more than"),
}
BOX_LIMIT_IN = 3600.0  # the bad boxes' tabs sit on a limit that resets in an hour


async def _box_run(world: World) -> Snapshot:
    world.start_operator()
    snap = Snapshot(good_reset=await healthy_box(world, 12.0))
    limited = fake_agent_argv("claude-code", time.time() + BOX_LIMIT_IN)
    boxes: dict[str, dict[str, Any]] = {
        "w-patterns": {"detection": {"patterns": [{"regex": r, "kind": "usage"} for r in BAD_PATTERNS]}},
        "w-ann-text": {}, "w-ann-9999": {}, "w-file-huge": {}, "w-file-text": {}, "w-file-field": {},
        "w-screen-huge": {}, "w-screen-9999": {},
    }
    # The bad boxes run on their own subscription, exhausted for the next hour: nothing is due on them.
    world.provider.add_login("tok-box", "acct-box")
    world.provider.set_windows("acct-box", five_hour=(100.0, utc_in(BOX_LIMIT_IN)), weekly=(40.0, utc_in(86400)))
    await world.add_secret("login-box", "credentials.json", claude_login("tok-box"))
    await world.add_subscription("s-box", "anthropic", "login-box", "credentials.json")
    for name, extra in boxes.items():
        await world.add_box(name, "claude-code", "s-box", **extra)
    files = {
        "w-file-huge": json.dumps({"rate_limits": {"five_hour": {"used_percentage": 100}}, "pad": "x" * 100_000}),
        "w-file-text": "{not json",
        "w-file-field": json.dumps({"rate_limits": {"five_hour": {"used_percentage": "lots"}}}),
    }
    for name in boxes:
        if name == "w-screen-huge":
            # A tab with 1000 lines of 400 columns: once its window is enlarged, the screen is 240 KB.
            tab = TabSpec("main", ["sh", "-c", "yes \"$(printf %0400d 0)\" | head -n 1000; exec sleep 3600"])
        elif name == "w-screen-9999":
            tab = TabSpec("main", ["sh", "-c", "printf '\\342\\216\\277  You'\"'\"'ve hit your limit \\302\\267 resets "
                                               "Dec 31, 9999, 11:59pm (UTC)\\n'; exec sleep 3600"])
        else:
            tab = TabSpec("main", limited)
        await world.run_pod(name, [tab])
        if name in files:
            path = world.pod_dir(name) / STATUSLINE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[name])
    world.tmux("w-screen-huge", "resize-window", "-t", f"={C.TMUX_SESSION}:main", "-x", "400", "-y", "600")
    await world.patch(world.box_path("w-ann-text"), {"metadata": {"annotations": {C.ANNOTATION_RESUME_AT: "tomorrow 5pm"}}})
    await world.patch(world.box_path("w-ann-9999"), {"metadata": {"annotations": {
        C.ANNOTATION_RESUME_AT: "9999-12-31T23:59:59Z"}}})
    for case, (box, reason, _) in BOX_CASES.items():
        ctype = C.COND_NEEDS_ATTENTION if reason == C.R_BOX_OUTPUT_TOO_LARGE else C.COND_INPUT_IGNORED
        await eventually(lambda: condition(world.box(box), ctype).get("reason") == reason, 30,
                         what=f"{case}: {ctype} {reason}")
    await eventually(lambda: condition(world.box("w-screen-9999"), C.COND_RATE_LIMITED).get("status") == "True", 30,
                     what="the year-9999 tab seen as limited")
    snap.extra["boxes"] = list(boxes)
    return await finish(world, snap, _Logs())


async def box_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    from harness.world_fixtures import FAST

    # stream_rescan_s: on the live stream an unchanged box is re-passed only every rescan; "its watcher
    # kept running" (passes after its bad input was reported) needs passes, so rescan as often as the scan.
    return await group("box", tmp_path_factory, _box_run, FAST.model_copy(update={
        "exec_max_output_bytes": 131072, "stream_rescan_s": FAST.scan_interval_s}))


@pytest.mark.parametrize("case", list(BOX_CASES))
async def test_bad_input_from_a_running_box_gets_a_reason_and_one_warning(case: str,
                                                                        tmp_path_factory: pytest.TempPathFactory):
    snap = await box_snapshot(tmp_path_factory)
    box, reason, field_ = BOX_CASES[case]
    ctype = C.COND_NEEDS_ATTENTION if reason == C.R_BOX_OUTPUT_TOO_LARGE else C.COND_INPUT_IGNORED
    cond = condition(snap.boxes[box], ctype)
    assert cond["status"] == "True" and cond["reason"] == reason and field_ in cond["message"], cond
    mine = [e for e in snap.warnings(box) if field_ in e["message"]]
    assert len(mine) == 1 and mine[0]["reason"] == reason and int(mine[0].get("count") or 1) == 1, mine
    assert not [e for e in snap.warnings(box) if e["reason"] != reason], "no other Warning"
    assert snap.extra["passes"][box] >= 3, "its watcher kept running"
    assert_good_box_served(snap)


async def test_a_limit_line_dated_year_9999_is_an_unknown_reset_not_a_crash(tmp_path_factory: pytest.TempPathFactory):
    snap = await box_snapshot(tmp_path_factory)
    box = snap.boxes["w-screen-9999"]
    tab = next(t for t in box["status"]["tabs"] if t["name"] == "main")
    assert tab["state"] == "RateLimited"
    assert not tab.get("resetsAt", "").startswith("9999"), tab
    assert snap.extra["passes"]["w-screen-9999"] >= 3, "its watcher kept running"
    assert_good_box_served(snap)


# ================================================================================================ recovery
async def test_missing_subscription_then_created_recovers(world: World):
    """A box naming a Subscription that does not exist yet: SubscriptionNotFound, no pod; the
    Subscription and its Secret appear (the Secret last); the reconcile retries and the box gets
    its pod. The Subscription's CredentialsValid follows its Secret without any edit."""
    world.start_operator()
    world.provider.add_login("tok-late", "acct-late")
    await world.add_box("b-late", "claude-code", "late")
    await eventually(lambda: condition(world.box("b-late"), C.COND_READY).get("reason") == C.R_SUBSCRIPTION_NOT_FOUND,
                     15, what="SubscriptionNotFound")

    def warnings() -> list[str]:
        return [e["message"] for e in world.events("b-late")
                if e.get("type") == "Warning" and e.get("reason") == C.R_SUBSCRIPTION_NOT_FOUND]
    await eventually(warnings, 10)
    assert "spec.subscription" in warnings()[0]
    assert not [p for p in world.kube.objects("v1/pods", world.namespace)]

    await world.add_subscription("late", "anthropic", "late-login", "credentials.json")
    await eventually(lambda: condition(world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, "late"),
                                       C.COND_CREDENTIALS_VALID).get("reason") == C.R_SECRET_NOT_FOUND,
                     10, what="CredentialsValid SecretNotFound")
    await world.add_secret("late-login", "credentials.json", claude_login("tok-late"))

    pods = lambda: [p["metadata"]["name"] for p in world.kube.objects("v1/pods", world.namespace)]  # noqa: E731
    await eventually(lambda: "b-late" in pods(), world.settings.retry_delay_s + 15, what="the box pod after the retry")
    await eventually(lambda: (world.box("b-late").get("status") or {}).get("pod") == "b-late", 10)
    assert world.box("b-late")["status"]["subscription"] == "late"
    # the Event is posted after the status write seen above
    await eventually(lambda: any(e["reason"] == "CreatedPod" for e in world.events("b-late")), 10, what="CreatedPod")
    await eventually(lambda: condition(world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, "late"),
                                       C.COND_CREDENTIALS_VALID).get("status") == "True",
                     world.settings.usage_interval_s + 10, what="CredentialsValid True once the Secret exists")
