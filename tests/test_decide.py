"""Table tests of the box decision (`controller.domain.box.decide`): pure, no emulator, no clock.

Each case builds an `Observation` and a `Memory`, runs `decide` the way the watcher does (a blocking action's
result is fed to the next call of the same pass) and checks the actions, the records, the status and the
conditions. `merge_conditions` (the writer's merge by type) is tested at the end, and the raw facts the executor
returns for a decision rule (the usage read's login provider).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from controller import constants as C
from controller.conditions import merge_conditions, set_condition
from controller.domain.box import (
    BLOCKING, CAPTURE_NO_SESSION, CAPTURE_TOO_LARGE, CAPTURE_TRANSPORT, BoxDecision, CaptureFailure, StreamView,
    PatchStatus, ReadStructured, StructuredRead, box_facts, describe, BoxFacts, ClearAnnotation, Done, InstallLogin, Memory, Observation, Performed, PostEvent,
    PressKey, PrintNotice, ReadUsage, RemoveLogin, Reserve, RunJournal, SendContinue, SwitchSubscription, TabView,
    UsageRead, decide, memory_from_status, record_to_status,
)
from controller.domain.podstate import ContainerView
from controller.domain.resume import JournalAction, Phase, Step, TabRecord, limit_key
from controller.domain.rotation import Candidate
from controller.domain.types import Detection, LimitKind, TabState, Usage, Window
from harness.decide_cases import (  # noqa: F401 - the shared builders (bench/decide.py uses them too)
    CLAUDE, CODEX, IDLE, NOW, RUNNING, WORKING, Responder, cond, due, events, limited, observe, ok, run, sub, tab,
    usage,
)

# ---------------------------------------------------------------------------------------------- resume
def test_due_tab_is_resumed_after_a_usage_read_with_its_journal_written_ahead():
    obs, mem = observe(tab(limited())), Memory(records={"main": due()})
    d, steps = run(obs, mem)
    assert any(not s.complete and isinstance(s.actions[-1], ReadUsage) for s in steps)  # the read the resume needs
    send = next(a for a in d.actions if isinstance(a, SendContinue))
    assert send.tabs == (("main", "%main"),) and send.text == "continue"
    # The snapshot written before the keys holds the journal at its first step.
    ahead = next(s for s in steps if not s.complete and isinstance(s.actions[-1], SendContinue))
    journal = ahead.status.fields["tabs"][0]["journal"]  # type: ignore[union-attr]
    assert journal["action"] == JournalAction.CONTINUE.value and journal["step"] == Step.TYPE.value
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RESUMING and rec.journal is None and rec.sent_for == rec.limit_key
    assert ("Normal", "Resumed") in events(d)
    assert d.status.fields["state"] == "RateLimited"  # Resuming counts until the settle time passed


def test_restarting_agent_gets_a_journaled_restart_per_tab():
    obs = observe(tab(limited(), "a"), tab(limited(), "b"), box=CODEX, subs=(sub("sub-a", provider="openai"),))
    d, _ = run(obs, Memory(records={"a": due("a"), "b": due("b")}))
    runs = [a for a in d.actions if isinstance(a, RunJournal)]
    assert [(r.tab, r.journal.action) for r in runs] == [("a", JournalAction.RESTART), ("b", JournalAction.RESTART)]
    assert not any(isinstance(a, SendContinue) for a in d.actions)


def test_reset_not_reached_per_usage_reschedules_without_sending():
    later = NOW + timedelta(hours=1)
    d, _ = run(observe(tab(limited())), Memory(records={"main": due()}),
               lambda a: UsageRead(usage(100.0, later), NOW, a.provider) if isinstance(a, ReadUsage) else ok(a))
    assert not any(isinstance(a, (SendContinue, RunJournal)) for a in d.actions)
    assert d.tab_records["main"].resume_at == later + timedelta(seconds=10)
    assert ("Normal", "ResetNotYet") in events(d)
    # Looked at again during the margin (prepare_s 8 before the resume instant) to arm the send for it.
    assert later + timedelta(seconds=2) in d.wake_at


@pytest.mark.parametrize("login_provider,counts", [
    ("anthropic", True),   # the login is the agent's provider's: its usage counts (100 %: not reset yet)
    ("openai", False),     # a login of another provider: unknown, resumed on the screen's reset time
    (None, False),         # no usable login: unknown
])
def test_usage_counts_only_when_read_with_a_login_of_the_agents_provider(login_provider: str | None,
                                                                        counts: bool):
    from controller.domain.box import usage_known

    later = NOW + timedelta(hours=1)
    read = UsageRead(usage(100.0, later), NOW, login_provider)
    assert (usage_known(read, "anthropic") is read.usage) == counts
    d, _ = run(observe(tab(limited())), Memory(records={"main": due()}),
               lambda a: read if isinstance(a, ReadUsage) else ok(a))
    ask = next(a for a in d.actions if isinstance(a, ReadUsage))
    assert ask.provider == "anthropic"  # the usage API asked is the agent's provider's
    rec = d.tab_records["main"]
    assert not any(isinstance(a, SendContinue) for a in d.actions)
    if counts:  # the window still at 100 %: waits for its reset
        assert ("Normal", "ResetNotYet") in events(d) and rec.resume_at == later + timedelta(seconds=10)
    else:  # unknown, never "exhausted": the screen's reset (passed), resumed after its minute
        assert ("Normal", "ResetNotYet") not in events(d) and rec.resume_at == NOW + timedelta(seconds=10)
        assert rec.message.startswith("Usage API could not confirm the reset")  # type: ignore[union-attr]


def test_the_usage_read_asks_the_agents_provider():
    obs = observe(tab(limited()), box=CODEX, subs=(sub("sub-a", provider="openai"),))
    d, _ = run(obs, Memory(records={"main": due()}))
    assert next(a for a in d.actions if isinstance(a, ReadUsage)).provider == "openai"


def test_failed_resume_asks_a_human():
    fail = (lambda a: tuple(Performed(t, False, NOW, Step.ENTER, text="continue")
                            for t, _ in a.tabs) if isinstance(a, SendContinue) else ok(a))
    d, _ = run(observe(tab(limited())), Memory(records={"main": due()}), fail)
    assert d.tab_records["main"].phase == Phase.NEEDS_ATTENTION
    assert d.tab_records["main"].message == "sent 'continue' but the screen did not change; a human should look"
    assert cond(d, C.COND_NEEDS_ATTENTION)["status"] == "True"
    assert ("Warning", C.R_RESUME_FAILED) in events(d)


def test_limit_with_unknown_reset_and_unreadable_usage_rechecks_later():
    det = limited(resets_at=None)
    d, _ = run(observe(tab(det)), Memory(),
               lambda a: UsageRead(None, NOW, a.provider) if isinstance(a, ReadUsage) else ok(a))
    assert ("Normal", "LimitDetected") in events(d)
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RATE_LIMITED and rec.resume_at == NOW + timedelta(seconds=300)
    assert not any(isinstance(a, (SendContinue, RunJournal)) for a in d.actions)
    assert cond(d, C.COND_RATE_LIMITED)["status"] == "True"


def test_human_typing_in_the_last_minute_holds_the_resume():
    typed = NOW - timedelta(seconds=10)
    d, _ = run(observe(tab(limited(), last_input=typed)), Memory(records={"main": due()}))
    assert not any(isinstance(a, (ReadUsage, SendContinue)) for a in d.actions)
    assert d.wake_at == (typed + timedelta(seconds=60),)
    assert "human" in (d.tab_records["main"].message or "")


def test_half_typed_prompt_after_the_reset_is_left_to_its_author():
    d, _ = run(observe(tab(limited(prompt_text="draft of mine"))), Memory(records={"main": due()}))
    assert not any(isinstance(a, (ReadUsage, SendContinue)) for a in d.actions)
    assert ("Warning", "PromptNotEmpty") in events(d)
    assert d.status.fields["state"] == "NeedsAttention"  # type: ignore[union-attr]


def test_limit_menu_is_answered_with_its_stop_and_wait_number_journaled():
    det = limited(limit_menu=True, menu_choice=1)
    d, steps = run(observe(tab(det)), Memory())
    answer = next(a for a in d.actions if isinstance(a, RunJournal))
    assert answer.why == "menu" and answer.journal.action == JournalAction.ANSWER_MENU and answer.journal.text == "1"
    ahead = next(s for s in steps if not s.complete and isinstance(s.actions[-1], RunJournal))
    assert ahead.status.fields["tabs"][0]["journal"]["action"] == "AnswerMenu"  # type: ignore[union-attr]
    assert ("Normal", "AnsweredLimitMenu") in events(d)
    assert d.tab_records["main"].journal is None and d.wake_at == (NOW + timedelta(seconds=1),)
    still_open, _ = run(observe(tab(det)), d.memory, now=NOW + timedelta(seconds=2))
    assert not any(isinstance(a, RunJournal) for a in still_open.actions)  # answered once per limit event


def test_approval_prompt_is_waited_on_not_answered():
    det = Detection(TabState.AWAITING_INPUT, detected_by="pattern:approval")
    d, _ = run(observe(tab(det)), Memory())
    assert [a for a in d.actions if not isinstance(a, PostEvent)] == []
    assert d.tab_records["main"].phase == Phase.AWAITING_INPUT
    assert d.status.fields["state"] == "Running"  # type: ignore[union-attr]


def test_unfinished_journal_with_our_text_in_the_prompt_gets_its_enter():
    from controller.domain.resume import start_journal

    journal = start_journal(JournalAction.CONTINUE, NOW - timedelta(seconds=30), "k1", "continue")
    rec = replace(due(), phase=Phase.RESUMING, sent_for="k1", journal=journal)
    d, _ = run(observe(tab(Detection(TabState.IDLE, prompt_text="continue"))), Memory(records={"main": rec}))
    again = next(a for a in d.actions if isinstance(a, RunJournal))
    assert again.why == "recover" and again.journal.step == Step.ENTER and again.journal.recoveries == 1
    assert d.tab_records["main"].journal is None and ("Normal", "Resumed") in events(d)


@pytest.mark.parametrize("action,stored,step,performed", [
    (JournalAction.CONTINUE, None, Step.TYPE, "go on"),    # written before journals carried their text
    (JournalAction.CONTINUE, "", Step.TYPE, "go on"),
    (JournalAction.CONTINUE, "continue please", Step.TYPE, "continue please"),  # its own text wins
    (JournalAction.RESTART, None, Step.RELAUNCH, "go on"),
    (JournalAction.ANSWER_MENU, "2", Step.PRESS, "2"),      # a menu answer keeps its choice
])
def test_a_recovered_journal_is_performed_with_its_text_or_the_agents_continue_text(
        action: JournalAction, stored: str | None, step: Step, performed: str):
    """The executor types what the decision gives it: an unfinished journal from an older controller (no
    text) is completed with the agent's continue text; status keeps the journal as it was read."""
    from controller.domain.resume import Journal

    started = NOW - timedelta(seconds=30)
    first = {JournalAction.CONTINUE: Step.TYPE, JournalAction.RESTART: Step.INTERRUPT,
             JournalAction.ANSWER_MENU: Step.PRESS}[action]
    journal = Journal(action, first, started, started, "k1", stored)
    rec = replace(due(), phase=Phase.RESUMING, sent_for="k1", journal=journal)
    box = replace(CODEX if action == JournalAction.RESTART else CLAUDE, continue_text="go on")
    det = (replace(limited(), limit_menu=True) if action == JournalAction.ANSWER_MENU
           else Detection(TabState.IDLE, prompt_text=""))
    obs = observe(tab(det, at_shell=action == JournalAction.RESTART), box=box,
                  subs=(sub("sub-a", provider=box.provider),))
    d, steps = run(obs, Memory(records={"main": rec}))
    again = next(a for a in d.actions if isinstance(a, RunJournal))
    assert again.why == "recover" and again.journal.step == step and again.journal.text == performed
    ahead = next(s for s in steps if not s.complete and isinstance(s.actions[-1], RunJournal))
    assert ahead.tab_records["main"].journal.text == stored  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- rotation
