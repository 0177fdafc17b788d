"""A limit line still on screen long after its reset is re-read at every pass with the pass's own ``now``.

A clock without a date means the next occurrence (Claude) or today's (Codex) *from the instant it is read*:
read more than the hour of grace after its reset (the usage read said "not yet", a half-typed prompt held the
tab, the operator was down), "resets 11:30pm" reads as tomorrow's 23:30, "Wed 11:30pm" as next week's and
"Dec 2, 11:30pm" (after midnight) as next year's. The
planner took that for a new limit (the reset minute is part of the limit's identity) and scheduled the resume
a day or a week later, dropping the reset the usage read had given: the tab waited 22 h too long. Here the
real detection reads real agent lines at explicit instants and the pure planner decides.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from controller.agents.registry import detect
from controller.domain.resume import (
    Action, Phase, ResumeConfig, TabRecord, after_usage, plan_tab, usage_verdict,
)
from controller.domain.types import TabState, Usage, Window

pytestmark = pytest.mark.unit

UTC = timezone.utc
CFG = ResumeConfig(margin_s=10, human_idle_s=60, auto_continue_grace_s=120, settle_s=20, max_attempts=3, prepare_s=0)
PRINTED = datetime(2026, 12, 2, 20, 0, tzinfo=UTC)   # a Wednesday
RESET = datetime(2026, 12, 2, 23, 30, tzinfo=UTC)
LATER = datetime(2026, 12, 3, 1, 45, tzinfo=UTC)     # what the usage read at the reset says instead

SCREENS = {
    "claude-code": ("  ⎿  You've hit your 5-hour limit · resets 11:30pm (UTC)\n\n> ", "UTC"),
    "claude-weekday": ("  ⎿  You've hit your weekly limit · resets Wed 11:30pm (UTC)\n\n> ", "UTC"),
    # Claude Code prints the date beyond 24 h ahead; read after local midnight it is next year's
    "claude-date": ("  ⎿  You've hit your weekly limit · resets Dec 2, 11:30pm (UTC)\n\n> ", "UTC"),
    "codex": ("■ You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again "
              "at 11:30 PM.\n\n› Ask Codex to do anything", "UTC"),
}


def printed(name: str) -> datetime:
    return RESET - timedelta(hours=27) if name == "claude-date" else PRINTED


def read(name: str, now: datetime):
    screen, zone = SCREENS[name]
    det = detect("codex" if name == "codex" else "claude-code", screen, now, zone)
    assert det.state == TabState.RATE_LIMITED, (name, det)
    return det


def not_yet(now: datetime) -> Usage:
    return Usage({"five_hour": Window("five_hour", 100.0, LATER)}, read_at=now)


@pytest.mark.parametrize("name", sorted(SCREENS))
def test_a_line_re_read_past_its_hour_of_grace_keeps_the_reset_the_usage_read_gave(name):
    first = plan_tab(TabRecord("t"), read(name, printed(name)), None, printed(name), CFG)
    assert first.event == "LimitDetected" and first.record.resets_at == RESET
    due = RESET + timedelta(seconds=11)
    check = plan_tab(first.record, read(name, due), None, due, CFG)
    assert check.action == Action.CHECK_USAGE
    waiting = after_usage(check.record, usage_verdict(not_yet(due), "five_hour", due), due, CFG)
    assert waiting.record.resume_at == LATER + timedelta(seconds=10)
    rec = waiting.record
    for minutes in (20, 45, 61, 75, 90, 104):   # passes until the new reset: past the hour of grace too
        now = RESET + timedelta(minutes=minutes)
        det = read(name, now)
        plan = plan_tab(rec, det, None, now, CFG)
        assert plan.event is None, (now, det.resets_at, plan.event)
        assert plan.record.resume_at == LATER + timedelta(seconds=10), (now, det.resets_at, plan.record.resume_at)
        assert plan.wake_at is not None and plan.wake_at <= LATER + timedelta(seconds=10)
        rec = plan.record


@pytest.mark.parametrize("name", sorted(SCREENS))
def test_a_half_typed_prompt_cleared_hours_after_the_reset_resumes_at_once(name):
    """The reset passed with a half-typed line in the prompt (held for its author); the human clears it two
    hours later: the usage is re-read at once, not a day (or a week) later."""
    first = plan_tab(TabRecord("t"), read(name, printed(name)), None, printed(name), CFG)
    due = RESET + timedelta(seconds=11)
    held = plan_tab(first.record, replace(read(name, due), prompt_text="fix the par"), None, due, CFG)
    assert held.record.phase == Phase.NEEDS_ATTENTION
    now = RESET + timedelta(hours=2)
    plan = plan_tab(held.record, read(name, now), None, now, CFG)
    assert plan.action == Action.CHECK_USAGE, (read(name, now).resets_at, plan)


def test_a_new_limit_with_another_printed_reset_is_still_a_new_limit():
    """Only the very same line re-read later keeps its first reading: another printed clock is another limit."""
    first = plan_tab(TabRecord("t"), read("claude-code", PRINTED), None, PRINTED, CFG)
    now = PRINTED + timedelta(minutes=5)
    other = detect("claude-code", "  ⎿  You've hit your 5-hour limit · resets 11:30am (UTC)\n\n> ", now, "UTC")
    plan = plan_tab(first.record, other, None, now, CFG)
    assert plan.event == "LimitDetected" and plan.record.resets_at == datetime(2026, 12, 3, 11, 30, tzinfo=UTC)


RELATIVE = {
    # openai/codex#3489-era Codex prints the wait, not the instant (corpus X02, X04)
    "codex": ("■ You've hit your usage limit. Upgrade to Plus to continue using Codex "
              "(https://openai.com/chatgpt/pricing) or try again in 3 hours 2 minutes.\n\n› Ask Codex to do anything",
              timedelta(hours=3, minutes=2)),
    "claude-code": ("  ⎿  You've hit your 5-hour limit · resets 8m\n\n> ", timedelta(minutes=8)),
}


@pytest.mark.parametrize("agent", sorted(RELATIVE))
def test_a_relative_reset_re_read_at_every_pass_does_not_run_away(agent):
    """'try again in 3 hours 2 minutes' counts from when it was printed; read again at every pass it reads
    as 3 h 2 min after that pass. Each pass took it for a new limit (another reset minute): a LimitDetected
    Event a pass and the resume moved on with the clock, never reached. The first reading stands."""
    screen, wait = RELATIVE[agent]
    first_seen = datetime(2026, 12, 2, 10, 0, 17, tzinfo=UTC)
    plan = plan_tab(TabRecord("t"), detect(agent, screen, first_seen, "UTC"), None, first_seen, CFG)
    assert plan.event == "LimitDetected"
    resume_at = plan.record.resume_at
    assert resume_at == first_seen + wait + timedelta(seconds=10)
    rec, now, events = plan.record, first_seen, []
    while now < resume_at:
        now += timedelta(seconds=53)
        plan = plan_tab(rec, detect(agent, screen, now, "UTC"), None, now, CFG)
        events += [plan.event] if plan.event else []
        rec = plan.record
        assert rec.resume_at in (resume_at, None), (now, rec.resume_at)
    assert plan.action == Action.CHECK_USAGE and events == [], (now, plan, events)


def test_detection_marks_a_relative_reset_and_only_that():
    now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    for agent, (screen, _wait) in RELATIVE.items():
        assert detect(agent, screen, now, "UTC").reset_relative, agent
    for name in SCREENS:
        assert not read(name, now).reset_relative, name
