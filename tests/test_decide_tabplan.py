"""Table tests of tab planning (`controller.domain.box.tabplan`), unfinished journals
(`controller.domain.box.recover`), due resumes (`controller.domain.box.due`) and the resume annotations
(`controller.domain.box.annotations`), each by itself: pure, no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, Mapping

import pytest

from controller import constants as C
from controller.domain.box import (
    Count, Memory, Performed, ReadUsage, RunJournal, SendContinue, TabView, UsageRead, screen_digest,
)
from controller.domain.box.annotations import read_annotations
from controller.domain.box.due import resume_due
from controller.domain.box.recover import recover_journals
from controller.domain.box.tabplan import forget_closed_tabs, plan_tabs
from controller.domain.resume import Journal, JournalAction, Phase, Step, TabRecord
from harness.decide_cases import CODEX, IDLE, NOW, WORKING, due, limited, observe, ok, sub, tab, usage
from harness.rule_cases import dets, kinds, pass_events, run_rule

pytestmark = pytest.mark.unit

LATER = NOW + timedelta(hours=1)
MENU = limited(limit_menu=True, menu_choice=2)
PROMPT = replace(IDLE, prompt_text="continue")


def answer(**performed: Any) -> Any:
    """Every blocking action succeeds; journaled ones end with the given `Performed` fields."""
    def respond(action: Any) -> Any:
        if isinstance(action, SendContinue):
            return tuple(Performed(t, True, NOW, Step.ENTER, text=action.text, **performed) for t, _ in action.tabs)
        if isinstance(action, RunJournal):
            return Performed(action.tab, True, NOW, Step.PRESS if action.journal.action == JournalAction.ANSWER_MENU
                             else Step.ENTER, text=action.journal.text or "", **performed)
        return ok(action)
    return respond


def at_100(action: Any) -> Any:
    return UsageRead(usage(100.0, LATER), NOW, action.provider) if isinstance(action, ReadUsage) else ok(action)


def journal(step: Step = Step.ENTER, action: JournalAction = JournalAction.CONTINUE, text: str = "continue",
            step_at: Any = NOW - timedelta(seconds=30)) -> Journal:
    return Journal(action, step, NOW - timedelta(seconds=30), step_at, "k", text)


def mid_action(name: str = "main", j: Journal | None = None, phase: Phase = Phase.RESUMING) -> TabRecord:
    return TabRecord(name, phase, limit_key="k", journal=j or journal())


STALL_S = 1800.0
UNCHANGED = {"main": (screen_digest("screen"), NOW - timedelta(seconds=STALL_S + 1))}

# ---------------------------------------------------------------------------------------------- plan_tabs
# id, tabs, memory, resume on, respond -> actions, Events, phase, wake of "main"
PLANS = [
    ("a new limit: announced and scheduled", (tab(limited(resets_at=LATER)),), Memory(), True, ok,
     ["Count", "PostEvent"], [("Normal", "LimitDetected")], Phase.RATE_LIMITED, LATER + timedelta(seconds=2)),
    ("resume off: stopped on its limit, nothing sent", (tab(limited()),), Memory(), False, ok,
     ["Count", "PostEvent"], [("Normal", "LimitDetected")], Phase.RATE_LIMITED, None),
    ("due: one usage read, then the continue", (tab(limited()),), Memory(records={"main": due()}), True, answer(),
     ["ReadUsage", "Count", "SendContinue", "Count", "PostEvent"], [("Normal", "Resumed")], Phase.RESUMING,
     NOW + timedelta(seconds=20)),
    ("due, not reset per usage: waits", (tab(limited()),), Memory(records={"main": due()}), True, at_100,
     ["ReadUsage", "PostEvent"], [("Normal", "ResetNotYet")], Phase.RATE_LIMITED, LATER + timedelta(seconds=2)),
    ("the limit menu: answered once with its stop-and-wait number", (tab(MENU),), Memory(), True, answer(),
     ["Count", "PostEvent", "RunJournal", "PostEvent"], [("Normal", "LimitDetected"), ("Normal", "AnsweredLimitMenu")],
     Phase.RATE_LIMITED, NOW + timedelta(seconds=1)),
    ("an unfinished journal, submitted: recorded done, not planned", (tab(IDLE),),
     Memory(records={"main": mid_action()}), True, ok, ["Count", "PostEvent"], [("Normal", "Resumed")],
     Phase.RESUMING, NOW + timedelta(seconds=20)),
    ("our continue still in the prompt: its Enter", (tab(PROMPT),), Memory(records={"main": mid_action()}), True,
     answer(), ["Count", "RunJournal", "Count", "PostEvent"], [("Normal", "Resumed")], Phase.RESUMING,
     NOW + timedelta(seconds=20)),
    ("a working tab unchanged past stall_s: a human is asked", (tab(WORKING),), Memory(seen=UNCHANGED), True, ok,
     ["PostEvent"], [("Warning", "Stalled")], Phase.NEEDS_ATTENTION, None),
    ("a working tab: its stall instant is a deadline", (tab(WORKING),), Memory(), True, ok,
     [], [], Phase.WORKING, NOW + timedelta(seconds=STALL_S)),
    ("an idle tab unchanged: never stalled", (tab(IDLE),), Memory(seen=UNCHANGED), True, ok,
     [], [], Phase.IDLE, None),
]


@pytest.mark.parametrize("tabs,mem,resume_on,respond,actions,evts,phase,wake", [c[1:] for c in PLANS],
                         ids=[c[0] for c in PLANS])
def test_plan_tabs(tabs: tuple[TabView, ...], mem: Memory, resume_on: bool, respond: Any, actions: list[str],
                   evts: list[tuple[str, str]], phase: Phase, wake: Any) -> None:
    p, _ = run_rule(lambda p: plan_tabs(p, dets(p), {}, resume_on), observe(*tabs, stall_s=STALL_S), mem, respond)
    assert kinds(p) == actions and pass_events(p) == evts
    assert p.records["main"].phase == phase and p.wake["main"] == wake
    assert p.records["main"].journal is None  # every journal closed by its outcome


def test_tabs_due_together_share_one_read_and_one_batched_continue() -> None:
    names = ("a", "b", "c")
    obs = observe(*(tab(limited(), n) for n in names))
    p, _ = run_rule(lambda p: plan_tabs(p, dets(p), {}, True), obs, Memory(records={n: due(n) for n in names}),
                    answer())
    assert [a.tabs for a in p.actions if isinstance(a, ReadUsage)] == [names]
    assert [a.tabs for a in p.actions if isinstance(a, SendContinue)] == [tuple((n, "%" + n) for n in names)]


def test_the_screen_seen_is_remembered_from_its_first_pass() -> None:
    obs = observe(tab(WORKING), stall_s=STALL_S)
    p, _ = run_rule(lambda p: plan_tabs(p, dets(p), {}, True), obs)
    assert p.seen["main"] == (screen_digest("screen"), NOW)
    later = NOW + timedelta(seconds=STALL_S)
    q, _ = run_rule(lambda p: plan_tabs(p, dets(p), {}, True), obs, replace(Memory(), seen=p.seen), now=later)
    assert q.records["main"].phase == Phase.NEEDS_ATTENTION  # the same screen, stall_s later
    moved = replace(obs, tabs=(tab(WORKING, screen="other"),))
    r, _ = run_rule(lambda p: plan_tabs(p, dets(p), {}, True), moved, replace(Memory(), seen=p.seen), now=later)
    assert r.records["main"].phase == Phase.WORKING and r.seen["main"][1] == later


def test_forget_closed_tabs() -> None:
    mem = Memory(records={"open": TabRecord("open"), "closed": TabRecord("closed")},
                 tab_ids={"open": "@1", "closed": "@2"}, seen={"closed": ("d", NOW)})
    p, _ = run_rule(forget_closed_tabs, observe(tab(IDLE, "open")), mem)
    assert set(p.records) == {"open"} and p.seen == {} and p.mem.tab_ids == {"open": "@1"}


# ---------------------------------------------------------------------------------------------- due
# id, respond -> phase, wake, Events, RESUMES label, message start
DUE = [
    ("sent and moved", answer(), Phase.RESUMING, NOW + timedelta(seconds=20), [("Normal", "Resumed")], "ok",
     "Resumed: sent 'continue'"),
    ("sent, the screen did not move: a human is asked",
     lambda a: tuple(Performed(t, False, NOW, Step.ENTER, text="continue") for t, _ in a.tabs)
     if isinstance(a, SendContinue) else ok(a), Phase.NEEDS_ATTENTION, None, [("Warning", C.R_RESUME_FAILED)],
     "no_effect", "sent 'continue' but the screen did not change; a human should look"),
    ("the screen changed before the keys: planned again", answer(screen_changed=True), Phase.RATE_LIMITED, NOW, [],
     "screen_changed", "The screen or the box changed before the armed continue was typed"),
    ("typed but held before Enter: judged again", answer(held=True), Phase.RESUMING, NOW, [], "screen_changed",
     "Typed 'continue' but did not press Enter"),
]


@pytest.mark.parametrize("respond,phase,wake,evts,label,message", [c[1:] for c in DUE], ids=[c[0] for c in DUE])
def test_resume_due(respond: Any, phase: Phase, wake: Any, evts: list[tuple[str, str]], label: str,
                    message: str) -> None:
    obs = observe(tab(limited()))
    p, _ = run_rule(lambda p: resume_due(p, list(p.obs.tabs or ())), obs, Memory(records={"main": due()}), respond)
    rec = p.records["main"]
    assert rec.phase == phase and p.wake["main"] == wake and pass_events(p) == evts
    assert [a.labels[-1] for a in p.actions if isinstance(a, Count) and a.metric == "RESUMES"] == [label]
    assert (rec.message or "").startswith(message)
    assert (rec.journal is not None) == (label == "screen_changed" and phase == Phase.RESUMING)  # held: kept at Enter
    if rec.journal is not None:
        assert rec.journal.step == Step.ENTER


def test_an_agent_that_restarts_is_resumed_by_a_journaled_restart_per_tab() -> None:
    obs = observe(tab(limited(), "a"), tab(limited(), "b"), box=CODEX, subs=(sub("sub-a", provider="openai"),))
    p, _ = run_rule(lambda p: resume_due(p, list(p.obs.tabs or ())), obs,
                    Memory(records={"a": due("a"), "b": due("b")}), answer())
    runs = [a for a in p.actions if isinstance(a, RunJournal)]
    assert [(a.tab, a.why, a.journal.action, a.journal.step) for a in runs] == [
        ("a", "resume", JournalAction.RESTART, Step.INTERRUPT), ("b", "resume", JournalAction.RESTART, Step.INTERRUPT)]
    assert not any(isinstance(a, SendContinue) for a in p.actions)


# ---------------------------------------------------------------------------------------------- recover
TYPED_SINCE = NOW - timedelta(seconds=10)

# id, screen, record -> the action (why, step) or None, the tabs returned, phase, Event
RECOVER = [
    ("submitted before the restart: done", tab(IDLE), mid_action(), None, Phase.RESUMING, [("Normal", "Resumed")]),
    ("our text in the prompt: its Enter", tab(PROMPT), mid_action(), ("recover", Step.ENTER), Phase.RESUMING,
     [("Normal", "Resumed")]),
    ("not typed yet: typed", tab(IDLE), mid_action(j=journal(Step.TYPE)), ("recover", Step.TYPE), Phase.RESUMING,
     [("Normal", "Resumed")]),
    ("the agent works again: done", tab(WORKING), mid_action(), None, Phase.RESUMING, [("Normal", "Resumed")]),
    ("a human typed since: abandoned, left to them", tab(IDLE, last_input=TYPED_SINCE), mid_action(), None,
     Phase.RESUMING, []),
    ("a line we did not type: a human is asked", tab(replace(IDLE, prompt_text="half a line")), mid_action(), None,
     Phase.NEEDS_ATTENTION, [("Warning", "PromptNotEmpty")]),
    ("a menu answer still open: pressed again", tab(MENU), mid_action(j=journal(Step.PRESS, JournalAction.ANSWER_MENU,
                                                                                 "2")),
     ("recover", Step.PRESS), Phase.RESUMING, []),
    ("a menu answer, the menu closed: done, nothing announced", tab(IDLE),
     mid_action(j=journal(Step.PRESS, JournalAction.ANSWER_MENU, "2"), phase=Phase.RATE_LIMITED), None,
     Phase.RATE_LIMITED, []),
    ("a restart at the shell: relaunched", tab(IDLE, at_shell=True),
     mid_action(j=journal(Step.INTERRUPT, JournalAction.RESTART)), ("recover", Step.RELAUNCH), Phase.RESUMING,
     [("Normal", "Resumed")]),
]


@pytest.mark.parametrize("view,rec,action,phase,evts", [c[1:] for c in RECOVER], ids=[c[0] for c in RECOVER])
def test_recover_journals(view: TabView, rec: TabRecord, action: tuple[str, Step] | None, phase: Phase,
                          evts: list[tuple[str, str]]) -> None:
    obs = observe(view, tab(IDLE, "other"))
    p, got = run_rule(lambda p: recover_journals(p, dets(p)), obs, Memory(records={"main": rec}), answer())
    assert got == {"main"} and "other" not in p.records  # only tabs with a journal
    assert [(a.why, a.journal.step) for a in p.actions if isinstance(a, RunJournal)] == ([action] if action else [])
    assert p.records["main"].phase == phase and p.records["main"].journal is None and pass_events(p) == evts
    assert [a.metric for a in p.actions if isinstance(a, Count)][0] == "JOURNAL_RECOVERIES"


def test_a_recovered_journal_without_its_text_types_the_agents_continue() -> None:
    obs = observe(tab(IDLE))
    p, _ = run_rule(lambda p: recover_journals(p, dets(p)), obs,
                    Memory(records={"main": mid_action(j=journal(Step.TYPE, text=""))}), answer())
    (action,) = [a for a in p.actions if isinstance(a, RunJournal)]
    assert action.journal.text == "continue"


# ---------------------------------------------------------------------------------------------- annotations
SOON = (NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
FAR = (NOW + timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("annotations,done,kept,warned", [
    ({C.ANNOTATION_RESUME_AT: SOON}, None, True, False),
    ({C.ANNOTATION_RESUME_AT: SOON}, SOON, False, False),      # acted upon already: one request, one resume
    ({C.ANNOTATION_RESUME_AT: FAR}, None, False, True),        # not within 31 days
    ({C.ANNOTATION_RESUME_AT: "tomorrow"}, None, False, True),
    ({C.ANNOTATION_RESUME_NOW: "true"}, None, True, False),
])
def test_read_annotations(annotations: Mapping[str, str], done: str | None, kept: bool, warned: bool) -> None:
    p, got = run_rule(read_annotations, observe(annotations=annotations), Memory(resume_at_done=done))
    assert (got == annotations) == kept
    assert pass_events(p) == ([("Warning", C.R_INVALID_ANNOTATION)] if warned else [])
    assert ("annotations" in p.mem.ignored) == warned


# id, annotations -> phase, resume_at, actions (a tab whose limit resets in an hour)
ANNOTATED = [
    ("resume-now on a limited tab: resumed now", {C.ANNOTATION_RESUME_NOW: "true"}, Phase.RESUMING, None,
     ["ReadUsage", "Count", "SendContinue", "Count", "PostEvent"]),
    ("cancel: no resume", {C.ANNOTATION_CANCEL_RESUME: "true"}, Phase.RATE_LIMITED, None, []),
    ("resume-at later: waits for it", {C.ANNOTATION_RESUME_AT: SOON}, Phase.RATE_LIMITED,
     NOW + timedelta(hours=1), []),
    ("none: the screen's reset", {}, Phase.RATE_LIMITED, LATER + timedelta(seconds=10), []),
]


@pytest.mark.parametrize("annotations,phase,resume_at,actions", [c[1:] for c in ANNOTATED],
                         ids=[c[0] for c in ANNOTATED])
def test_annotations_change_a_limited_tabs_plan(annotations: Mapping[str, str], phase: Phase, resume_at: Any,
                                                actions: list[str]) -> None:
    det = limited(resets_at=LATER)
    mem = Memory(records={"main": replace(due(det=det), resume_at=LATER + timedelta(seconds=10))})
    p, _ = run_rule(lambda p: plan_tabs(p, dets(p), annotations, True), observe(tab(det)), mem, answer())
    assert p.records["main"].phase == phase and p.records["main"].resume_at == resume_at
    assert kinds(p) == actions
