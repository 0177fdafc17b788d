"""Resume planning rules (DESIGN §3), table-tested on the pure domain with an explicit clock."""

from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.resume import (
    Action, Phase, ResumeConfig, TabRecord, after_usage, next_pass_in, plan_tab, usage_verdict,
)
from controller.domain.types import Detection, LimitKind, TabState, Usage, Window

pytestmark = pytest.mark.unit

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)
RESET = T0 + timedelta(hours=2)
# prepare_s 0: the rules at the resume instant, as before arming (each holds unchanged with it; the preparation
# during the margin is tests/test_resume_arming.py).
CFG = ResumeConfig(margin_s=10, human_idle_s=60, auto_continue_grace_s=120, settle_s=20, max_attempts=3, prepare_s=0)


def limited(reset=RESET, evidence="You've hit your 5-hour limit · resets 2pm (UTC)", **kw) -> Detection:
    return Detection(TabState.RATE_LIMITED, LimitKind.USAGE, reset, kw.pop("window", "five_hour"),
                     evidence=evidence, detected_by=kw.pop("detected_by", "pattern:test"),
                     prompt_text=kw.pop("prompt_text", ""), **kw)


def reset_read(now: datetime) -> Usage:
    """A usage read confirming the reset (the window starts afresh)."""
    return Usage({"five_hour": Window("five_hour", 3.0, now + timedelta(hours=5))}, read_at=now)


WORKING = Detection(TabState.WORKING, evidence="✶ Composing…")
IDLE = Detection(TabState.IDLE, prompt_text="")
ASKING = Detection(TabState.AWAITING_INPUT, evidence="Do you want to proceed?")


def test_limit_schedules_resume_at_reset_plus_margin():
    plan = plan_tab(TabRecord("t"), limited(), None, T0, CFG)
    assert plan.record.phase == Phase.RATE_LIMITED
    assert plan.record.resume_at == RESET + timedelta(seconds=10)
    assert plan.wake_at == RESET + timedelta(seconds=10)
    assert plan.action == Action.NONE
    assert plan.event == "LimitDetected"


def test_due_tab_asks_for_a_usage_check_then_sends_once():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=11)
    plan = plan_tab(rec, limited(), None, due, CFG)
    assert plan.action == Action.CHECK_USAGE
    fresh = Usage({"five_hour": Window("five_hour", 3.0, RESET + timedelta(hours=5))}, read_at=due)
    sent = after_usage(plan.record, usage_verdict(fresh, "five_hour", due), due, CFG)
    assert sent.record.phase == Phase.RESUMING
    assert sent.record.sent_for == rec.limit_key
    # The same line seen again right after: the old line, nothing to do.
    again = plan_tab(sent.record, limited(), None, due + timedelta(seconds=2), CFG)
    assert again.action == Action.NONE
    assert again.record.sent_for == rec.limit_key


def test_not_reset_yet_waits_for_the_new_reset_from_usage():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=11)
    later = RESET + timedelta(minutes=40)
    usage = Usage({"five_hour": Window("five_hour", 100.0, later)}, read_at=due)
    verdict = usage_verdict(usage, "five_hour", due)
    assert not verdict.reset and verdict.new_reset == later
    plan = after_usage(rec, verdict, due, CFG)
    assert plan.record.phase == Phase.RATE_LIMITED
    assert plan.record.resume_at == later + timedelta(seconds=10)
    assert plan.record.sent_for is None
    # At the new instant the plan is due again.
    assert plan_tab(plan.record, limited(), None, later + timedelta(seconds=10), CFG).action == Action.CHECK_USAGE


def test_usage_below_100_means_reset():
    usage = Usage({"five_hour": Window("five_hour", 3.0, RESET + timedelta(hours=5))}, read_at=RESET)
    assert usage_verdict(usage, "five_hour", RESET).reset


