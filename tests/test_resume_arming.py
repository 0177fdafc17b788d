"""Prepare during the margin, press Enter at the resume instant (pure domain, table-tested, no clock).

The usage is re-read `prepare_s` before the resume instant (never before the reset + 1 s: `prepare_at`);
when it says the window reset, the continue is armed: its journal is written ahead with `not_before` (the
resume instant) and the action carries it with the digest of the screen decided on (`expect`). A screen that
changed before the keys gets nothing and is planned again. `prepare_s` 0 is the behaviour before arming
(tests/test_resume_planning.py runs every rule of resume that way, unchanged).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.box import (
    Count, DecideConfig, Memory, Performed, ReadUsage, RunJournal, SendContinue, UsageRead,
    memory_from_status, record_to_status, screen_digest,
)
from controller.domain.resume import (
    Action, JournalAction, Phase, ResumeConfig, Step, TabRecord, after_usage, plan_tab, prepare_at, start_journal,
    usage_verdict,
)
from controller.domain.types import Detection, LimitKind, TabState, Usage, Window
from harness.decide_cases import CODEX, IDLE, events, limited, observe, ok, run, sub, tab, usage

pytestmark = pytest.mark.unit

T = datetime(2026, 3, 2, 12, 0, 0, tzinfo=timezone.utc)   # the reset (a minute, as Claude Code prints it)
ARMED = DecideConfig(ResumeConfig(margin_s=10, prepare_s=8))
BEFORE = DecideConfig(ResumeConfig(margin_s=10, prepare_s=0))
LINE = limited(resets_at=T)
SCREEN = "  ⎿  You've hit your 5-hour limit · resets 12pm (UTC)\n> "


def s(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def answers(now: datetime, percent: float = 20.0, resets: datetime | None = None, send=None):
    """A responder for a pass at `now`: the usage read at `now` (`percent`, resetting at `resets`), the keys
    as `send` says (default: they moved the screen)."""
    def respond(a):
        if isinstance(a, ReadUsage):
            return UsageRead(usage(percent, resets or now + timedelta(hours=4)), now, a.provider)
        if send is not None and isinstance(a, (SendContinue, RunJournal)):
            return send(a)
        return ok(a)
    return respond


def run_at(obs, mem: Memory, now: datetime, cfg: DecideConfig, respond=None):
    """One pass as the watcher runs it (blocking results fed back, the replay rule checked); returns
    (decision, steps)."""
    return run(obs, mem, respond or answers(now), now, cfg=cfg)


def detected(cfg: DecideConfig = ARMED) -> Memory:
    """The memory after the pass that saw the limit line at T - 30 s."""
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), Memory(), s(-30), cfg)
    return d.memory


# ---------------------------------------------------------------------------------------------- prepare_at
@pytest.mark.parametrize("margin,prepare,resets,want", [
    (10, 8, T, s(2)),        # default: read 2 s after the reset, Enter at reset + 10 s
    (10, 20, T, s(1)),       # never before the reset + 1 s (the provider's window must have reset)
    (1, 8, T, s(1)),         # a short margin: the resume instant itself
    (0, 8, T, s(0)),         # no margin: never after the resume instant
    (10, 0, T, s(10)),       # prepare 0: at the resume instant (the behaviour before arming)
    (10, 8, None, s(10)),    # no known reset (annotation, switch): at the resume instant
])
def test_prepare_instant_rule(margin, prepare, resets, want):
    cfg = ResumeConfig(margin_s=margin, prepare_s=prepare)
    assert prepare_at(T + timedelta(seconds=margin), resets, cfg) == want


def test_prepare_bounds_are_checked():
    with pytest.raises(ValueError):
        ResumeConfig(prepare_s=61)
    with pytest.raises(ValueError):
        ResumeConfig(prepare_s=-1)


def test_limit_wakes_at_the_prepare_instant_and_checks_usage_then():
    cfg = ARMED.resume
    plan = plan_tab(TabRecord("main"), LINE, None, s(-30), cfg)
    assert plan.record.resume_at == s(10) and plan.wake_at == s(2)
    assert plan_tab(plan.record, LINE, None, s(1.9), cfg).action == Action.NONE
    due = plan_tab(plan.record, LINE, None, s(2), cfg)
    assert due.action == Action.CHECK_USAGE and due.record.resume_at == s(10)
    # The rules of resume still hold at the prepare instant: a human typed, a half-typed line.
    assert plan_tab(plan.record, LINE, s(-20), s(2), cfg).action == Action.NONE
    assert plan_tab(plan.record, replace(LINE, prompt_text="my draft"), None, s(2), cfg).record.phase == \
        Phase.NEEDS_ATTENTION


def test_auto_continue_tab_is_prepared_before_its_later_check():
    cfg = ARMED.resume
    det = replace(LINE, auto_continue=True)
    plan = plan_tab(TabRecord("main"), det, None, s(-30), cfg)
    # Claude Code's own continue gets the grace from the end of the printed minute; the read comes 8 s earlier.
    assert plan.record.resume_at == s(180) and plan.wake_at == s(172)


# ---------------------------------------------------------------------------------------------- arming
def test_read_during_the_margin_arms_the_send_for_the_resume_instant():
    mem = detected()
    d, steps = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(2), ARMED)
    read = next(a for a in d.actions if isinstance(a, ReadUsage))
    assert read.max_age_s == pytest.approx(2.0)  # a read from after the reset
    send = next(a for a in d.actions if isinstance(a, SendContinue))
    assert send.not_before == s(10)
    assert send.expect == (screen_digest(SCREEN),)
    ahead = next(st for st in steps if not st.complete and isinstance(st.actions[-1], SendContinue))
    journal = ahead.status.fields["tabs"][0]["journal"]  # type: ignore[union-attr]
    assert journal["step"] == "Type" and journal["notBefore"] == "2026-03-02T12:00:10Z"
    armed = ahead.memory.records["main"]
    assert armed.phase == Phase.RESUMING and armed.sent_at == s(10) and armed.attempts == 1
    assert "armed for 12:00:10" in (armed.message or "")
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RESUMING and rec.journal is None and ("Normal", "Resumed") in events(d)


def test_the_enter_lag_is_measured_from_the_armed_instant():
    late = answers(s(2), send=lambda a: tuple(Performed(t, True, s(10.4), Step.ENTER, text="continue",
                                                        entered_at=s(10.25)) for t, _ in a.tabs))
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), detected(), s(2), ARMED, late)
    lags = [a.value for a in d.actions if isinstance(a, Count) and a.metric == "DEADLINE_LAG"]
    assert lags == [pytest.approx(0.25)]


def test_prepare_zero_reads_at_the_resume_instant_and_sends_unarmed():
    mem = detected(BEFORE)
    assert mem.records["main"].resume_at == s(10)
    early, _ = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(2), BEFORE)
    assert not any(isinstance(a, ReadUsage) for a in early.actions) and early.wake_at == (s(10),)
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(10), BEFORE)
    send = next(a for a in d.actions if isinstance(a, SendContinue))
    assert send.not_before is None and send.expect == ()
    assert d.tab_records["main"].sent_at == s(10)


def test_a_read_at_or_after_the_resume_instant_sends_unarmed():
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), detected(), s(12), ARMED)
    send = next(a for a in d.actions if isinstance(a, SendContinue))
    assert send.not_before is None and send.expect == ()


def test_usage_not_reset_at_the_prepare_read_waits_for_the_new_reset_unarmed():
    real = s(40)  # the printed minute, the real reset 40 s later
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), detected(), s(2), ARMED, answers(s(2), 100.0, real))
    assert not any(isinstance(a, (SendContinue, RunJournal)) for a in d.actions)
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RATE_LIMITED and rec.resume_at == s(50) and rec.journal is None
    assert d.wake_at == (s(42),)  # prepared again 8 s before the new resume instant
    assert ("Normal", "ResetNotYet") in events(d)
    again, _ = run_at(observe(tab(LINE, screen=SCREEN)), d.memory, s(42), ARMED)
    assert next(a for a in again.actions if isinstance(a, SendContinue)).not_before == s(50)


def test_unconfirmed_reset_on_a_minute_screen_is_armed_for_the_end_of_the_minute():
    cfg = ARMED.resume
    rec = plan_tab(TabRecord("main"), LINE, None, s(-30), cfg).record
    wait = after_usage(rec, usage_verdict(None, "five_hour", s(2)), s(2), cfg)
    assert wait.record.phase == Phase.RATE_LIMITED and wait.record.resume_at == s(70) and wait.wake_at == s(62)
    armed = after_usage(wait.record, usage_verdict(None, "five_hour", s(62)), s(62), cfg)
    assert armed.record.phase == Phase.RESUMING and armed.not_before == s(70)


def test_restarting_agent_is_armed_too():
    codex = observe(tab(LINE, screen=SCREEN), box=CODEX, subs=(sub("sub-a", provider="openai"),))
    mem = run_at(codex, Memory(), s(-30), ARMED)[0].memory
    d, _ = run_at(codex, mem, s(2), ARMED)
    restart = next(a for a in d.actions if isinstance(a, RunJournal))
    assert restart.journal.action == JournalAction.RESTART and restart.journal.not_before == s(10)
    assert restart.expect == screen_digest(SCREEN)


# ---------------------------------------------------------------------------------------------- the guard
def moved(a):
    """The screen moved before the keys: nothing was typed."""
    if isinstance(a, SendContinue):
        return tuple(Performed(t, False, s(9.4), None, text="continue", screen_changed=True) for t, _ in a.tabs)
    return Performed(a.tab, False, s(9.4), None, text="continue", screen_changed=True)


def test_screen_changed_before_the_keys_sends_nothing_and_plans_again():
    mem = detected()
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(2), ARMED, answers(s(2), send=moved))
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RATE_LIMITED and rec.journal is None
    assert rec.sent_for is None and rec.attempts == 0 and rec.resume_at == s(10)  # no attempt counted
    assert "nothing was sent" in (rec.message or "")
    assert ("Normal", "Resumed") not in events(d)
    assert any(isinstance(a, Count) and a.labels[-1] == "screen_changed" for a in d.actions)
    assert d.wake_at == (s(2),)  # looked at again at once (next_pass_in never returns 0)
    # A human typed after arming: the next pass sees the draft and the recent input: nothing is read or sent.
    human = observe(tab(replace(LINE, prompt_text="fix the parser"), last_input=s(9), screen=SCREEN + "fix"))
    held, _ = run_at(human, d.memory, s(9.5), ARMED)
    assert not any(isinstance(a, (ReadUsage, SendContinue)) for a in held.actions)
    # The agent resumed by itself: the tab is working, nothing to send.
    working, _ = run_at(observe(tab(IDLE, screen="> ")), d.memory, s(9.5), ARMED)
    assert not any(isinstance(a, (ReadUsage, SendContinue)) for a in working.actions)
    # Nothing changed after all (a spurious difference): armed again for the same instant.
    again, _ = run_at(observe(tab(LINE, screen=SCREEN)), d.memory, s(9.5), ARMED)
    assert next(a for a in again.actions if isinstance(a, SendContinue)).not_before == s(10)


def held(a):
    """Typed, but Enter held: the screen moved between the typing and the instant (a human typed after ours)."""
    if isinstance(a, SendContinue):
        return tuple(Performed(t, False, s(10), Step.ENTER, text="continue", held=True) for t, _ in a.tabs)
    return Performed(a.tab, False, s(10), Step.ENTER, text="continue", held=True)


def test_an_enter_held_keeps_the_journal_at_enter_for_the_screen_to_judge():
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), detected(), s(2), ARMED, answers(s(2), send=held))
    rec = d.tab_records["main"]
    assert rec.journal is not None and rec.journal.step == Step.ENTER and rec.journal.not_before == s(10)
    assert rec.phase == Phase.RESUMING
    assert "did not press Enter" in (rec.message or "")
    assert ("Normal", "Resumed") not in events(d) and ("Warning", "ResumeFailed") not in events(d)
    assert d.wake_at == (s(2),)  # judged again at once
    # Next pass: a human typed after ours: the tab is theirs, nothing is sent, the journal is closed.
    theirs = replace(LINE, prompt_text="continue please")
    nxt, _ = run_at(observe(tab(theirs, last_input=s(9.8), screen=SCREEN + "continue please")), d.memory, s(11),
                    ARMED)
    assert not any(isinstance(a, (SendContinue, RunJournal)) for a in nxt.actions)
    assert nxt.tab_records["main"].journal is None and "human typed" in (nxt.tab_records["main"].message or "")
    # A line the controller did not type (no input time seen): left intact and a human is asked.
    nxt, _ = run_at(observe(tab(theirs, screen=SCREEN + "continue please")), d.memory, s(11), ARMED)
    assert not any(isinstance(a, (SendContinue, RunJournal)) for a in nxt.actions)
    assert nxt.tab_records["main"].phase == Phase.NEEDS_ATTENTION and ("Warning", "PromptNotEmpty") in events(nxt)
    # Or our text alone (a spurious change of the screen): its Enter, once.
    ours = replace(LINE, prompt_text="continue")
    again, _ = run_at(observe(tab(ours, screen=SCREEN + "continue")), d.memory, s(11), ARMED)
    (enter,) = [a for a in again.actions if isinstance(a, RunJournal)]
    assert enter.journal.step == Step.ENTER


# ---------------------------------------------------------------------------------------------- recovery
def armed_memory(step: Step = Step.TYPE) -> Memory:
    """What a controller killed while armed left in status (rebuilt from it, as after a restart)."""
    rec = TabRecord("main", Phase.RESUMING, limit_key=detected().records["main"].limit_key, resets_at=T,
                    window="five_hour", detected_by=LINE.detected_by, attempts=1, sent_at=s(10),
                    journal=start_journal(JournalAction.CONTINUE, s(2), None, "continue", not_before=s(10)).at(step, s(2)))
    rec = replace(rec, sent_for=rec.limit_key, journal=replace(rec.journal, for_key=rec.limit_key))  # type: ignore[arg-type]
    return memory_from_status({"tabs": [record_to_status(rec, "@main")], "subscription": "sub-a"}, "sub-a")


def test_armed_journal_survives_status_and_is_completed_not_before_its_instant():
    mem = armed_memory()
    assert mem.records["main"].journal.not_before == s(10)  # type: ignore[union-attr]
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(4), ARMED)
    action = next(a for a in d.actions if isinstance(a, RunJournal))
    assert action.why == "recover" and action.journal.step == Step.TYPE and action.journal.not_before == s(10)
    assert action.expect == screen_digest(SCREEN)  # it waits: the screen is checked again before its keys
    assert not any(isinstance(a, (SendContinue, ReadUsage)) for a in d.actions)  # once: no second send


def test_armed_journal_past_its_instant_is_completed_at_once():
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), armed_memory(), s(30), ARMED)
    action = next(a for a in d.actions if isinstance(a, RunJournal))
    assert action.journal.not_before == s(10) and action.expect == ""


def test_armed_journal_with_our_text_typed_waits_for_its_enter():
    typed = replace(LINE, prompt_text="continue")
    d, _ = run_at(observe(tab(typed, screen=SCREEN + "continue")), armed_memory(Step.ENTER), s(9.6), ARMED)
    action = next(a for a in d.actions if isinstance(a, RunJournal))
    assert action.journal.step == Step.ENTER and action.journal.not_before == s(10)


def test_recovered_armed_journal_whose_screen_changed_is_planned_again():
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), armed_memory(), s(4), ARMED, answers(s(4), send=moved))
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RATE_LIMITED and rec.journal is None and rec.sent_for is None
    assert rec.resume_at == s(10) and rec.attempts == 0
    again, _ = run_at(observe(tab(LINE, screen=SCREEN)), d.memory, s(5), ARMED)
    assert next(a for a in again.actions if isinstance(a, SendContinue)).not_before == s(10)


def test_not_before_is_rounded_up_in_status_and_an_unreadable_one_sends_nothing():
    from controller.domain.box import journal_from_status, journal_to_status

    j = start_journal(JournalAction.CONTINUE, T, "k", "continue", not_before=s(10.2))
    assert journal_to_status(j)["notBefore"] == "2026-03-02T12:00:11Z"  # type: ignore[index]
    assert journal_from_status(journal_to_status(replace(j, not_before=s(10)))) == replace(j, not_before=s(10))
    bad = {**journal_to_status(j), "notBefore": "soon"}  # type: ignore[dict-item]
    assert journal_from_status(bad) is None


def test_usage_window_fixture_is_what_the_verdict_reads():
    # Guard for the builders above: the `ok` responder's usage (20 %) counts as reset, 100 % as not.
    assert usage_verdict(Usage({"five_hour": Window("five_hour", 20.0, s(3600))}), "five_hour", s(2)).reset
    assert not usage_verdict(usage(100.0, s(40)), "five_hour", s(2)).reset
