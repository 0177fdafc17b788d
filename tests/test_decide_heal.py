"""Table tests of pod healing (`controller.domain.box.heal.heal_pod`), by itself: pure, no I/O.

Each row is a stored pod (`PodFacts`), the memory and tab records before, what the executor answers, and what
the rule returns (None: the pass goes on), the actions and Events it emits, Ready's reason and message, and
the memory it leaves (`out_of_date`, `replacing`, the heal retry period).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from controller import constants as C
from controller.domain.box import CreatePod, DeletePod, Done, Memory, PodCreated, PodFacts
from controller.domain.box.heal import HEAL_RETRY_S, heal_pod, pod_creation
from controller.domain.resume import Journal, JournalAction, Phase, Step, TabRecord
from harness.decide_cases import NOW, observe
from harness.rule_cases import condition, kinds, pass_events, run_rule

pytestmark = pytest.mark.unit

CREATED = PodCreated((("Normal", "CreatedPod", "Created Pod box"),))
RETRY = PodCreated((("Warning", "SubscriptionNotFound", "Subscription sub-a not found"),), retry_after_s=30.0)


def pod(phase: str = "Running", template: str = "h1") -> dict[str, Any]:
    return {"metadata": {"name": "box", "uid": "u1", "annotations": {C.ANNOTATION_TEMPLATE_HASH: template}},
            "status": {"phase": phase}}


def answer(created: PodCreated = CREATED, deleted: bool = True) -> Any:
    def respond(action: Any) -> Any:
        if isinstance(action, CreatePod):
            return created
        if isinstance(action, DeletePod):
            return Done(deleted)
        raise AssertionError(action)
    return respond


OLD = "Pod box was built from an older spec.template; it is recreated"
WORKING = {"main": TabRecord("main", Phase.RESUMING)}
TYPED = {"main": TabRecord("main", Phase.IDLE, last_input_at=NOW - timedelta(seconds=30))}
TYPED_LONG_AGO = {"main": TabRecord("main", Phase.IDLE, last_input_at=NOW - timedelta(seconds=61))}
MID_ACTION = {"main": TabRecord("main", Phase.IDLE, journal=Journal(JournalAction.CONTINUE, Step.TYPE, NOW, NOW))}
FAILED_BEFORE = Memory(replacing=(C.R_POD_FAILED, "Pod box is Failed"))


# id, facts, memory, records, respond -> returns a status, actions, Events, (Ready reason, message start) or None
# (no Ready written), the PodOutOfDate message remembered (its start)
CASES = [
    ("never created: the reconcile's", PodFacts("box", None, created_before=False), Memory(), {}, answer(),
     False, [], [], None, None),
    ("current pod: nothing", PodFacts("box", pod(), "u1", "h1"), Memory(), {}, answer(),
     False, [], [], None, None),
    ("box being deleted: nothing", PodFacts("box", None, box_deleting=True), Memory(), {}, answer(),
     False, [], [], None, None),
    ("missing: created", PodFacts("box", None, desired_hash="h1"), Memory(), {}, answer(),
     True, ["CreatePod", "PostEvent"], [("Normal", "CreatedPod")],
     (C.R_POD_MISSING, "Pod box was missing; created a new one"), None),
    ("missing, a dependency missing: its Event says why", PodFacts("box", None, desired_hash="h1"), Memory(), {},
     answer(RETRY), True, ["CreatePod", "PostEvent"], [("Warning", "SubscriptionNotFound")],
     (C.R_POD_MISSING, "Subscription sub-a not found"), None),
    ("created after an ended pod: Ready says why it was replaced", PodFacts("box", None, desired_hash="h1"),
     FAILED_BEFORE, {}, answer(), True, ["CreatePod", "PostEvent"], [("Normal", "CreatedPod")],
     (C.R_POD_FAILED, "Pod box is Failed; created a new one"), None),
    ("ended: replaced", PodFacts("box", pod("Failed"), "u1", "h1"), Memory(), {}, answer(),
     True, ["DeletePod", "PostEvent"], [("Warning", "ReplacingPod")], (C.R_POD_FAILED, "Pod box is Failed"), None),
    ("ended, the delete failed: no Event", PodFacts("box", pod("Failed"), "u1", "h1"), Memory(), {},
     answer(deleted=False), True, ["DeletePod"], [], (C.R_POD_FAILED, "Pod box is Failed"), None),
    ("out of date, OnDelete: announced, the pass goes on", PodFacts("box", pod(template="h0"), "u1", "h1"),
     Memory(), {}, answer(), False, ["PostEvent"], [("Normal", C.R_TEMPLATE_CHANGED)], None, OLD),
    ("out of date again: announced once", PodFacts("box", pod(template="h0"), "u1", "h1"),
     Memory(out_of_date=OLD + " when it is next deleted (spec.podUpdate: OnDelete)"), {}, answer(),
     False, [], [], None, OLD),
    ("out of date, WhenIdle, idle: recreated", PodFacts("box", pod(template="h0"), "u1", "h1", "WhenIdle"),
     Memory(), {}, answer(), True, ["DeletePod", "PostEvent"], [("Normal", "RecreatingPod")], None, None),
    ("out of date, WhenIdle, a tab resuming: waits", PodFacts("box", pod(template="h0"), "u1", "h1", "WhenIdle"),
     Memory(), WORKING, answer(), False, ["PostEvent"], [("Normal", C.R_TEMPLATE_CHANGED)], None, OLD),
    ("out of date, WhenIdle, a human typed 30 s ago: waits",
     PodFacts("box", pod(template="h0"), "u1", "h1", "WhenIdle"), Memory(), TYPED, answer(),
     False, ["PostEvent"], [("Normal", C.R_TEMPLATE_CHANGED)], None, OLD),
    ("out of date, WhenIdle, a human typed 61 s ago: recreated",
     PodFacts("box", pod(template="h0"), "u1", "h1", "WhenIdle"), Memory(), TYPED_LONG_AGO, answer(),
     True, ["DeletePod", "PostEvent"], [("Normal", "RecreatingPod")], None, None),
    ("out of date, WhenIdle, a tab mid-action: waits", PodFacts("box", pod(template="h0"), "u1", "h1", "WhenIdle"),
     Memory(), MID_ACTION, answer(), False, ["PostEvent"], [("Normal", C.R_TEMPLATE_CHANGED)], None, OLD),
]


@pytest.mark.parametrize("facts,mem,records,respond,status,actions,evts,ready,out_of_date",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_heal_pod(facts: PodFacts, mem: Memory, records: dict[str, TabRecord], respond: Any, status: bool,
                  actions: list[str], evts: list[tuple[str, str]], ready: tuple[str, str] | None,
                  out_of_date: str | None) -> None:
    p, got = run_rule(lambda p: heal_pod(p, facts), replace(observe(), pod_facts=facts),
                      replace(mem, records=records), respond)
    assert (got is not None) == status
    assert kinds(p) == actions and pass_events(p) == evts
    if got is None:
        assert p.period_s is None  # the pass goes on at its own period
    else:
        assert got.fields == {"state": "Pending", "pod": "box"} and p.period_s == HEAL_RETRY_S
        found = condition(got.conditions, C.COND_READY)
        if ready is None:  # TemplateChanged is not a reason of READY_REASONS: that Ready is not the watcher's to write
            assert found is None
        else:
            assert found is not None
            assert found["status"] == "False" and found["reason"] == ready[0] and found["message"].startswith(ready[1])
    assert (p.mem.out_of_date or "").startswith(out_of_date or "") and bool(p.mem.out_of_date) == bool(out_of_date)


@pytest.mark.parametrize("deleted,replacing", [(True, (C.R_POD_FAILED, "Pod box is Failed")), (False, None)])
def test_an_ended_pod_deleted_is_remembered_until_its_replacement_exists(deleted: bool,
                                                                         replacing: tuple[str, str] | None) -> None:
    facts = PodFacts("box", pod("Failed"), "u1", "h1")
    p, _ = run_rule(lambda p: heal_pod(p, facts), replace(observe(), pod_facts=facts), Memory(), answer(deleted=deleted))
    assert p.mem.replacing == replacing
    after = PodFacts("box", None, desired_hash="h1")
    q, _ = run_rule(lambda p: heal_pod(p, after), replace(observe(), pod_facts=after), p.mem, answer())
    assert q.mem.replacing is None  # said once, by the pass that created the new pod


@pytest.mark.parametrize("stored,written", [
    (C.R_POD_PENDING, True),    # the watcher's Ready: replaced by the heal's
    ("InvalidSpec", False),     # the reconcile's own failure: kept
])
def test_a_ready_the_reconcile_owns_is_kept_while_the_pod_heals(stored: str, written: bool) -> None:
    facts = PodFacts("box", None, desired_hash="h1")
    before = ({"type": C.COND_READY, "status": "False", "reason": stored, "message": "m"},)
    _, got = run_rule(lambda p: heal_pod(p, facts), replace(observe(), pod_facts=facts, conditions=before), Memory(),
                      answer())
    assert got is not None
    assert (condition(got.conditions, C.COND_READY) is not None) == written


@pytest.mark.parametrize("events,retry_after_s,expected", [
    ((("Normal", "CreatedPod", "c"),), None, (True, None)),
    ((("Warning", "X", "missing dependency"),), 5.0, (False, "missing dependency")),
    ((("Warning", "X", "boom"),), None, (False, None)),
])
def test_pod_creation(events: tuple[tuple[str, str, str], ...], retry_after_s: float | None,
                      expected: tuple[bool, str | None]) -> None:
    assert pod_creation(PodCreated(events, retry_after_s)) == expected