def test_recent_human_input_holds_the_resume_until_idle():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=30)
    typed = due - timedelta(seconds=5)
    plan = plan_tab(rec, limited(), typed, due, CFG)
    assert plan.action == Action.NONE
    assert plan.wake_at == typed + timedelta(seconds=60)
    assert plan_tab(plan.record, limited(), typed, typed + timedelta(seconds=61), CFG).action == Action.CHECK_USAGE


def test_awaiting_input_is_left_alone():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    plan = plan_tab(rec, ASKING, None, RESET + timedelta(minutes=1), CFG)
    assert plan.action == Action.NONE
    assert plan.record.phase == Phase.AWAITING_INPUT
    assert plan.record.resume_at is None


def test_agent_working_again_gets_nothing():
    rec = plan_tab(TabRecord("t"), limited(auto_continue=True), None, T0, CFG).record
    plan = plan_tab(rec, WORKING, None, RESET + timedelta(seconds=70), CFG)
    assert plan.action == Action.NONE
    assert plan.record.phase == Phase.WORKING
    assert plan.record.resume_at is None


def test_auto_continue_gets_a_grace_period_from_the_end_of_the_printed_minute():
    """Claude prints its reset rounded down to the minute; its own continue comes 60-110 s after
    the real reset, which may be 59 s after the printed one."""
    plan = plan_tab(TabRecord("t"), limited(auto_continue=True), None, T0, CFG)
    assert plan.record.resume_at == RESET + timedelta(seconds=60 + 120)
    assert plan_tab(plan.record, limited(auto_continue=True), None, RESET + timedelta(seconds=170), CFG).action == Action.NONE
    assert plan_tab(plan.record, limited(auto_continue=True), None, RESET + timedelta(seconds=181), CFG).action == Action.CHECK_USAGE


def test_auto_continue_with_an_exact_structured_reset_counts_the_grace_from_it():
    det = limited(auto_continue=True, detected_by="structured:statusline+pattern:x")
    assert plan_tab(TabRecord("t"), det, None, T0, CFG).record.resume_at == RESET + timedelta(seconds=120)


def test_limit_menu_is_answered_by_its_displayed_number():
    plan = plan_tab(TabRecord("t"), limited(limit_menu=True, menu_choice=2), None, T0, CFG)
    assert plan.action == Action.ANSWER_MENU and plan.menu_choice == 2


def test_limit_menu_is_answered_once_per_limit_event_then_left_to_a_human():
    """Before: a menu that stayed open was answered again on every pass (a key a second)."""
    from dataclasses import replace

    menu = limited(limit_menu=True, menu_choice=2)
    first = plan_tab(TabRecord("t"), menu, None, T0, CFG)
    assert first.action == Action.ANSWER_MENU
    answered = replace(first.record, menu_for=first.record.limit_key, menu_at=T0)
    waiting = plan_tab(answered, menu, None, T0 + timedelta(seconds=1), CFG)
    assert waiting.action == Action.NONE and waiting.record.phase != Phase.NEEDS_ATTENTION
    assert waiting.wake_at == T0 + timedelta(seconds=CFG.settle_s)
    stuck = plan_tab(waiting.record, menu, None, T0 + timedelta(seconds=CFG.settle_s + 1), CFG)
    assert stuck.action == Action.NONE and stuck.record.phase == Phase.NEEDS_ATTENTION
    assert stuck.event == "LimitMenuStillOpen"
    later = plan_tab(stuck.record, menu, None, T0 + timedelta(seconds=CFG.settle_s + 30), CFG)
    assert later.action == Action.NONE and later.event is None, "one Warning, never a second key"
    # A new limit event (another reset) opens a new menu: answered once again.
    other = limited(reset=RESET + timedelta(hours=5), limit_menu=True, menu_choice=2,
                    evidence="You've hit your 5-hour limit · resets 7pm (UTC)")
    assert plan_tab(later.record, other, None, T0 + timedelta(seconds=60), CFG).action == Action.ANSWER_MENU


def test_limit_menu_without_stop_option_asks_a_human():
    plan = plan_tab(TabRecord("t"), limited(limit_menu=True, menu_choice=None), None, T0, CFG)
    assert plan.action == Action.NONE and plan.record.phase == Phase.NEEDS_ATTENTION