def test_rotation_switches_to_the_most_headroom_and_resumes_the_limited_tab():
    box = replace(CLAUDE, rotation=True)
    subs = (sub("sub-a", "Exhausted", 100.0), sub("sub-b", five=50.0), sub("sub-c", five=20.0))
    d, _ = run(observe(tab(limited()), tab(IDLE, "other"), box=box, subs=subs), Memory(current="sub-a"))
    switch = next(a for a in d.actions if isinstance(a, SwitchSubscription))
    assert (switch.old, switch.new, switch.trigger, switch.limited) == ("sub-a", "sub-c", "exhausted", ("main",))
    assert switch.stop == ()  # Claude Code takes the new login while running
    assert d.memory.current == "sub-c" and d.memory.next_sub == "sub-b"
    assert d.status.fields["subscription"] == "sub-c"  # type: ignore[union-attr]
    assert ("Normal", "Switched") in events(d)
    assert any(isinstance(a, SendContinue) for a in d.actions)  # resumed on the new login in the same pass


def test_codex_limited_tabs_are_stopped_before_the_switch_unless_a_human_typed():
    box = replace(CODEX, rotation=True)
    subs = (sub("sub-a", "Exhausted", 100.0, provider="openai"), sub("sub-b", provider="openai"))
    tabs = (tab(limited(), "a"), tab(limited(), "b", last_input=NOW - timedelta(seconds=5)))
    d, _ = run(observe(*tabs, box=box, subs=subs), Memory(current="sub-a"))
    switch = next(a for a in d.actions if isinstance(a, SwitchSubscription))
    assert switch.stop == (("a", "%a"),) and switch.limited == ("a", "b")


