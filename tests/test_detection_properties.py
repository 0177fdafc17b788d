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

from controller.agents.registry import detect
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
    # A clock alone more than 23 h ahead (printed in the first hour after local midnight) is also the same clock
    # of the hour just past, re-read across midnight: the parser takes the past reading, so that the usage is
    # re-read at once (tests/test_fake_agent_clocks.py pins it). Only the unambiguous prints are recovered here.
    assume(not (local.date() == now.astimezone(tz).date() and instant - now > timedelta(hours=23)))
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


# ------------------------------------------------------------------------------ same verdict under variants
# (issue 13) A wording the agents may print any day: the other apostrophe, no-break spaces, the line
# wrapped at any word, another glyph or separator, extra words between the parts. The verdict must
# not change.

VARIANT_BASES = [
    # (agent, limit line, now, box tz)
    ("claude-code", "⎿  You've hit your weekly limit · resets Oct 13 at 6am (Europe/Paris)", "2026-10-09T12:00:00Z", "UTC"),
    ("claude-code", "⎿  You've hit your session limit · resets 9pm (America/New_York)", "2026-09-04T22:30:00Z", "UTC"),
    ("claude-code", "● Usage limit reached · set to continue automatically at 7:13am", "2026-12-01T06:50:00Z", "UTC"),
    ("claude-code", "⎿  You've hit your monthly spend limit · your session limit resets 2:40pm (Asia/Jakarta)",
     "2026-09-02T04:10:00Z", "UTC"),
    ("claude-code", "⎿  You've hit your monthly spend limit · raise it at claude.ai/settings/usage", "2026-07-19T12:00:00Z",
     "UTC"),
    ("claude-code", "⎿  5-hour limit reached · resets 5am", "2025-08-23T06:00:00Z", "America/New_York"),
    ("claude-code", "⎿  You've hit your weekly limit · resets Mon 9am (America/New_York)", "2026-10-30T15:00:00Z", "UTC"),
    ("codex", "■ You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again at 2:51 PM.",
     "2026-09-21T17:30:00Z", "America/Chicago"),
    ("codex", "■ You've hit your usage limit. Try again in 4 days 20 hours 9 minutes.", "2026-09-08T10:00:00Z", "UTC"),
    ("codex", "■ You're out of credits. Your workspace is out of credits. Add credits to continue using Codex.",
     "2026-09-01T10:00:00Z", "UTC"),
]
EXTRA_WORDS = [("You've hit", "You've now hit"), ("your weekly limit", "your weekly usage limit"),
               ("your session limit", "your current session limit"), ("· resets", "· it resets"),
               ("try again at", "try again after"), ("set to continue", "now set to continue")]
GLYPHS = ["⎿  ", "● ", "⏺ ", "■ ", "⚠ ", ""]
SEPARATORS = ["·", "∙", "•", "–"]


def _screen(agent: str, line: str) -> str:
    return claude_screen_raw(line) if agent == "claude-code" else codex_screen(line)


def claude_screen_raw(line: str) -> str:
    return f"⏺ Read(src/parser.py)\n  ⎿  Read 214 lines\n\n{line}\n\n╭{'─' * 40}╮\n│ > {' ' * 37}│\n╰{'─' * 40}╯"


def _verdict(result) -> tuple:
    return (result.state, result.kind, result.window, result.auto_continue,
            None if result.resets_at is None else round(result.resets_at.timestamp() / 60))


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from(VARIANT_BASES), apostrophe=st.sampled_from(["'", "’"]), nbsp=st.booleans(),
       glyph=st.sampled_from(GLYPHS + [None]), sep=st.sampled_from(SEPARATORS + [None]),
       extra=st.lists(st.sampled_from(EXTRA_WORDS), max_size=3, unique=True),
       wrap=st.integers(min_value=0, max_value=400), indent=st.sampled_from(["", "  ", "     "]))
def test_variants_keep_the_verdict(base, apostrophe, nbsp, glyph, sep, extra, wrap, indent):
    agent, line, now_text, tz = base
    now = datetime.fromisoformat(now_text.replace("Z", "+00:00"))
    expected = _verdict(detect(agent, _screen(agent, line), now, tz))
    assert expected[0] is TabState.RATE_LIMITED  # every base is a stop

    variant = line.replace("'", apostrophe)
    for old, new in extra:
        variant = variant.replace(old.replace("'", apostrophe), new.replace("'", apostrophe))
    if glyph is not None:
        for g in GLYPHS[:-1]:
            if variant.startswith(g):
                variant = glyph + variant[len(g):]
                break
    if sep is not None:
        variant = variant.replace(" · ", f" {sep} ")
    spaces = [i for i, ch in enumerate(variant) if ch == " " and i > 4]
    if spaces:
        cut = spaces[wrap % len(spaces)]
        variant = variant[:cut] + "\n" + indent + variant[cut + 1:]
    if nbsp:
        variant = variant.replace(" ", "\u00a0", 3)
    assert _verdict(detect(agent, _screen(agent, variant), now, tz)) == expected, variant