def test_half_typed_line_is_never_typed_over():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    plan = plan_tab(rec, limited(prompt_text="fix the par"), None, RESET + timedelta(minutes=5), CFG)
    assert plan.action == Action.NONE
    assert plan.record.phase == Phase.NEEDS_ATTENTION


def test_limit_that_comes_back_is_rescheduled_then_capped():
    rec = TabRecord("t")
    now = T0
    sends = 0
    for attempt in range(CFG.max_attempts + 1):
        reset = now + timedelta(minutes=30)
        plan = plan_tab(rec, limited(reset=reset, evidence=f"resets {attempt}"), None, now, CFG)
        if attempt < CFG.max_attempts:
            assert plan.record.phase == Phase.RATE_LIMITED, attempt
            now = reset + timedelta(seconds=11)
            due = plan_tab(plan.record, limited(reset=reset, evidence=f"resets {attempt}"), None, now, CFG)
            assert due.action == Action.CHECK_USAGE
            rec = after_usage(due.record, usage_verdict(reset_read(now), None, now), now, CFG).record
            assert rec.phase == Phase.RESUMING
            sends += 1
            now += timedelta(seconds=30)
        else:
            assert plan.record.phase == Phase.NEEDS_ATTENTION
            assert plan.event == "ResumeNotTakingEffect"
            assert plan.action == Action.NONE
    assert sends == CFG.max_attempts


def test_same_line_after_settle_counts_as_limit_come_back():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=11)
    sent = after_usage(rec, usage_verdict(reset_read(due), None, due), due, CFG).record
    plan = plan_tab(sent, limited(), None, due + timedelta(seconds=25), CFG)
    assert plan.event == "LimitCameBack"
    assert plan.record.attempts == 1


def test_resume_disabled_only_records():
    plan = plan_tab(TabRecord("t"), limited(), None, T0, CFG, resume_enabled=False)
    assert plan.record.resume_at is None and plan.action == Action.NONE
    assert plan.record.phase == Phase.RATE_LIMITED


def test_credits_never_wait_for_a_reset():
    det = Detection(TabState.RATE_LIMITED, LimitKind.CREDITS, None, evidence="Your workspace is out of credits")
    plan = plan_tab(TabRecord("t"), det, None, T0, CFG)
    assert plan.record.phase == Phase.NEEDS_ATTENTION and plan.record.resume_at is None


def test_no_reset_on_screen_checks_usage_at_once_and_waits_for_its_reset():
    det = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, None, evidence="You've hit your usage limit.", prompt_text="")
    plan = plan_tab(TabRecord("t"), det, None, T0, CFG)
    assert plan.action == Action.CHECK_USAGE
    usage = Usage({"weekly": Window("weekly", 100.0, T0 + timedelta(days=2))}, read_at=T0)
    nxt = after_usage(plan.record, usage_verdict(usage, None, T0), T0, CFG)
    assert nxt.record.resume_at == T0 + timedelta(days=2, seconds=10)
    # Without any usage data the controller re-checks later instead of sending blindly.
    blind = after_usage(plan.record, usage_verdict(None, None, T0), T0, CFG)
    assert blind.record.phase == Phase.RATE_LIMITED and blind.record.resume_at == T0 + timedelta(seconds=300)


def test_margin_bound_is_enforced():
    with pytest.raises(ValueError):
        ResumeConfig(margin_s=31)


def test_auto_continue_keeps_its_grace_after_a_reset_not_yet():
    rec = plan_tab(TabRecord("t"), limited(auto_continue=True), None, T0, CFG).record
    due = RESET + timedelta(seconds=121)
    later = RESET + timedelta(minutes=3)
    usage = Usage({"five_hour": Window("five_hour", 100.0, later)}, read_at=due)
    plan = after_usage(rec, usage_verdict(usage, "five_hour", due), due, CFG)
    assert plan.record.resume_at == later + timedelta(seconds=120)