def test_unusable_login_keeps_the_box_where_it_is():
    box = replace(CLAUDE, rotation=True)
    subs = (sub("sub-a", "Exhausted", 100.0), sub("sub-b"))
    d, _ = run(observe(tab(IDLE), box=box, subs=subs), Memory(current="sub-a"),
               lambda a: Done(False) if isinstance(a, SwitchSubscription) else ok(a))
    assert d.memory.current == "sub-a" and ("Warning", "SwitchFailed") in events(d)


def test_whole_group_exhausted_waits_and_warns_once():
    box = replace(CLAUDE, rotation=True)
    until = NOW + timedelta(hours=2)
    subs = (sub("sub-a", "Exhausted", 100.0, until=until), sub("sub-b", "Exhausted", 100.0, until=until + timedelta(hours=1)))
    obs = observe(tab(IDLE), box=box, subs=subs)
    d, _ = run(obs, Memory(current="sub-a"))
    assert not any(isinstance(a, SwitchSubscription) for a in d.actions)
    assert events(d) == [("Warning", "RotationGroupExhausted")]
    assert d.status.fields["state"] == "RateLimited" and d.status.gauges["ROTATION_GROUP_EXHAUSTED"] == 1  # type: ignore[union-attr]
    again, _ = run(obs, d.memory)
    assert events(again) == []  # one Warning per episode


def test_missing_subscription_without_rotation_needs_attention_once():
    obs = observe(tab(IDLE), subs=())
    d, _ = run(obs, Memory(current="sub-a"))
    assert events(d) == [("Warning", C.R_SUBSCRIPTION_NOT_FOUND)]
    assert cond(d, C.COND_NEEDS_ATTENTION)["reason"] == C.R_SUBSCRIPTION_NOT_FOUND
    assert events(run(obs, d.memory)[0]) == []


# ---------------------------------------------------------------------------------------------- reserve
def test_reserve_stops_the_box_once_and_restores_it_at_the_lift():
    tabs = (tab(WORKING, "busy"), tab(IDLE, "shell", at_shell=True))
    reserved = observe(*tabs, subs=(sub("sub-a", "Reserved", 92.0),), reserves={"sub-a": Reserve(10, 0)})
    d, _ = run(reserved, Memory(current="sub-a"))
    keys = [a for a in d.actions if isinstance(a, (PressKey, RemoveLogin, PrintNotice))]
    assert keys[0] == PressKey("busy", "%busy", ("Escape",)) and isinstance(keys[1], RemoveLogin)
    assert {a.tab for a in keys if isinstance(a, PrintNotice)} == {"busy", "shell"}
    assert "Stopping to keep 10% of your 5-hour limit" in (d.memory.reserved or "")
    assert d.tab_records["busy"].stopped_by_reserve and not d.tab_records["shell"].stopped_by_reserve
    assert cond(d, C.COND_RESERVED)["status"] == "True" and d.status.fields["state"] == "Reserved"  # type: ignore[union-attr]
    assert ("Warning", "ReserveReached") in events(d)

    starting = observe(tab(WORKING, "busy"), tab(Detection(TabState.UNKNOWN), "shell"),
                       subs=(sub("sub-a", "Reserved", 92.0),), reserves={"sub-a": Reserve(10, 0)})
    unpainted, _ = run(starting, d.memory)  # an agent just started in the shell tab, not painted yet: wait
    assert not any(isinstance(a, PressKey) for a in unpainted.actions)
    late, _ = run(replace(starting, tabs=(tab(WORKING, "busy"), tab(WORKING, "shell"))), unpainted.memory)
    assert [a for a in late.actions if isinstance(a, PressKey)] == [PressKey("shell", "%shell", ("Escape",))]
    again, _ = run(reserved, d.memory)  # the next pass: nothing pressed twice
    assert not any(isinstance(a, (PressKey, RemoveLogin, PrintNotice, PostEvent)) for a in again.actions)

    lifted = observe(tab(IDLE, "busy"), tab(IDLE, "shell", at_shell=True), subs=(sub("sub-a"),))
    back, _ = run(lifted, again.memory)
    assert InstallLogin("sub-a", "restore") in back.actions
    resumed = [a for a in back.actions if isinstance(a, RunJournal)]
    assert [(r.tab, r.why) for r in resumed] == [("busy", "restore")]
    assert back.memory.reserved is None and cond(back, C.COND_RESERVED)["status"] == "False"
    assert ("Normal", "ReserveLifted") in events(back)
    assert not back.tab_records["busy"].stopped_by_reserve and back.tab_records["busy"].journal is None


def test_reserve_holds_resume_off():
    obs = observe(tab(limited()), subs=(sub("sub-a", "Reserved", 95.0),), reserves={"sub-a": Reserve(5, 0)})
    d, _ = run(obs, Memory(current="sub-a", reserved="Stopping to keep 5% of your 5-hour limit",
                           records={"main": due()}))
    assert not any(isinstance(a, (ReadUsage, SendContinue)) for a in d.actions)


# ---------------------------------------------------------------------------------------------- annotations, inputs, conditions
def test_resume_now_annotation_resumes_and_is_consumed():
    rec = replace(due(), resume_at=NOW + timedelta(hours=1))
    d, _ = run(observe(tab(limited(resets_at=NOW + timedelta(hours=1))), annotations={C.ANNOTATION_RESUME_NOW: "true"}),
               Memory(records={"main": rec}))
    assert any(isinstance(a, SendContinue) for a in d.actions)
    assert d.actions[-1] == ClearAnnotation(C.ANNOTATION_RESUME_NOW)


