"""Guard: what the scripted agents print is read back as the reset they meant, whatever the hour.

The operator tests run the fake agents (agentbox_sim/fake_agent.py) against the real wall clock, and CI runs
at any hour. A test passes at 14:00 and fails at 00:40 when the printed reset reads differently near a
boundary (CI run of main 1e962c5: "resets 11:59pm" typed at 00:40 read as a reset that had just passed).
Here the lines the fake agents print (``limit_lines``, the very function their ``hit_limit`` uses) are
read by the product's detection for that agent at many chosen instants: every 7 minutes (seconds varied)
across a whole day, around local midnight in other zones (a half-hour one too), a month and a year end, and across the DST days of
America/New_York and Europe/Warsaw; with the reset seconds to days ahead (and just passed, as a refused or
redrawn line shows it), read when printed and again when the operator resumes the tab (reset + 90 s, the
line still on screen, maybe after local midnight). The reset read back must be the one meant, to the
minute (both agents drop seconds).

Three readings are ambiguous in the agents' own text and are pinned to the safe side (never later than
the real reset: the operator re-reads usage at once): a wall clock in the repeated hour of a DST
fall-back, a Claude clock alone for a reset 23-24 h ahead (Claude prints a date only beyond 24 h), and a
Codex clock alone printed in the hour after midnight for a reset 23 h or more later that day (the same
text as yesterday's reset, just passed, still on screen).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from agentbox_sim.fake_agent import claude_clock, limit_lines
from controller.agents.registry import detect
from controller.domain.types import TabState

pytestmark = pytest.mark.unit

UTC = timezone.utc
AGENTS = ("claude-code", "codex")
# seconds from the print to the reset: just passed (a refused or redrawn line), under a minute (the minute
# shown may be the current one), hours, the last minute of a 5-hour window
OFFSETS = (-290, 25, 2 * 3600 + 13 * 60 + 7, 5 * 3600 - 31)
# Claude Code's date form beyond 24 h ('Dec 8, 11:59pm'): a weekly reset days ahead
CLAUDE_FAR = (6 * 86400 + 3 * 3600 + 59,)
RESUME_AFTER = 90.0  # the second reading: the line is still on screen when the operator resumes it


def grid(start: datetime, hours: float) -> list[datetime]:
    """Instants every 7 minutes from ``start`` for ``hours``, each at another second of its minute."""
    steps = int(hours * 60 / 7)
    return [start + timedelta(minutes=7 * i, seconds=(i * 13) % 60) for i in range(steps + 1)]


def minute(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def repeated_hour(instant: datetime, zone: str) -> set[datetime]:
    """Both instants a wall clock names when ``instant``'s local minute is in a DST fall-back's repeated
    hour (empty otherwise)."""
    tz = ZoneInfo(zone)
    local = minute(instant).astimezone(tz).replace(tzinfo=None)
    both = {local.replace(tzinfo=tz, fold=f).astimezone(UTC) for f in (0, 1)}
    return both if len(both) == 2 else set()


def read_back(agent: str, reset: datetime, zone: str, printed: datetime, seen: datetime) -> datetime | None:
    # every other print, Claude Code's native wait too ('continuing automatically at 5:13pm')
    auto = agent == "claude-code" and printed.minute % 2 == 0
    screen = "\n".join(limit_lines(agent, reset.timestamp(), zone, printed, auto_continue=auto))
    det = detect(agent, screen, seen, zone)
    assert det.state == TabState.RATE_LIMITED and det.auto_continue == auto, (agent, screen, seen)
    return det.resets_at


def check(agent: str, zone: str, printed: datetime, offset: float, failures: list[str]) -> None:
    reset = printed + timedelta(seconds=offset)
    meant = minute(reset)
    for seen in (printed, max(printed, reset) + timedelta(seconds=RESUME_AFTER)):
        got = read_back(agent, reset, zone, printed, seen)
        ambiguous = repeated_hour(reset, zone)
        if got == meant or (ambiguous and got in ambiguous and got <= meant):
            continue
        line = limit_lines(agent, reset.timestamp(), zone, printed)[1].strip()
        failures.append(f"{agent} {zone}: printed {printed:%Y-%m-%d %H:%M:%S}Z, read {seen:%H:%M:%S}Z: "
                        f"{line[-40:]!r} -> {got} (meant {meant})")


def run_grid(nows: list[datetime], zones: tuple[str, ...]) -> list[str]:
    failures: list[str] = []
    for zone in zones:
        for printed in nows:
            for agent in AGENTS:
                for offset in OFFSETS + (CLAUDE_FAR if agent == "claude-code" else ()):
                    check(agent, zone, printed, offset, failures)
    return failures


def test_every_7_minutes_of_a_day():
    failures = run_grid(grid(datetime(2026, 12, 1, 23, 30, tzinfo=UTC), 25), ("UTC",))
    assert failures == [], "\n".join(failures[:20])


@pytest.mark.parametrize("zone,start", [
    ("America/New_York", datetime(2026, 12, 2, 3, 0, tzinfo=UTC)),     # local midnight at 05:00Z
    ("Asia/Kolkata", datetime(2026, 12, 2, 16, 30, tzinfo=UTC)),       # a half-hour zone: midnight at 18:30Z
    ("UTC", datetime(2026, 12, 31, 22, 0, tzinfo=UTC)),                # a year end
    ("America/New_York", datetime(2027, 1, 1, 3, 0, tzinfo=UTC)),      # a year end, local
    ("UTC", datetime(2027, 2, 28, 22, 0, tzinfo=UTC)),                 # a month end
], ids=["ny-midnight", "kolkata-midnight", "year-end", "ny-year-end", "month-end"])
def test_across_local_midnight_a_month_and_a_year_end(zone, start):
    failures = run_grid(grid(start, 4), (zone,))
    assert failures == [], "\n".join(failures[:20])


@pytest.mark.parametrize("zone,start", [
    ("America/New_York", datetime(2026, 3, 8, 4, 0, tzinfo=UTC)),     # spring forward: 2:00-2:59 never shown
    ("America/New_York", datetime(2026, 11, 1, 3, 0, tzinfo=UTC)),    # fall back: 1:00-1:59 shown twice
    ("Europe/Warsaw", datetime(2026, 3, 28, 23, 0, tzinfo=UTC)),
    ("Europe/Warsaw", datetime(2026, 10, 24, 22, 0, tzinfo=UTC)),
], ids=["ny-spring", "ny-fall", "warsaw-spring", "warsaw-fall"])
def test_across_dst_days(zone, start):
    failures = run_grid(grid(start, 5), (zone,))
    assert failures == [], "\n".join(failures[:20])


def test_claude_prints_a_date_beyond_24_hours_as_claude_code_does():
    """Claude Code 2.1.x (its `JN` formatter): the clock alone up to 24 h ahead, then 'Dec 3, 12:57am', and
    the year when it is not this year's. A clock alone for a reset years away (the old fake agent's 'resets
    12am' for 2100) is read as the next midnight: a real reset for the operator, at the mercy of the hour."""
    now = datetime(2026, 12, 2, 0, 40, 5, tzinfo=UTC)
    assert claude_clock(now + timedelta(hours=2, minutes=17), "UTC", now) == "2:57am"
    assert claude_clock(now + timedelta(hours=24), "UTC", now) == "12:40am"
    assert claude_clock(now + timedelta(days=1, hours=1), "UTC", now) == "Dec 3, 1:40am"
    assert claude_clock(datetime(2027, 1, 1, 17, 0, tzinfo=UTC), "America/New_York", now) == "Jan 1, 2027, 12pm"
    assert claude_clock(datetime.fromtimestamp(4102444800, UTC), "UTC", now) == "Jan 1, 2100, 12am"


def test_a_claude_clock_23_to_24_hours_ahead_is_read_early_never_late():
    """The clock alone names both a reset 23 h 30 m ahead and one that passed 30 minutes ago; the product
    takes the passed one (re-read usage now), so the operator never waits past a real reset."""
    for printed in grid(datetime(2026, 12, 2, 0, 0, tzinfo=UTC), 24)[::6]:
        reset = printed + timedelta(hours=23, minutes=30)
        got = read_back("claude-code", reset, "UTC", printed, printed)
        assert got is not None and got <= printed, (printed, got)


def test_a_codex_clock_23_hours_ahead_printed_just_after_midnight_is_read_early_never_late():
    """Codex prints the clock alone for any reset on the same local date: printed at 0:20 for 23:50, it is
    also what yesterday's 23:50 line still on screen says. The product takes the passed one (re-read usage
    now), so the operator never waits a day past a real reset."""
    for minutes in (0, 20, 45):
        printed = datetime(2026, 12, 2, 0, minutes, 10, tzinfo=UTC)
        reset = datetime(2026, 12, 2, 23, 50, tzinfo=UTC)
        got = read_back("codex", reset, "UTC", printed, printed)
        assert got == reset - timedelta(days=1), (printed, got)