def test_structured_only_limit_is_remembered_past_its_reset_until_resumed():
    det = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, RESET, "five_hour", prompt_text="",
                    evidence="statusline: 5-hour window at 100 %", detected_by="structured:statusline")
    rec = plan_tab(TabRecord("t"), det, None, T0, CFG).record
    # After the reset the statusline data no longer says "limited": the tab looks idle.
    due = plan_tab(rec, IDLE, None, RESET + timedelta(seconds=11), CFG)
    assert due.action == Action.CHECK_USAGE
    sent = after_usage(due.record, usage_verdict(None, None, RESET), RESET + timedelta(seconds=11), CFG).record
    assert plan_tab(sent, IDLE, None, RESET + timedelta(seconds=40), CFG).record.phase == Phase.IDLE


# ---- issue 9, finding 5: no pass at 0 s for a state that does not change; events on change only

def _passes(rec: TabRecord, det: Detection, start: datetime, n: int = 5, step_s: float = 1.0):
    """Plan the same screen `n` times, `step_s` apart, feeding each record into the next pass."""
    plans = []
    for i in range(n):
        plan = plan_tab(rec, det, None, start + timedelta(seconds=i * step_s), CFG)
        plans.append(plan)
        rec = plan.record
    return plans


@pytest.mark.parametrize("det,event", [
    (limited(prompt_text="fix the par"), "PromptNotEmpty"),
    (limited(limit_menu=True, menu_choice=None), "NeedsAttention"),
], ids=["half-typed-line", "menu-without-stop"])
def test_a_tab_held_for_a_human_is_announced_once_and_never_scheduled_in_the_past(det, event):
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    start = RESET + timedelta(minutes=5)
    plans = _passes(rec, det, start)
    assert [p.event for p in plans] == [event, None, None, None, None]
    for i, plan in enumerate(plans):
        now = start + timedelta(seconds=i)
        assert plan.action == Action.NONE and plan.record.phase == Phase.NEEDS_ATTENTION
        assert plan.record.resume_at is None, "no resume instant left behind in the past"
        assert plan.wake_at is None or plan.wake_at > now
        assert next_pass_in([plan.wake_at], now, 5.0) > 0


def test_a_parked_tab_counts_sends_and_stays_quiet():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    now = RESET + timedelta(seconds=11)
    sends = 0
    while True:
        plan = plan_tab(rec, limited(), None, now, CFG)
        if plan.action == Action.CHECK_USAGE:
            rec = after_usage(plan.record, usage_verdict(reset_read(now), None, now), now, CFG).record
            sends += 1
            now += timedelta(seconds=CFG.settle_s + 1)   # the same line is still there after the settle time
            continue
        rec = plan.record
        if rec.phase == Phase.NEEDS_ATTENTION:
            break
        now += timedelta(seconds=1)
    assert sends == CFG.max_attempts and rec.attempts == sends
    assert plan.event == "ResumeNotTakingEffect" and f"after {sends} resumes" in rec.message
    later = _passes(rec, limited(), now + timedelta(seconds=5), n=80)
    assert all(p.event is None and p.action == Action.NONE for p in later)
    assert later[-1].record == rec, "nothing is re-counted while parked"


def test_next_pass_in_is_never_zero():
    assert next_pass_in([], T0, 5.0) == 5.0
    assert next_pass_in([None, T0 + timedelta(seconds=2)], T0, 5.0) == 2.0
    assert next_pass_in([T0 + timedelta(seconds=60)], T0, 5.0) == 5.0
    assert next_pass_in([T0 - timedelta(seconds=30), T0], T0, 5.0) == 1.0
    assert next_pass_in([T0 - timedelta(seconds=30)], T0, 0.5) == 0.5


# ---- issue 9, finding 5: no value from a screen, a box file or a provider can crash the watcher

Y9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