def test_invalid_resume_at_annotation_is_ignored_with_one_warning():
    obs = observe(tab(IDLE), annotations={C.ANNOTATION_RESUME_AT: "yesterday"})
    d, _ = run(obs, Memory())
    assert events(d) == [("Warning", C.R_INVALID_ANNOTATION)]
    assert cond(d, C.COND_INPUT_IGNORED)["status"] == "True"
    again, _ = run(obs, d.memory)
    assert events(again) == [] and cond(again, C.COND_INPUT_IGNORED)["status"] == "True"
    fixed, _ = run(observe(tab(IDLE), conditions=again.status.conditions), again.memory)  # type: ignore[union-attr]
    assert cond(fixed, C.COND_INPUT_IGNORED)["status"] == "False"


def test_conditions_of_a_quiet_box_and_the_ready_the_reconcile_owns():
    d, _ = run(observe(tab(IDLE)), Memory())
    assert {c["type"]: c["status"] for c in d.status.conditions} == {  # type: ignore[union-attr]
        C.COND_READY: "True", C.COND_RATE_LIMITED: "False", C.COND_NEEDS_ATTENTION: "False",
        C.COND_RESERVED: "False"}
    failed = set_condition([], C.COND_READY, False, "InvalidSpec", "spec.template is refused", NOW, 1)
    kept, _ = run(observe(tab(IDLE), conditions=tuple(failed)), Memory())
    # The reconcile's failure is neither overwritten nor written back: the watcher's copy may be older than
    # the reconcile's next Ready (the author fixed the spec; the merge by type would put the old one back).
    assert C.COND_READY not in {c["type"] for c in kept.status.conditions}  # type: ignore[union-attr]
    pending = replace(observe(), tabs=None, pod=ContainerView(False, C.R_POD_PENDING, "Pod is Pending"))
    refused = set_condition([], C.COND_READY, False, C.R_POLICY_VIOLATION, "box policy: ...", NOW, 1)
    stale, _ = run(replace(pending, conditions=tuple(refused), state="Error"), Memory())
    assert stale.status is not None and "state" not in stale.status.fields
    assert C.COND_READY not in {c["type"] for c in stale.status.conditions}


def test_tmux_missing_and_squatter_pod():
    d, _ = run(replace(observe(), tabs=None, capture_failure=CaptureFailure(CAPTURE_NO_SESSION)), Memory())
    assert cond(d, C.COND_READY)["reason"] == C.R_SESSION_MISSING
    assert cond(d, C.COND_NEEDS_ATTENTION)["reason"] == "TmuxMissing"
    assert cond(d, C.COND_NEEDS_ATTENTION)["message"] == "tmux session 'agentbox' not found in the box container"
    squat = replace(observe(), pod_owned=False, not_owned="Pod 'box' exists but is not owned")
    s1, _ = run(squat, Memory())
    assert events(s1) == [("Warning", "PodNotOwned")] and s1.status.fields == {"state": "Error"}  # type: ignore[union-attr]
    assert events(run(squat, s1.memory)[0]) == []


def test_a_pass_is_deterministic_so_a_replay_repeats_its_prefix():
    obs = observe(tab(limited()), tab(limited(limit_menu=True, menu_choice=2), "b"))
    mem = Memory(records={"main": due()})
    assert decide(obs, mem, NOW).actions == decide(obs, mem, NOW).actions


def test_memory_round_trips_through_status():
    d, _ = run(observe(tab(limited())), Memory(records={"main": due()}))
    status = {"tabs": [record_to_status(r, "@main") for r in d.tab_records.values()],
              "subscription": "sub-a", "conditions": list(d.status.conditions)}  # type: ignore[union-attr]
    back = memory_from_status(status, "sub-x")
    assert back.records["main"].phase == d.tab_records["main"].phase and back.current == "sub-a"


# ---------------------------------------------------------------------------------------------- merge by type
@pytest.mark.parametrize("stored_reason,kept", [(C.R_CHECKING_SESSION, False), ("InvalidSpec", True)])
def test_merge_by_type_keeps_other_writers_conditions(stored_reason: str, kept: bool):
    then = NOW - timedelta(hours=1)
    stored = set_condition([], C.COND_READY, False, stored_reason, "m", then, 1)
    stored = set_condition(stored, C.COND_RATE_LIMITED, False, C.R_NONE_LIMITED, "none", then, 1)
    desired = set_condition([], C.COND_READY, True, C.R_RECONCILED, "ok", then, 1)
    desired = set_condition(desired, C.COND_RATE_LIMITED, False, C.R_NONE_LIMITED, "none", NOW, 1)
    merged = merge_conditions(stored, desired, NOW, {C.COND_READY: frozenset({C.R_CHECKING_SESSION, C.R_RECONCILED})})
    ready = next(c for c in merged if c["type"] == C.COND_READY)
    assert ready["reason"] == (stored_reason if kept else C.R_RECONCILED)
    if not kept:
        assert ready["lastTransitionTime"] == "2026-03-02T12:00:00Z"  # flipped now, not at the stale instant
    limited_ = next(c for c in merged if c["type"] == C.COND_RATE_LIMITED)
    assert limited_["lastTransitionTime"] == "2026-03-02T11:00:00Z"  # same status: its transition is kept
    extra = merge_conditions([{"type": "Other", "status": "True", "reason": "X", "message": "",
                               "lastTransitionTime": "t"}], desired, NOW)
    assert [c["type"] for c in extra] == ["Other", C.COND_READY, C.COND_RATE_LIMITED]


# ---------------------------------------------------------------------------------------------- the pod
def pod_obj(phase: str = "Running", template: str = "h1", uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": "box", "uid": uid, "annotations": {C.ANNOTATION_TEMPLATE_HASH: template}},
            "status": {"phase": phase}}


def test_missing_pod_is_created_and_ready_says_why():
    from controller.domain.box import CreatePod, PodCreated, PodFacts

    obs = replace(observe(), tabs=None, pod=None, pod_facts=PodFacts("box", None, desired_hash="h1"))
    d, _ = run(obs, Memory(), lambda a: PodCreated((("Normal", "CreatedPod", "Created Pod box"),))
               if isinstance(a, CreatePod) else ok(a))
    assert CreatePod("box") in d.actions and ("Normal", "CreatedPod") in events(d)
    assert d.period_s == 1.0 and d.next_pass_in(NOW) == 1.0 and d.status.fields == {"state": "Pending", "pod": "box"}  # type: ignore[union-attr]
    assert cond(d, C.COND_READY)["reason"] == "PodMissing" and "created a new one" in cond(d, C.COND_READY)["message"]


_CREATED = ("Normal", "CreatedPod", "Created Pod box")
_SECRET = ("Normal", "CreatedSecret", "Created Secret box-credentials")
_MISSING = ("Warning", "SubscriptionNotFound", "Subscription sub-a not found")


