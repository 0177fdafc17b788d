"""Property tests: render reset instants the way each CLI prints them and recover them to the minute.

Claude Code prints the box-local clock of the reset with the zone in parentheses ("5pm", "5:30pm",
"Nov 13 at 9am", "Aug 3, 7am"); Codex prints no zone: "%-I:%M %p" on the same local date, otherwise
"%b %-d{st,nd,rd,th}, %Y %-I:%M %p" or "%b %-d, %Y, %-I:%M %p", or a relative "in 2 days 3 hours 4 minutes".
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from controller.agents.base import detect
from controller.domain.types import LimitKind, TabState

pytestmark = pytest.mark.unit

UTC = timezone.utc
ZONES = [
    "UTC", "Europe/Warsaw", "Europe/London", "America/New_York", "America/Los_Angeles", "America/Santiago",
    "America/St_Johns", "Asia/Kolkata", "Asia/Calcutta", "Asia/Kathmandu", "Asia/Tokyo", "Australia/Adelaide",
    "Australia/Lord_Howe", "Pacific/Auckland", "Pacific/Chatham", "Etc/GMT+5", "Etc/GMT-14", "Africa/Casablanca",
]
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()

nows = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 1)).map(
    lambda d: d.replace(tzinfo=UTC, microsecond=0))


def _reset(now: datetime, minutes: int) -> datetime:
    return (now + timedelta(minutes=minutes)).replace(second=0)


def _unambiguous(instant: datetime, zone: ZoneInfo) -> bool:
    """The local wall clock of ``instant`` names only that instant (not a repeated DST hour)."""
    local = instant.astimezone(zone).replace(tzinfo=None)
    return all(local.replace(tzinfo=zone, fold=f).astimezone(UTC) == instant for f in (0, 1))


def claude_clock(local: datetime) -> str:
    hour = local.hour % 12 or 12
    suffix = "am" if local.hour < 12 else "pm"
    return f"{hour}{suffix}" if local.minute == 0 else f"{hour}:{local.minute:02d}{suffix}"


def ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def codex_clock(local: datetime) -> str:
    return f"{local.hour % 12 or 12}:{local.minute:02d} {'AM' if local.hour < 12 else 'PM'}"


def claude_screen(line: str) -> str:
    return f"⏺ Read(src/parser.py)\n  ⎿  Read 214 lines\n\n  ⎿  {line}\n\n╭{'─' * 40}╮\n│ > {' ' * 37}│\n╰{'─' * 40}╯"


def codex_screen(line: str) -> str:
    return f"• Ran go test ./...\n\n{line}\n\n› Ask Codex to do anything\n\n  gpt-5-codex medium · 62% context left"


def assert_minute(result, instant: datetime) -> None:
    assert result.state is TabState.RATE_LIMITED, result.to_json()
    assert result.kind is LimitKind.USAGE
    assert result.resets_at is not None, result.to_json()
    assert abs((result.resets_at - instant).total_seconds()) < 60, (result.to_json(), instant.isoformat())


@settings(max_examples=300, deadline=None)
@given(now=nows, minutes=st.integers(min_value=2, max_value=22 * 60), zone=st.sampled_from(ZONES),
       template=st.sampled_from([
           "You've hit your limit · resets {clock} ({zone})",
           "You’ve hit your session limit ∙ resets {clock} ({zone})",
           "5-hour limit reached - resets {clock} ({zone})",
           "Claude usage limit reached. Your limit will reset at {clock} ({zone}).",
       ]))
def test_claude_time_only_recovers_instant(now, minutes, zone, template):
    instant = _reset(now, minutes)
    tz = ZoneInfo(zone)
    assume(_unambiguous(instant, tz))
    line = template.format(clock=claude_clock(instant.astimezone(tz)), zone=zone)
    assert_minute(detect("claude-code", claude_screen(line), now, "America/Chicago"), instant)


@settings(max_examples=300, deadline=None)
@given(now=nows, minutes=st.integers(min_value=2, max_value=7 * 24 * 60), zone=st.sampled_from(ZONES),
       comma=st.booleans())
def test_claude_weekly_date_recovers_instant(now, minutes, zone, comma):
    instant = _reset(now, minutes)
    tz = ZoneInfo(zone)
    assume(_unambiguous(instant, tz))
    local = instant.astimezone(tz)
    date = f"{MONTHS[local.month - 1]} {local.day}" + ("," if comma else " at")
    line = f"You've hit your weekly limit · resets {date} {claude_clock(local)} ({zone})"
    result = detect("claude-code", claude_screen(line), now, "UTC")
    assert_minute(result, instant)
    assert result.window == "weekly"


@settings(max_examples=300, deadline=None)
@given(now=nows, minutes=st.integers(min_value=2, max_value=7 * 24 * 60), zone=st.sampled_from(ZONES),
       style=st.sampled_from(["ordinal", "comma"]), apostrophe=st.sampled_from(["'", "’"]))
def test_codex_absolute_recovers_instant(now, minutes, zone, style, apostrophe):
    instant = _reset(now, minutes)
    tz = ZoneInfo(zone)
    assume(_unambiguous(instant, tz))
    local = instant.astimezone(tz)
    if local.date() == now.astimezone(tz).date():
        when = codex_clock(local)
    elif style == "ordinal":
        when = f"{MONTHS[local.month - 1]} {ordinal(local.day)}, {local.year} {codex_clock(local)}"
    else:
        when = f"{MONTHS[local.month - 1]} {local.day}, {local.year}, {codex_clock(local)}"
    line = (f"■ You{apostrophe}ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
            f"https://chatgpt.com/codex/settings/usage to purchase more credits or try again at {when}.")
    assert_minute(detect("codex", codex_screen(line), now, zone), instant)


@settings(max_examples=200, deadline=None)
@given(now=nows, days=st.integers(0, 7), hours=st.integers(0, 23), mins=st.integers(0, 59),
       zone=st.sampled_from(ZONES))
def test_codex_relative_recovers_instant(now, days, hours, mins, zone):
    assume(days or hours or mins)
    parts = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((days, "day"), (hours, "hour"), (mins, "minute")) if n]
    line = f"🖐  You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in {' '.join(parts)}."
    instant = now + timedelta(days=days, hours=hours, minutes=mins)
    assert_minute(detect("codex", codex_screen(line), now, zone), instant)


@settings(max_examples=100, deadline=None)
@given(now=nows, text=st.text(max_size=400))
def test_detector_never_raises_on_arbitrary_text(now, text):
    for agent in ("claude-code", "codex", "shell"):
        result = detect(agent, text, now, "UTC")
        assert result.state in TabState