@pytest.mark.parametrize("auto", [False, True], ids=["margin", "auto-continue-grace"])
def test_a_reset_in_year_9999_on_screen_is_unknown_not_a_crash(auto):
    det = limited(reset=Y9999, auto_continue=auto, detected_by="structured:statusline")
    plan = plan_tab(TabRecord("t"), det, None, T0, CFG)
    assert plan.record.resets_at is None
    assert plan.action == Action.CHECK_USAGE, "unknown reset: the usage read decides"
    assert next_pass_in([plan.wake_at], T0, 5.0) > 0


def test_a_reset_in_year_9999_from_the_provider_is_unknown_not_a_crash():
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=11)
    usage = Usage({"five_hour": Window("five_hour", 100.0, Y9999)}, read_at=due)
    verdict = usage_verdict(usage, "five_hour", due)
    assert verdict.reset and not verdict.known
    # Unconfirmed: the screen's minute-rounded reset is waited out to the end of its minute, then resumed.
    plan = after_usage(rec, verdict, due, CFG)
    assert plan.record.phase == Phase.RATE_LIMITED and plan.wake_at == RESET + timedelta(seconds=70)
    later = RESET + timedelta(seconds=70)
    plan = after_usage(plan.record, usage_verdict(usage, "five_hour", later), later, CFG)
    assert plan.record.phase == Phase.RESUMING


def test_a_structured_reset_in_year_9999_is_ignored():
    from controller.domain.signals import merge

    usage = Usage({"five_hour": Window("five_hour", 100.0, Y9999)}, read_at=T0)
    assert merge(IDLE, usage, "statusline", T0) == IDLE
    assert merge(limited(), usage, "statusline", T0) == limited()

# ------------------------------------------------------------------ one limit, one identity (issue 13)

def test_exact_structured_reset_dropping_out_at_the_reset_is_the_same_limit():
    """Before the reset the structured data gives the exact instant (14:00:47); at the reset it drops
    out and the screen's minute-rounded time (14:00) takes over. Same limit: no second LimitDetected
    with a past reset, and the resume still waits for the exact reset plus the margin."""
    exact = RESET + timedelta(seconds=47)
    structured = limited(reset=exact, detected_by="structured:statusline+pattern:x")
    first = plan_tab(TabRecord("t"), structured, None, T0, CFG)
    assert first.event == "LimitDetected" and first.record.resume_at == exact + timedelta(seconds=10)
    screen_only = limited(reset=RESET)  # what the screen alone says once the exact reset is past
    at_reset = exact + timedelta(seconds=3.8)
    plan = plan_tab(first.record, screen_only, None, at_reset, CFG)
    assert plan.event is None, plan
    assert plan.action == Action.NONE and plan.wake_at == exact + timedelta(seconds=10)
    assert plan.record.resets_at == exact


def test_a_different_reset_minute_is_a_different_limit():
    first = plan_tab(TabRecord("t"), limited(reset=RESET), None, T0, CFG)
    plan = plan_tab(first.record, limited(reset=RESET + timedelta(hours=5)), None, T0 + timedelta(minutes=1), CFG)
    assert plan.event == "LimitDetected"


def test_wait_chosen_in_the_menu_is_never_typed_over():
    """The menu was open (resume planned for reset + margin); a person chose "Wait here, then continue
    automatically": the same limit now announces the native wait, so the controller gives it the grace."""
    menu = plan_tab(TabRecord("t"), limited(limit_menu=True, menu_choice=1), None, T0, CFG,)
    waiting = plan_tab(menu.record, limited(auto_continue=True), None, T0 + timedelta(seconds=5), CFG)
    assert waiting.event is None
    assert waiting.record.resume_at == RESET + timedelta(seconds=60 + 120)
    assert plan_tab(waiting.record, limited(auto_continue=True), None, RESET + timedelta(seconds=30),
                    CFG).action == Action.NONE


def test_cancelled_native_wait_is_resumed_at_the_reset_not_after_the_grace():
    armed = plan_tab(TabRecord("t"), limited(auto_continue=True), None, T0, CFG)
    cancelled = plan_tab(armed.record, limited(auto_continue=False), None, T0 + timedelta(seconds=5), CFG)
    assert cancelled.record.resume_at == RESET + timedelta(seconds=10)