@pytest.mark.parametrize("events,retry_after_s,created,retry", [
    ((_SECRET, _CREATED), None, True, None),      # created among other Events
    ((_CREATED,), 30.0, True, "Created Pod box"),  # the raw facts are read independently
    ((_MISSING,), 30.0, False, _MISSING[2]),      # a retry: its last Event says which dependency is missing
    ((_MISSING,), None, False, None),              # no retry asked: no retry message
    ((_MISSING,), 0.0, False, None),               # a retry in 0 s is no retry (as the reconcile's outcome)
    ((), 30.0, False, None),                       # a retry without an Event has nothing to say
])
def test_what_a_pod_creation_outcome_means(events: tuple[tuple[str, str, str], ...], retry_after_s: float | None,
                                           created: bool, retry: str | None):
    from controller.domain.box import PodCreated, pod_creation

    assert pod_creation(PodCreated(events, retry_after_s)) == (created, retry)


@pytest.mark.parametrize("events,retry_after_s,message", [
    ((_SECRET, _CREATED), None, "Pod box was missing; created a new one"),
    ((_MISSING,), 30.0, _MISSING[2]),
    ((("Warning", "CreateFailed", "boom"),), None, None),  # neither: the heal's own message stands
])
def test_ready_says_what_the_pod_creation_did(events: tuple[tuple[str, str, str], ...], retry_after_s: float | None,
                                              message: str | None):
    from controller.domain.box import CreatePod, PodCreated, PodFacts

    obs = replace(observe(), tabs=None, pod=None, pod_facts=PodFacts("box", None, desired_hash="h1"))
    d, _ = run(obs, Memory(), lambda a: PodCreated(events, retry_after_s) if isinstance(a, CreatePod) else ok(a))
    ready = cond(d, C.COND_READY)
    assert [e for e in events] == [(a.type, a.reason, a.message) for a in d.actions if isinstance(a, PostEvent)]
    if message is None:
        assert "created a new one" not in ready["message"] and "boom" not in ready["message"]
    else:
        assert ready["message"] == message


def test_failed_pod_is_replaced_and_out_of_date_pod_is_announced_once():
    from controller.domain.box import DeletePod, PodFacts

    failed = replace(observe(), tabs=None, pod_facts=PodFacts("box", pod_obj("Failed"), "u1", "h1"))
    d, _ = run(failed, Memory(), lambda a: Done(True) if isinstance(a, DeletePod) else ok(a))
    assert DeletePod("box", "u1") in d.actions and ("Warning", "ReplacingPod") in events(d)

    old = replace(observe(), tabs=None, pod_facts=PodFacts("box", pod_obj(template="h0"), "u1", "h1", "OnDelete"))
    first, _ = run(old, Memory())
    assert events(first) == [("Normal", C.R_TEMPLATE_CHANGED)] and first.observe_tabs and first.period_s == 5.0
    full, _ = run(replace(old, tabs=(tab(IDLE),)), first.memory)
    assert events(full) == [] and cond(full, C.COND_POD_OUT_OF_DATE)["status"] == "True"


# ---------------------------------------------------------------------------------------------- when to look again
LIVE = StreamView(connected=True, pod="u1")
DOWN = StreamView(connected=False, pod="u1")


@pytest.mark.parametrize("stream,out_of_date,deadline_s,expected", [
    (None, False, None, 5.0),     # polling: the scan interval
    (DOWN, False, None, 5.0),     # the stream is down: polling again
    (LIVE, False, None, 300.0),   # a live stream wakes the watcher on a change: the long rescan
    (LIVE, True, None, 5.0),      # a pod update waits for idle tabs: judged at least every scan
    (LIVE, False, 42.0, 42.0),    # a tab's deadline comes first
    (None, False, 2.0, 2.0),
])
def test_the_decision_says_when_to_look_again(stream: StreamView | None, out_of_date: bool,
                                              deadline_s: float | None, expected: float):
    mem = Memory(out_of_date="the pod predates spec.template" if out_of_date else None)
    obs = observe(tab(IDLE), stream=stream, scan_interval_s=5.0, stream_rescan_s=300.0)
    if deadline_s is not None:  # a working tab: its stall instant is a deadline
        obs = replace(obs, tabs=(tab(WORKING),), stall_s=deadline_s)
    d, _ = run(obs, mem)
    assert d.next_pass_in(NOW) == pytest.approx(expected)


def test_a_pod_being_healed_is_looked_at_again_within_a_second_and_the_tabs_pass_not_before_decided():
    from controller.domain.box import CreatePod, PodCreated, PodFacts

    obs = replace(observe(), tabs=None, pod=None, pod_facts=PodFacts("box", None, desired_hash="h1"),
                  stream=LIVE, stream_rescan_s=300.0)
    d, _ = run(obs, Memory(), lambda a: PodCreated((("Normal", "CreatedPod", "Created Pod box"),))
               if isinstance(a, CreatePod) else ok(a))
    assert d.next_pass_in(NOW) == 1.0
    # A pass that stopped before the tabs (they are read next) says the scan interval, not the stream's.
    first = decide(replace(observe(), tabs=None, stream=LIVE, stream_rescan_s=300.0), Memory(), NOW)
    assert first.observe_tabs and first.period_s == 5.0


@pytest.mark.parametrize("scan_s", [5.0, 7.0])
def test_an_invalid_spec_decides_nothing_and_looks_again_at_the_scan_interval(scan_s: float):
    """The reconcile handler reports an invalid spec; the watcher's decision does nothing, writes nothing,
    keeps its memory, and says to look again at the scan interval (not the live stream's long rescan, not a
    tab's deadline: the spec may be fixed at any time)."""
    from controller.domain.box import INVALID_SPEC_BOX, PodFacts

    mem = Memory(records={"main": due()}, current="sub-a")
    obs = replace(observe(tab(limited()), box=INVALID_SPEC_BOX), spec_valid=False, stream=LIVE,
                  scan_interval_s=scan_s, stream_rescan_s=300.0, pod_facts=PodFacts("box", None, desired_hash="h1"))
    d = decide(obs, mem, NOW)
    assert d.complete and d.actions == () and d.status is None and d.memory == mem
    assert d.period_s == scan_s and d.next_pass_in(NOW) == scan_s
    # The same observation with a valid spec is decided on (the flag is what holds it).
    assert decide(replace(obs, box=CLAUDE, spec_valid=True), mem, NOW).actions != ()


