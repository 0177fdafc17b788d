"""Table tests of the box's conditions and state (`controller.domain.box.conditions`, `controller.domain.box.state`),
each by itself: pure, no I/O.

`conditions`: Ready (the container and its session), PodOutOfDate, which conditions are the watcher's to write
(`owned`), the statuses of a squatting pod and of a box whose tabs are not watched. `state`: the watched box's
status (state, fields, the watcher's conditions, gauges) and the status of a pass whose capture failed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from controller import constants as C
from controller.domain.box import (
    CAPTURE_NO_SESSION, CAPTURE_TOO_LARGE, POD_NOT_OWNED, READY_REASONS, CaptureFailure, CheckSession, Memory,
    SessionSeen, StreamView,
)
from controller.domain.box.conditions import owned, ready_conditions, ready_status, squatter_status, unwatched_status
from controller.domain.box.state import capture_failed, tabs_status, watched_status
from controller.domain.podstate import ContainerView
from controller.domain.resume import Phase, TabRecord
from harness.decide_cases import NOW, RUNNING, observe
from harness.rule_cases import condition, kinds, pass_events, run_rule

pytestmark = pytest.mark.unit

WAITING = ContainerView(False, C.R_CONTAINER_WAITING, "CrashLoopBackOff")


def stored(type_: str, status: str, reason: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "m", "lastTransitionTime": "t"}


def session(exists: bool) -> Any:
    return lambda a: SessionSeen(exists) if isinstance(a, CheckSession) else None


# ---------------------------------------------------------------------------------------------- Ready
# id, container, session, stored Ready, out_of_date -> Ready (status, reason) or None (not set), PodOutOfDate status
READY = [
    ("running with its session: Ready", RUNNING, True, None, None, ("True", C.R_RECONCILED), None),
    ("running, no session: SessionMissing", RUNNING, False, None, None, ("False", C.R_SESSION_MISSING), None),
    ("running, session not checked: left as it is", RUNNING, None, None, None, None, None),
    ("the container waits: its reason", WAITING, None, None, None, ("False", C.R_CONTAINER_WAITING), None),
    ("the reconcile's own failure: kept", RUNNING, True, stored(C.COND_READY, "False", C.R_INVALID_SPEC), None,
     ("False", C.R_INVALID_SPEC), None),
    ("the watcher's own Ready: replaced", RUNNING, True, stored(C.COND_READY, "False", C.R_CHECKING_SESSION), None,
     ("True", C.R_RECONCILED), None),
    ("out of date: PodOutOfDate True", RUNNING, True, None, "older", ("True", C.R_RECONCILED), "True"),
    ("up to date again: PodOutOfDate False", RUNNING, True, stored(C.COND_POD_OUT_OF_DATE, "True",
                                                                   C.R_TEMPLATE_CHANGED), None,
     ("True", C.R_RECONCILED), "False"),
]


@pytest.mark.parametrize("view,seen,before,out_of_date,ready,pod_date", [c[1:] for c in READY],
                         ids=[c[0] for c in READY])
def test_ready_conditions(view: ContainerView, seen: bool | None, before: dict[str, Any] | None,
                          out_of_date: str | None, ready: tuple[str, str] | None, pod_date: str | None) -> None:
    obs = observe(conditions=(before,) if before else ())
    p, conds = run_rule(lambda p: ready_conditions(p, [dict(c) for c in p.obs.conditions], view, seen), obs,
                        Memory(out_of_date=out_of_date))
    got = condition(conds, C.COND_READY)
    assert (None if got is None else (got["status"], got["reason"])) == ready
    got_date = condition(conds, C.COND_POD_OUT_OF_DATE)
    assert (None if got_date is None else got_date["status"]) == pod_date


@pytest.mark.parametrize("types,ready_reasons,reason,kept", [
    ((C.COND_READY, C.COND_RATE_LIMITED), READY_REASONS, C.R_RECONCILED, {C.COND_READY, C.COND_RATE_LIMITED}),
    ((C.COND_READY, C.COND_RATE_LIMITED), READY_REASONS, C.R_INVALID_SPEC, {C.COND_RATE_LIMITED}),  # the reconcile's
    ((C.COND_READY,), None, C.R_INVALID_SPEC, {C.COND_READY}),      # None: every Ready is the watcher's
    ((C.COND_RATE_LIMITED,), READY_REASONS, C.R_RECONCILED, {C.COND_RATE_LIMITED}),
])
def test_owned(types: tuple[str, ...], ready_reasons: frozenset[str] | None, reason: str, kept: set[str]) -> None:
    conds = [stored(C.COND_READY, "True", reason), stored(C.COND_RATE_LIMITED, "False", C.R_NONE_LIMITED),
             stored("Other", "True", "X")]
    assert {c["type"] for c in owned(conds, types, ready_reasons)} == kept


# id, container, session observed, respond, stored Ready -> state, Ready reason or None, actions
UNWATCHED = [
    ("running with its session", RUNNING, True, session(True), None, "Running", C.R_RECONCILED, []),
    ("session not observed: asked, found", RUNNING, None, session(True), None, "Running", C.R_RECONCILED,
     ["CheckSession"]),
    ("session not observed: asked, missing", RUNNING, None, session(False), None, "NeedsAttention",
     C.R_SESSION_MISSING, ["CheckSession"]),
    ("the container waits: pending", WAITING, None, session(True), None, "Pending", C.R_CONTAINER_WAITING, []),
    ("the reconcile's failure: its Ready and state left to it", RUNNING, True, session(True),
     stored(C.COND_READY, "False", C.R_INVALID_SPEC), None, None, []),
]


@pytest.mark.parametrize("view,seen,respond,before,state,reason,actions", [c[1:] for c in UNWATCHED],
                         ids=[c[0] for c in UNWATCHED])
def test_unwatched_status(view: ContainerView, seen: bool | None, respond: Any, before: dict[str, Any] | None,
                          state: str | None, reason: str | None, actions: list[str]) -> None:
    obs = replace(observe(conditions=(before,) if before else ()), pod=view, session=seen, tabs=None)
    p, got = run_rule(unwatched_status, obs, respond=respond)
    assert got is not None and kinds(p) == actions
    assert got.fields.get("state") == state
    ready = condition(got.conditions, C.COND_READY)
    assert (None if ready is None else ready["reason"]) == reason
    if reason == C.R_RECONCILED:
        assert ready is not None and ready["message"] == "Pod running (limit features are off for this agent)"


def test_an_unwatched_box_without_a_pod_leaves_ready_to_the_reconcile() -> None:
    p, got = run_rule(unwatched_status, replace(observe(), pod=None))
    assert got is None and p.actions == []


@pytest.mark.parametrize("announced,stored_reason,warned", [
    (None, None, True),                   # a new squatter: one Warning
    ("squatting", None, False),           # the same one, announced already
    ("another", POD_NOT_OWNED, False),    # Ready says so already (a restarted controller)
    ("another", C.R_RECONCILED, True),
])
def test_squatter_status(announced: str | None, stored_reason: str | None, warned: bool) -> None:
    before = (stored(C.COND_READY, "False", stored_reason),) if stored_reason else ()
    obs = observe(pod_owned=False, not_owned="squatting", conditions=before)
    p, got = run_rule(squatter_status, obs, Memory(squatter=announced))
    assert pass_events(p) == ([("Warning", POD_NOT_OWNED)] if warned else []) and p.mem.squatter == "squatting"
    assert got.fields == {"state": "Error"} and not got.guard_ready
    assert [(c["type"], c["reason"]) for c in got.conditions] == [(C.COND_READY, POD_NOT_OWNED)]


# ---------------------------------------------------------------------------------------------- state
def rec(name: str, phase: Phase) -> TabRecord:
    return TabRecord(name, phase, message=f"{name} message")


LIMITED, ATTENTION, IDLE_REC = rec("l", Phase.RATE_LIMITED), rec("a", Phase.NEEDS_ATTENTION), rec("i", Phase.IDLE)

# id, records, memory, problem -> state, RateLimited, NeedsAttention (status, reason), Reserved, gauges
STATES = [
    ("quiet: Running", [IDLE_REC], Memory(), None, "Running", "False", ("False", C.R_ALL_CLEAR), "False",
     (0.0, 0.0, 0.0)),
    ("a tab limited: RateLimited", [IDLE_REC, LIMITED], Memory(), None, "RateLimited", "True",
     ("False", C.R_ALL_CLEAR), "False", (0.0, 1.0, 0.0)),
    ("a tab resuming counts as limited", [rec("r", Phase.RESUMING)], Memory(), None, "RateLimited", "True",
     ("False", C.R_ALL_CLEAR), "False", (0.0, 1.0, 0.0)),
    ("the group exhausted: RateLimited", [IDLE_REC], Memory(group_exhausted=True), None, "RateLimited", "False",
     ("False", C.R_ALL_CLEAR), "False", (0.0, 0.0, 1.0)),
    ("reserved: Reserved before RateLimited", [LIMITED], Memory(reserved="Stopping"), None, "Reserved", "True",
     ("False", C.R_ALL_CLEAR), "True", (0.0, 1.0, 0.0)),
    ("a tab needs a human: NeedsAttention first", [LIMITED, ATTENTION], Memory(reserved="Stopping"), None,
     "NeedsAttention", "True", ("True", C.R_RESUME_FAILED), "True", (1.0, 1.0, 0.0)),
    ("a problem of the box: NeedsAttention with its reason", [IDLE_REC], Memory(), (C.R_TMUX_MISSING, "no tmux"),
     "NeedsAttention", "False", ("True", C.R_TMUX_MISSING), "False", (0.0, 0.0, 0.0)),
]


@pytest.mark.parametrize("records,mem,problem,state,limited,attention,reserved,gauges", [c[1:] for c in STATES],
                         ids=[c[0] for c in STATES])
def test_tabs_status(records: list[TabRecord], mem: Memory, problem: tuple[str, str] | None, state: str,
                     limited: str, attention: tuple[str, str], reserved: str,
                     gauges: tuple[float, float, float]) -> None:
    mem = replace(mem, records={r.name: r for r in records}, tab_ids={r.name: "@" + r.name for r in records},
                  current="sub-a", next_sub="sub-b")
    p, got = run_rule(lambda p: tabs_status(p, p.obs, problem=problem), observe(), mem)
    assert got.fields["state"] == state
    assert [t["name"] for t in got.fields["tabs"]] == [r.name for r in records]
    assert (got.fields["subscription"], got.fields["nextSubscription"]) == ("sub-a", "sub-b")
    assert condition(got.conditions, C.COND_RATE_LIMITED)["status"] == limited  # type: ignore[index]
    needs = condition(got.conditions, C.COND_NEEDS_ATTENTION)
    assert needs is not None and (needs["status"], needs["reason"]) == attention
    assert condition(got.conditions, C.COND_RESERVED)["status"] == reserved  # type: ignore[index]
    assert (got.gauges["TABS_NEEDING_HUMAN"], got.gauges["TABS_RATE_LIMITED"],
            got.gauges["ROTATION_GROUP_EXHAUSTED"]) == gauges
    assert condition(got.conditions, C.COND_READY)["reason"] == C.R_RECONCILED  # type: ignore[index]
    assert p.actions == []


def test_the_earliest_resume_is_status_resume_at() -> None:
    mem = Memory(records={"a": replace(LIMITED, name="a", resume_at=NOW + timedelta(hours=2)),
                          "b": replace(LIMITED, name="b", resume_at=NOW + timedelta(hours=1))})
    _, got = run_rule(lambda p: tabs_status(p, p.obs), observe(), mem)
    assert got.fields["resumeAt"] == "2026-03-02T13:00:00Z"


# id, stream, disabled, memory -> TerminalStream (status, reason) or None, Warning
STREAMS = [
    ("no stream, on by settings: not said", None, False, Memory(), None, False),
    ("off by settings", None, True, Memory(), ("False", C.R_STREAM_DISABLED), False),
    ("attached", StreamView(True), False, Memory(), ("True", C.R_STREAMING), False),
    ("down: reconnecting", StreamView(False), False, Memory(), ("False", C.R_STREAM_RECONNECTING), False),
    ("no control mode", StreamView(False, why="tmux 3.1"), False, Memory(), ("False", C.R_NO_CONTROL_MODE), False),
    ("given up: warned once per pod", StreamView(False, failures=5, pod="u1"), False, Memory(),
     ("False", C.R_STREAM_UNUSABLE), True),
    ("given up, warned for this pod", StreamView(False, failures=5, pod="u1"), False, Memory(stream_warned="u1"),
     ("False", C.R_STREAM_UNUSABLE), False),
    ("given up, a new pod", StreamView(False, failures=5, pod="u2"), False, Memory(stream_warned="u1"),
     ("False", C.R_STREAM_UNUSABLE), True),
]


@pytest.mark.parametrize("stream,disabled,mem,terminal,warned", [c[1:] for c in STREAMS], ids=[c[0] for c in STREAMS])
def test_terminal_stream(stream: StreamView | None, disabled: bool, mem: Memory, terminal: tuple[str, str] | None,
                         warned: bool) -> None:
    p, got = run_rule(lambda p: tabs_status(p, p.obs), observe(stream=stream, stream_disabled=disabled), mem)
    found = condition(got.conditions, C.COND_TERMINAL_STREAM)
    assert (None if found is None else (found["status"], found["reason"])) == terminal
    assert pass_events(p) == ([("Warning", C.R_STREAM_UNUSABLE)] if warned else [])
    if stream is not None and stream.pod and terminal == ("False", C.R_STREAM_UNUSABLE):
        assert p.mem.stream_warned == stream.pod


@pytest.mark.parametrize("ignored,before,expected", [
    ({}, (), None),                                                    # never ignored anything: not said
    ({"files": (C.R_INVALID_BOX_FILE, ("too big",))}, (), ("True", C.R_INVALID_BOX_FILE, "too big")),
    ({}, (stored(C.COND_INPUT_IGNORED, "True", C.R_INVALID_BOX_FILE),), ("False", C.R_ALL_CLEAR,
                                                                         "Every pattern, annotation and box file read is valid")),
])
def test_input_ignored(ignored: dict[str, Any], before: tuple[dict[str, Any], ...],
                       expected: tuple[str, str, str] | None) -> None:
    _, got = run_rule(lambda p: tabs_status(p, p.obs), observe(conditions=before), Memory(ignored=ignored))
    found = condition(got.conditions, C.COND_INPUT_IGNORED)
    assert (None if found is None else (found["status"], found["reason"], found["message"])) == expected


def test_watched_status_says_a_missing_subscription() -> None:
    _, got = run_rule(watched_status, observe(), Memory(sub_problem="sub-a is missing"))
    needs = condition(got.conditions, C.COND_NEEDS_ATTENTION)
    assert needs is not None and (needs["reason"], needs["message"]) == (C.R_SUBSCRIPTION_NOT_FOUND, "sub-a is missing")


@pytest.mark.parametrize("failure,announced,reason,ready,warned", [
    (CaptureFailure(CAPTURE_TOO_LARGE, 1000), None, C.R_BOX_OUTPUT_TOO_LARGE, C.R_RECONCILED, True),
    (CaptureFailure(CAPTURE_TOO_LARGE, 1000), "the box printed more than 1000 bytes when its tabs were captured "
     "(too many tabs or a very large window); its tabs are not watched until it prints less",
     C.R_BOX_OUTPUT_TOO_LARGE, C.R_RECONCILED, False),                # announced once
    (CaptureFailure(CAPTURE_NO_SESSION), None, C.R_TMUX_MISSING, C.R_SESSION_MISSING, False),
])
def test_capture_failed(failure: CaptureFailure, announced: str | None, reason: str, ready: str, warned: bool) -> None:
    p, got = run_rule(lambda p: capture_failed(p, failure), observe(), Memory(output_problem=announced))
    assert condition(got.conditions, C.COND_NEEDS_ATTENTION)["reason"] == reason  # type: ignore[index]
    assert condition(got.conditions, C.COND_READY)["reason"] == ready  # type: ignore[index]
    assert got.fields["state"] == "NeedsAttention"
    assert pass_events(p) == ([("Warning", C.R_BOX_OUTPUT_TOO_LARGE)] if warned else [])


@pytest.mark.parametrize("view,seen,before,state", [
    (RUNNING, True, None, "Running"), (RUNNING, False, None, "NeedsAttention"), (WAITING, None, None, "Pending"),
    (RUNNING, True, "Error", "Error"),  # the reconcile's Error state is not the watcher's to clear
])
def test_ready_status_state(view: ContainerView, seen: bool | None, before: str | None, state: str) -> None:
    _, got = run_rule(lambda p: ready_status(p, view, seen), observe(state=before))
    assert got.fields == {"state": state}
    assert {c["type"] for c in got.conditions} == {C.COND_READY}