def test_usage_api_down_waits_for_the_end_of_the_printed_minute():
    """The screen prints the reset to the minute; the real one may be up to 59 s later. Without a
    usage read to confirm it, a continue at reset + margin would hit the limit again and burn an
    attempt (issue 9 #6): the send waits until the end of the printed minute plus the margin."""
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=11)
    plan = plan_tab(rec, limited(), None, due, CFG)
    assert plan.action == Action.CHECK_USAGE
    wait = after_usage(plan.record, usage_verdict(None, "five_hour", due), due, CFG)
    end = RESET + timedelta(seconds=60 + 10)
    assert wait.record.phase == Phase.RATE_LIMITED and wait.record.resume_at == end and wait.wake_at == end
    assert wait.record.attempts == 0 and wait.record.sent_for is None
    assert "could not confirm" in (wait.record.message or "")
    # The next scans wait (no usage check, no send) until then, then ask once more and send.
    assert plan_tab(wait.record, limited(), None, end - timedelta(seconds=1), CFG).action == Action.NONE
    again = plan_tab(wait.record, limited(), None, end, CFG)
    assert again.action == Action.CHECK_USAGE
    sent = after_usage(again.record, usage_verdict(None, "five_hour", end), end, CFG)
    assert sent.record.phase == Phase.RESUMING and sent.record.attempts == 1


def _exhausted_until(now: datetime) -> Usage:
    return Usage({"five_hour": Window("five_hour", 100.0, now + timedelta(hours=1))}, read_at=now)


@pytest.mark.parametrize("verdict_at, words", [
    (lambda due: usage_verdict(None, "five_hour", due), "Usage API could not confirm the reset"),
    (lambda due: usage_verdict(_exhausted_until(due), "five_hour", due), "Not reset yet"),
], ids=["api-down", "not-reset-yet"])
def test_a_wait_set_by_the_usage_read_keeps_its_words_until_it_ends(verdict_at, words):
    """The usage read at the reset sets a later resume and says why. Before: the next pass (within a
    second) reworded it as the plain wait for the screen's printed reset ("Usage limit until 14:00 UTC"),
    so `kubectl` hardly ever showed why the continue had not come."""
    rec = plan_tab(TabRecord("t"), limited(), None, T0, CFG).record
    due = RESET + timedelta(seconds=11)
    wait = after_usage(plan_tab(rec, limited(), None, due, CFG).record, verdict_at(due), due, CFG)
    end = wait.record.resume_at
    assert end is not None and end > due and (wait.record.message or "").startswith(words)
    rec = wait.record
    for later in (due, due + timedelta(seconds=1), end - timedelta(seconds=1)):
        nxt = plan_tab(rec, limited(), None, later, CFG)
        assert (nxt.action, nxt.wake_at, nxt.record.resume_at) == (Action.NONE, end, end)
        assert nxt.record.message == wait.record.message, later
        rec = nxt.record
    assert plan_tab(rec, limited(), None, end, CFG).action == Action.CHECK_USAGE  # the wait ended
    # Another wait gets its own words: a new limit event, or the native wait armed meanwhile.
    other = plan_tab(rec, limited(reset=RESET + timedelta(hours=3), evidence="resets 3pm"), None, due, CFG)
    assert (other.record.message or "").startswith("Usage limit until")
    armed = plan_tab(rec, limited(auto_continue=True), None, due, CFG)
    assert armed.record.resume_at != end and "continues by itself" in (armed.record.message or "")


def test_usage_api_down_with_an_exact_structured_reset_sends_at_once():
    det = limited(detected_by="structured:statusline", reset=RESET + timedelta(seconds=37))
    rec = plan_tab(TabRecord("t"), det, None, T0, CFG).record
    due = RESET + timedelta(seconds=48)
    sent = after_usage(rec, usage_verdict(None, "five_hour", due), due, CFG)
    assert sent.record.phase == Phase.RESUMING