# ---------------------------------------------------------------------------------------------- capture failures
def test_output_too_large_is_worded_with_the_limit_and_warned_once():
    obs = replace(observe(), tabs=None, capture_failure=CaptureFailure(CAPTURE_TOO_LARGE, 4096))
    d, _ = run(obs, Memory())
    need = cond(d, C.COND_NEEDS_ATTENTION)
    assert need["reason"] == C.R_BOX_OUTPUT_TOO_LARGE and "more than 4096 bytes" in need["message"]
    assert cond(d, C.COND_READY)["status"] == "True"  # the session exists: only its output is too large
    assert events(d) == [("Warning", C.R_BOX_OUTPUT_TOO_LARGE)]
    assert events(run(obs, d.memory)[0]) == []  # once per episode


def test_a_failed_exec_decides_nothing_and_looks_again_at_the_next_scan():
    obs = replace(observe(), tabs=None, capture_failure=CaptureFailure(CAPTURE_TRANSPORT), stream=LIVE,
                  input_problems={"patterns": (C.R_INVALID_PATTERN, ("bad pattern",))})
    d, _ = run(obs, Memory())
    assert d.status is None and d.actions == () and d.next_pass_in(NOW) == 5.0


# ---------------------------------------------------------------------------------------------- facts
class _Adapter:
    def __init__(self, provider: str | None, restart_argv: tuple[str, ...] | None = None) -> None:
        self.provider, self.restart_argv = provider, restart_argv
        self.continue_text, self.exit_before_login_switch, self.stop_keys = "go on", True, ("Escape", "Escape")


@pytest.mark.parametrize("provider,subscription,watched", [
    ("anthropic", "sub-a", True), ("anthropic", None, False), (None, "sub-a", False), (None, None, False)])
def test_tabs_are_watched_only_for_a_provider_agent_on_a_subscription(provider: str | None,
                                                                       subscription: str | None, watched: bool):
    facts = box_facts("claude-code", subscription, _Adapter(provider), rotation=True, rotation_selected=["x"])
    assert facts.watched is watched and facts.provider == (provider or "")
    assert facts.rotation and facts.rotation_selected == ("x",) and facts.stop_keys == ("Escape", "Escape")
    assert facts.continue_text == "go on" and facts.stop_to_switch and not facts.restarts
    assert box_facts("codex", "s", _Adapter("openai", ("codex", "resume"))).restarts


def test_time_zone_precedence_spec_then_container_tz_then_utc():
    from controller.domain.podstate import box_time_zone

    pod = {"spec": {"containers": [{"name": "side", "env": [{"name": "TZ", "value": "Asia/Tokyo"}]},
                                   {"name": "box", "env": [{"name": "TZ", "value": "Europe/Paris"}]}]}}
    assert box_time_zone("America/New_York", pod, "box") == "America/New_York"
    assert box_time_zone(None, pod, "box") == "Europe/Paris"
    assert box_time_zone(None, pod, "other") == "UTC"
    assert box_time_zone(None, {"spec": {"containers": "junk"}}, "box") == "UTC"  # untrusted shape
    assert box_time_zone(None, None, None) == "UTC"


def test_user_patterns_that_do_not_compile_are_named_and_the_others_kept():
    from controller.domain.detection import compile_user_patterns

    good, problems = compile_user_patterns([("limit until (?P<when>.+)", "usage"), ("(a+)+", "usage"),
                                            ("x", "nonsense"), ("(a+)+", "usage")])
    assert len(good) == 1
    assert problems == tuple(sorted(problems)) and len(problems) == 3
    assert problems[0].startswith("spec.detection.patterns[1].regex: nested quantifier")
    assert all(p.endswith(" (the pattern is ignored)") for p in problems)
    assert any(p.startswith("spec.detection.patterns[2].regex: unknown kind") for p in problems)


# ---------------------------------------------------------------------------------------------- structured usage
def structured(answer: StructuredRead) -> Responder:
    return lambda a: answer if isinstance(a, ReadStructured) else ok(a)


def reads(steps: list[BoxDecision]) -> int:
    return sum(1 for a in steps[-1].actions if isinstance(a, ReadStructured))


FULL = StructuredRead(usage(100.0, NOW + timedelta(hours=2)), "statusline")


def test_structured_usage_is_read_only_when_a_tab_stopped_and_merged_into_its_detection():
    busy, steps = run(observe(tab(WORKING)), Memory(), structured(FULL))
    assert reads(steps) == 0 and busy.tab_records["main"].phase != Phase.RATE_LIMITED
    d, steps = run(observe(tab(IDLE)), Memory(), structured(FULL))
    assert ReadStructured("claude-code", NOW) in d.actions
    rec = d.tab_records["main"]  # an idle screen on an account at 100 %: limited until the exact reset
    assert rec.phase == Phase.RATE_LIMITED and rec.resets_at == NOW + timedelta(hours=2)
    assert rec.detected_by == "structured:statusline"
    # An account under 100 % changes nothing.
    calm, _ = run(observe(tab(IDLE)), Memory(), structured(StructuredRead(usage(50.0), "statusline")))
    assert calm.tab_records["main"].phase == Phase.IDLE


@pytest.mark.unit
@pytest.mark.parametrize("stream,age_s,state_changed,screen_changed,read_again", [
    (LIVE, 10.0, False, False, False),     # live, same tabs and screens, young: the last read is reused
    (LIVE, 300.0, False, False, False),    # live, nothing drawn since the read, a rescan later: reused (issue 20)
    (LIVE, 18000.0, False, False, False),  # ... five hours later: still reused (an idle box reads its files once)
    (LIVE, 10.0, False, True, False),      # live, a screen changed but no tab changed state, young: reused
    (LIVE, 300.0, False, True, True),      # ... as old as stream_rescan_s: read again
    (LIVE, 10.0, True, False, True),       # live, a tab's state changed (a turn ended): read again
    (None, 10.0, False, False, True),      # polling: every pass reads
    (None, 300.0, False, False, True),
    (DOWN, 10.0, False, False, True),      # stream down: polling
    (DOWN, 300.0, False, False, True),
])
def test_structured_read_is_reused_on_the_live_stream_while_the_tabs_are_unchanged(
        stream: StreamView | None, age_s: float, state_changed: bool, screen_changed: bool, read_again: bool):
    """Issue 20: the rule read the files again at every rescan pass (the last read was then
    `stream_rescan_s` old), 2 execs per idle box every 300 s; a pass whose tabs and screens are those of the
    last read reuses it, however old."""
    first, _ = run(observe(tab(IDLE), stream=stream), Memory(), structured(FULL), now=NOW - timedelta(seconds=age_s))
    assert first.memory.structured is not None
    later = tab(limited(None) if state_changed else IDLE, screen="screen, one line more" if screen_changed else "screen")
    mem = Memory(structured=first.memory.structured)  # only the last read, no tab records
    d, steps = run(observe(later, stream=stream, stream_rescan_s=300.0), mem,
                   structured(StructuredRead(None, "statusline")))
    assert reads(steps) == (1 if read_again else 0)
    # Reused: the last read merges again (the idle tab is limited); read again: the new (empty) read counts.
    merged = d.tab_records["main"].detected_by == "structured:statusline"
    assert merged is (not read_again)
    assert (d.memory.structured == first.memory.structured) is (not read_again)


@pytest.mark.unit
def test_a_reused_structured_read_stops_limiting_once_its_window_reset():
    """The last read is reused across rescans while nothing is drawn, and merged at each pass's `now`: the
    100 % window of an old read no longer limits the idle tab after its reset (no fresh read is needed for that)."""
    first, _ = run(observe(tab(IDLE), stream=LIVE), Memory(), structured(FULL))
    assert first.tab_records["main"].phase == Phase.RATE_LIMITED
    after, steps = run(observe(tab(IDLE), stream=LIVE), Memory(structured=first.memory.structured),
                       structured(StructuredRead(None, "statusline")), now=NOW + timedelta(hours=3))
    assert reads(steps) == 0
    assert after.tab_records["main"].phase == Phase.IDLE


def test_a_failed_structured_read_merges_nothing_and_keeps_the_files_problems():
    bad = StructuredRead(None, "", ("~/.claude/statusline.json: larger than 65536 bytes; ignored",))
    first, _ = run(observe(tab(IDLE)), Memory(), structured(bad))
    assert cond(first, C.COND_INPUT_IGNORED)["reason"] == C.R_INVALID_BOX_FILE
    assert ("Warning", C.R_INVALID_BOX_FILE) in events(first)
    again, _ = run(observe(tab(IDLE)), first.memory, structured(bad))
    assert ("Warning", C.R_INVALID_BOX_FILE) not in events(again)  # one Warning per problem
    failed, _ = run(observe(tab(IDLE)), first.memory, structured(StructuredRead(None, failed=True)))
    assert cond(failed, C.COND_INPUT_IGNORED)["status"] == "True"  # not checked: the last problems stand
    assert failed.memory.structured == first.memory.structured  # a failed read is not remembered
    fixed, _ = run(observe(tab(IDLE), conditions=first.status.conditions), first.memory,  # type: ignore[union-attr]
                   structured(StructuredRead(None)))
    assert cond(fixed, C.COND_INPUT_IGNORED)["status"] == "False"


# ---------------------------------------------------------------------------------------------- raw outcomes
A = ("codex", "resume", "--last")


@pytest.mark.parametrize("res,action,words", [
    (Performed("t", True, NOW, Step.ENTER, text="continue"), JournalAction.CONTINUE, "sent 'continue'"),
    (Performed("t", False, NOW, Step.ENTER, text="continue"), JournalAction.CONTINUE,
     "sent 'continue' but the screen did not change"),
    (Performed("t", True, NOW, Step.ENTER, True, "continue", A), JournalAction.CONTINUE,
     "restarted with 'codex resume --last' and sent 'continue'"),
    # A restart whose relaunch happened before a controller restart still says what it ran.
    (Performed("t", False, NOW, Step.ENTER, False, "go", A), JournalAction.RESTART,
     "restarted with 'codex resume --last' and sent 'go' but the screen did not change"),
    (Performed("t", False, NOW, Step.INTERRUPT, keys=("C-c", "C-c")), JournalAction.RESTART,
     "pressed C-c+C-c but the agent did not exit"),
    (Performed("t", False, NOW, Step.AWAIT_AGENT, True, argv=A), JournalAction.RESTART,
     "ran 'codex resume --last' but the agent's prompt did not come back"),
    (Performed("t", False, NOW, Step.PRESS, text="1"), JournalAction.ANSWER_MENU, "pressed 1"),
    (Performed("t", True, NOW, None), JournalAction.CONTINUE, "nothing left to send"),
])
def test_the_decision_words_what_a_journaled_action_did(res: Performed, action: JournalAction, words: str):
    assert describe(res, action) == words


def test_a_failed_restart_is_worded_in_the_tab_and_the_event():
    fail = (lambda a: Performed(a.tab, False, NOW, Step.INTERRUPT, keys=("C-c", "C-c"))
            if isinstance(a, RunJournal) else ok(a))
    obs = observe(tab(limited()), box=CODEX, subs=(sub("sub-a", provider="openai"),))
    d, _ = run(obs, Memory(records={"main": due()}), fail)
    assert d.tab_records["main"].message == "pressed C-c+C-c but the agent did not exit; a human should look"
    assert PostEvent("Warning", C.R_RESUME_FAILED, "Tab main: pressed C-c+C-c but the agent did not exit") in d.actions


@pytest.mark.parametrize("installed,patch", [
    (True, (("switch", None), ("subscription", "sub-b"))),  # finished: the box is on the new subscription
    (False, (("switch", None),)),                           # given up: status.switch cleared, box unmoved
])
def test_a_switch_left_by_a_previous_controller_is_finished_once_and_status_says_so(installed: bool,
                                                                                   patch: tuple[Any, ...]):
    pending = {"to": "sub-b", "fromSubscription": "sub-a", "tabs": ["main"], "reason": "limit"}
    obs = observe(tab(limited()), box=replace(CLAUDE, rotation=True), subs=(sub("sub-a"), sub("sub-b")))
    mem = memory_from_status({"subscription": "sub-a", "switch": pending}, "sub-a")
    # (rotation on: the switch was the rotation's; its next switch fails as the install did)
    d, _ = run(obs, mem, lambda a: Done(installed) if isinstance(a, (InstallLogin, SwitchSubscription)) else ok(a))
    install = d.actions.index(InstallLogin("sub-b", "complete"))
    assert d.actions[install + 1] == PatchStatus(patch)  # written right after the install, before any key
    assert [a for a in d.actions if isinstance(a, PatchStatus)] == [PatchStatus(patch)]
    assert d.memory.current == ("sub-b" if installed else "sub-a")
    assert d.memory.pending_switch is None  # once: the next pass does not finish it again
    assert not any(isinstance(a, InstallLogin) for a in run(obs, d.memory)[0].actions)


def test_switch_patches_journal_the_switch_before_its_keys_and_clear_it_at_the_end():
    from controller.domain.box import switch_patches

    action = SwitchSubscription("sub-a", "sub-b", "x" * 2000, "limit", tuple(f"t{i}" for i in range(100)),
                                (("t0", "%0"),), NOW)
    started, installing, finished = switch_patches(action)
    assert started["switch"]["step"] == "StopAgents" and started["switch"]["to"] == "sub-b"
    assert started["switch"]["startedAt"] == "2026-03-02T12:00:00Z" and len(started["switch"]["tabs"]) == 64
    assert len(started["switch"]["reason"]) <= 1024
    assert installing["switch"] == {**started["switch"], "step": "InstallLogin"}
    assert finished == {"subscription": "sub-b", "switch": None}


def test_what_wakes_the_live_stream_is_what_a_decision_reads():
    from controller.domain.box import agent_ready, screen_key

    base = screen_key(IDLE)
    assert screen_key(replace(IDLE, evidence="another idle screen")) == base  # nothing a decision reads
    for changed in (WORKING, limited(), replace(limited(), resets_at=NOW + timedelta(hours=3)),
                    replace(IDLE, prompt_text="half typed"), replace(IDLE, limit_menu=True),
                    replace(IDLE, auto_continue=True), replace(IDLE, menu_choice=2)):
        assert screen_key(changed) != base, changed
    assert agent_ready(IDLE) and not agent_ready(Detection(TabState.WORKING))


@pytest.mark.parametrize("connected,why,failures,max_failures,reason", [
    (True, None, 0, 5, C.R_STREAMING),
    (True, None, 7, 5, C.R_STREAMING),             # attached again (a retry after giving up): streaming
    (False, None, 0, 5, C.R_STREAM_RECONNECTING),
    (False, None, 4, 5, C.R_STREAM_RECONNECTING),  # one failure short of giving up
    (False, "the tmux control stream failed 5 times", 5, 5, C.R_STREAM_UNUSABLE),  # given up at max_failures
    (False, None, 6, 5, C.R_STREAM_UNUSABLE),      # given up, no reason given: worded anyway
    (False, "no tmux", 0, 5, C.R_NO_CONTROL_MODE),  # control mode cannot be used: not a failure count
    (False, "no tmux", 1, 1, C.R_STREAM_UNUSABLE),
])
def test_the_stream_is_given_up_when_its_failures_reach_the_most_allowed(
        connected: bool, why: str | None, failures: int, max_failures: int, reason: str):
    from controller.domain.box import stream_given_up

    stream = StreamView(connected, why, failures, max_failures, "u1")
    assert stream_given_up(stream) == (failures >= max_failures)
    d, _ = run(observe(tab(IDLE), stream=stream), Memory())
    assert cond(d, C.COND_TERMINAL_STREAM)["reason"] == reason
    assert (("Warning", C.R_STREAM_UNUSABLE) in events(d)) == (reason == C.R_STREAM_UNUSABLE)


def test_a_snapshot_written_ahead_announces_nothing_so_the_replay_matches():
    """The status an incomplete decision is written ahead with announces nothing (the stream given up
    is warned once, by the complete decision): an Event after the waiting action broke the replay
    (ReplayMismatch on every pass of a box whose stream was given up)."""
    gone = StreamView(connected=False, why="output flood", failures=3, max_failures=3, pod="u1")
    d, steps = run(observe(tab(IDLE), stream=gone), Memory())  # run() checks the replay property
    assert len(steps) == 2 and steps[0].actions == (ReadStructured("claude-code", NOW),)
    assert events(d) == [("Warning", C.R_STREAM_UNUSABLE)]
    assert cond(d, C.COND_TERMINAL_STREAM)["reason"] == C.R_STREAM_UNUSABLE


# ---------------------------------------------------------------------------------------------- unwatched boxes
@pytest.mark.parametrize("exists,ready,reason", [
    (True, "True", C.R_RECONCILED), (False, "False", C.R_SESSION_MISSING),
    (None, None, None),  # the exec failed: unknown, Ready left as it is
])
def test_a_box_whose_tabs_are_not_watched_asks_for_its_session(exists: bool | None, ready: str | None,
                                                                reason: str | None):
    from controller.domain.box import CheckSession, SessionSeen

    plain = replace(CLAUDE, subscription=None, watched=False)
    obs = replace(observe(), box=plain, session=None, tabs=None)
    d, steps = run(obs, Memory(), lambda a: SessionSeen(exists) if isinstance(a, CheckSession) else ok(a))
    assert steps[0].actions == (CheckSession(),) and not steps[0].complete
    if ready is None:
        assert C.COND_READY not in {c["type"] for c in d.status.conditions}  # type: ignore[union-attr]
    else:
        assert (cond(d, C.COND_READY)["status"], cond(d, C.COND_READY)["reason"]) == (ready, reason)
    # A container that does not run is not asked; a watched box learns it from its tabs.
    stopped = replace(obs, pod=ContainerView(False, C.R_CONTAINER_WAITING, "CrashLoopBackOff"))
    assert not any(isinstance(a, CheckSession) for a in run(stopped, Memory())[0].actions)
    assert not any(isinstance(a, CheckSession) for a in run(replace(observe(), session=None, tabs=None), Memory())[0].actions)


# ---------------------------------------------------------------------------------------------- the executor's usage read
@pytest.mark.parametrize("login_provider,reads", [("anthropic", True), ("openai", False), (None, False)])
async def test_the_executor_returns_the_logins_provider_and_never_sends_a_login_to_another_provider(
        login_provider: str | None, reads: bool):
    """The usage read's raw facts (`UsageRead.login_provider`; `usage_known` decides): a login of another
    provider is never sent to the asked provider's API, and nothing is decided in the executor."""
    from types import SimpleNamespace

    from controller.service.executor import Executor

    calls: list[tuple[Any, ...]] = []

    async def load(kube: Any, namespace: str, name: str) -> Any:
        return SimpleNamespace(usable=login_provider is not None, provider=login_provider, text="{}", login="L")

    async def get(key: Any, provider: str, login: Any, **kw: Any) -> Usage:
        calls.append((key, provider, login))
        return usage(20.0)

    rt = SimpleNamespace(logins=SimpleNamespace(load=load), usage=SimpleNamespace(get=get), kube=None,
                         clock=lambda: NOW)
    ex = Executor(rt, "ns", "box", "u1", None, None, lambda *a: None, None, None, {}, None, None)  # type: ignore[arg-type]
    read = await ex._blocking(ReadUsage("sub-a", 60.0, ("main",), "anthropic"))
    assert read.login_provider == login_provider and read.at == NOW
    assert (read.usage is not None) == reads
    assert calls == ([(("ns", "sub-a"), "anthropic", "L")] if reads else [])
