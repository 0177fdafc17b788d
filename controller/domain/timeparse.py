"""Reset-time parsing for limit lines: zones, clocks, dates, relative forms. Pure, no I/O.

Every function takes ``now`` (tz-aware) as a parameter and returns tz-aware UTC datetimes.
The rules follow the corpus README (tests/fixtures/corpus/README.md) and field-pitfalls §3-§4:

- a zone printed in the line wins over the box zone; an invalid zone falls back to the box zone
  (and an invalid box zone to UTC); ``Etc/GMT+5`` is UTC-5 (POSIX sign), legacy aliases such as
  ``Asia/Calcutta`` are valid;
- offsets come from the zone database for the *reset* date (DST), not for today;
- Claude Code time without a date ("claude" rule): the next occurrence after ``now``, unless that
  clock time passed less than one hour before ``now`` (then that past instant: "re-check now");
- Codex time without a date ("codex" rule): the same local date as ``now``, even when passed;
  except that a clock that passed less than one hour before ``now`` on the day before (the hour after
  local midnight) is that past instant, as for Claude: the line was printed before midnight;
- a weekday ("Mon 9am"): the next such weekday, with the Claude rule's hour of grace (across midnight too);
- a date without a year: the next such date from ``now`` (today counts), except a date whose clock passed
  less than one hour before ``now`` (read just after local midnight): that past instant;
- a clock in the hour a DST fall-back repeats: the Claude rule takes the first of its two instants not
  earlier than ``now`` - 1 h; the other rules take the first (never later than the reset meant);
- relative forms ("in 2 days 3 hours 4 minutes", "8m") count from ``now``;
- ``12am`` = 00:00, ``12pm`` = noon; 24-hour clocks ("17:19", "02:53") are accepted.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

TimeOnlyRule = Literal["claude", "codex"]

UTC = timezone.utc

# Month names by their first three (accent-free, lower-case) letters: English, Portuguese, Spanish.
_MONTHS: dict[str, int] = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
    "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
    # pt-BR
    "fev": 2, "abr": 4, "mai": 5, "ago": 8, "set": 9, "out": 10, "dez": 12,
    # es
    "ene": 1, "dic": 12,
}

_TIME = (
    r"(?P<hour>\d{1,2})(?:[:h](?P<minute>\d{2}))?"
    r"(?:\s*(?P<ampm>[ap]\.?\s?m\.?)(?![a-z]))?"
)
# a zone in parentheses "(Europe/Warsaw)", "(UTC)", or a bare "UTC", "GMT+2", "UTC-05:00", "+02:00", "Z"
_ZONE = (r"(?:\s*\((?P<zone>[A-Za-z0-9_+\-/:]{1,64})\)"
         r"|\s*(?P<zone_bare>(?:UTC|GMT)(?:\s?[+-]\d{1,2}(?::?\d{2})?)?(?![A-Za-z])|Z(?![A-Za-z])|[+-]\d{2}:?\d{2}(?!\d)))?")

_RE_ISO = re.compile(
    r"^(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})(?:[ T]|\s+at\s+)(?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::\d{2}(?:\.\d+)?)?" + _ZONE
)
# "Mon 12:00am", "Tuesday at 9am", "tomorrow at 9am", "today 17:00"
_WEEKDAYS = {"mon": 0, "tue": 1, "wed": 2, "thu": 3, "fri": 4, "sat": 5, "sun": 6}
_RE_WEEKDAY = re.compile(
    r"^(?:(?:next|this)\s+)?(?P<weekday>mon(?:day)?|tue(?:s|sday)?|wed(?:nesday)?|thu(?:rs?|rsday)?|fri(?:day)?|sat(?:urday)?|sun(?:day)?"
    r"|today|tomorrow|tonight)(?![a-z])\.?,?"
    r"(?:\s+at\s+|\s*,\s*|\s+)" + r"(?P<hour>\d{1,2})(?:[:h](?P<minute>\d{2}))?"
    r"(?:\s*(?P<ampm>[ap]\.?\s?m\.?)(?![a-z]))?" + _ZONE,
    re.IGNORECASE,
)
# the clock first, then the date: "7:26 PM on Aug 8", "6am, Oct 13", "06:43 on 14 Sep 2026"
_RE_TIME_DATE = re.compile(
    r"^(?P<hour>\d{1,2})(?:[:h](?P<minute>\d{2}))?(?:\s*(?P<ampm>[ap]\.?\s?m\.?)(?![a-z]))?"
    r"(?:\s+on\s+|\s*,\s*|\s+)(?:(?P<month>[A-Za-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?"
    r"|(?P<day2>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month2>[A-Za-z]{3,9})\.?)"
    r"(?:,?\s+(?P<year>\d{4}))?" + _ZONE,
    re.IGNORECASE,
)
_RE_EPOCH = re.compile(r"^\|?\s*(?P<epoch>\d{9,13})(?!\d)")
_RE_REL = re.compile(
    r"^(?:in\s+)?"
    r"(?:(?P<rel_days>\d+)\s*(?:days?|d)(?![a-z])[\s,]*(?:and\s+)?)?"
    r"(?:(?P<rel_hours>\d+)\s*(?:hours?|hrs?|h)(?![a-z])[\s,]*(?:and\s+)?)?"
    r"(?:(?P<rel_minutes>\d+)\s*(?:minutes?|mins?|m)(?![a-z])[\s,]*(?:and\s+)?)?"
    r"(?:(?P<rel_seconds>\d+)\s*(?:seconds?|secs?|s)(?![a-z]))?",
    re.IGNORECASE,
)
# "Nov 13 at 9am", "Aug 3, 7am", "Mar 10th, 2026 3:39 AM", "Aug 20, 2026, 7:38 AM", "Dec 3, 12:57am (UTC)"
_RE_MDY = re.compile(
    r"^(?P<month>[A-Za-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?"
    r"(?:,?\s+(?P<year>\d{4}))?(?:\s*,\s*|\s+at\s+|\s+)" + _TIME + _ZONE,
    re.IGNORECASE,
)
# "21 de abr. de 2026 02:53", "21 de abr de 2026, 2:53 p. m.", "21 abr 2026 às 02:53"
_RE_DMY = re.compile(
    r"^(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:de\s+|of\s+)?(?P<month>[^\W\d_]{3,12})\.?(?:\s+(?:de\s+)?(?P<year>\d{4}))?"
    r"(?:\s*,\s*|\s+(?:às|as|a\s+las|a\s+la|at)\s+|\s+)" + _TIME + _ZONE,
    re.IGNORECASE,
)
_RE_CLOCK = re.compile(r"^" + _TIME + _ZONE, re.IGNORECASE)
_RE_LEAD = re.compile(r"^(?:at|on|by|after|until|em|en|el|às|a\s+las)\s+", re.IGNORECASE)


_RE_OFFSET = re.compile(r"^(?:UTC|GMT|Z)?\s?(?:(?P<sign>[+-])(?P<h>\d{1,2})(?::?(?P<m>\d{2}))?)?$", re.IGNORECASE)


def resolve_zone(name: str | None, box_tz: str) -> tzinfo:
    """Return the zone named in a line, else the box zone, else UTC.

    Args:
        name: a zone printed in the line: an IANA name ("Europe/Warsaw", "Etc/GMT+5" = UTC-5 with
            the POSIX sign), "UTC"/"GMT"/"Z", or an offset as people write it ("UTC+2", "GMT-05:00",
            "+02:00" = two hours east of UTC); None when the line names none.
        box_tz: the box's IANA zone (applies when the line names none or an invalid one).

    Returns:
        A ZoneInfo or a fixed-offset timezone; never raises (invalid names fall back,
        field-pitfalls §3).
    """
    if name:
        m = _RE_OFFSET.match(name.strip())
        if m and not name.strip().lower().startswith("etc"):
            if not m.group("sign"):
                return ZoneInfo("UTC")
            hours, minutes = int(m.group("h")), int(m.group("m") or 0)
            if hours <= 14 and minutes < 60:
                delta = timedelta(hours=hours, minutes=minutes)
                return timezone(delta if m.group("sign") == "+" else -delta)
    for candidate in (name, box_tz, "UTC"):
        if not candidate:
            continue
        candidate = candidate.strip()
        try:
            return ZoneInfo(candidate)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            continue
    return ZoneInfo("UTC")


def _month_number(text: str) -> int | None:
    if text.isdigit():
        value = int(text)
        return value if 1 <= value <= 12 else None
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return _MONTHS.get(folded[:3])


def _local(zone: tzinfo, day: date, hour: int, minute: int, fold: int = 0) -> datetime:
    """Wall-clock time in ``zone`` on ``day`` as UTC, using the offset of that date (DST). A clock in the
    hour a DST fall-back repeats names two instants: ``fold`` 0 the first, 1 the second."""
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone, fold=fold).astimezone(UTC)


def _both_folds(zone: tzinfo, day: date, hour: int, minute: int) -> list[datetime]:
    """The instants a wall clock on ``day`` names, earliest first: two in a DST fall-back's repeated hour
    (a clock in a spring-forward gap, which no agent prints, keeps the one reading of :func:`_local`)."""
    first, second = _local(zone, day, hour, minute), _local(zone, day, hour, minute, fold=1)
    wall = datetime(day.year, day.month, day.day, hour, minute)
    if second == first or any(i.astimezone(zone).replace(tzinfo=None) != wall for i in (first, second)):
        return [first]
    return sorted((first, second))


def _clock(hour_s: str, minute_s: str | None, ampm_s: str | None) -> tuple[int, int] | None:
    hour = int(hour_s)
    minute = int(minute_s) if minute_s else 0
    if minute > 59:
        return None
    if ampm_s:
        marker = re.sub(r"[^a-z]", "", ampm_s.lower())
        if not 1 <= hour <= 12:
            return None
        if marker == "am":
            hour = 0 if hour == 12 else hour
        else:
            hour = 12 if hour == 12 else hour + 12
    elif hour > 23:
        return None
    return hour, minute


_MAX_AHEAD = timedelta(days=400)  # no limit resets further out; a larger value is a misread
_MIN_YEAR, _MAX_YEAR = 2000, 2100


def _bounded(instant: datetime | None, now: datetime) -> datetime | None:
    if instant is None:
        return None
    if not _MIN_YEAR <= instant.year <= _MAX_YEAR or instant - now.astimezone(UTC) > _MAX_AHEAD:
        return None
    return instant


def from_parts(
    parts: Mapping[str, str | None],
    now: datetime,
    tz: str,
    time_only_rule: TimeOnlyRule = "claude",
) -> datetime | None:
    """Build a reset instant from named regex groups.

    Args:
        parts: any of epoch, year, month, day, weekday, hour, minute, ampm, zone, zone_bare,
            rel_days, rel_hours, rel_minutes, rel_seconds (strings as captured; missing or None =
            absent). ``month`` may be a number or an English/Portuguese/Spanish month name or
            abbreviation; ``weekday`` a weekday name ("Mon", "tuesday") or "today"/"tonight"/"tomorrow".
        now: the instant the screen was seen (tz-aware).
        tz: the box's IANA zone (used when ``zone`` is absent or invalid).
        time_only_rule: "claude" (next occurrence, 1 h grace) or "codex" (same local date, the
            same 1 h grace across local midnight).

    Returns:
        The instant in UTC, or None when the parts hold no usable time (e.g. "13pm", "Feb 30"), or
        an instant outside 2000-2100 or more than 400 days after ``now`` (a misread, never a reset).
    """
    def get(key: str) -> str | None:
        return parts.get(key) or None

    epoch = get("epoch")
    if epoch:
        try:
            value = int(epoch)
            if value > 10**11:  # milliseconds
                value //= 1000
            return _bounded(datetime.fromtimestamp(value, tz=UTC), now)
        except (OverflowError, OSError, ValueError):
            return None
    rel = [get(k) for k in ("rel_days", "rel_hours", "rel_minutes", "rel_seconds")]
    if any(rel):
        days, hours, minutes, seconds = (min(int(v), 10**6) if v else 0 for v in rel)
        delta = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if delta > _MAX_AHEAD:
            return None
        return now.astimezone(UTC) + delta
    hour_text = get("hour")
    if not hour_text:
        return None
    clock = _clock(hour_text, get("minute"), get("ampm"))
    if clock is None:
        return None
    hour, minute = clock
    zone = resolve_zone(get("zone") or get("zone_bare"), tz)
    today = now.astimezone(zone).date()
    try:
        if get("month") or get("day"):
            month = _month_number(get("month") or "")
            day_text, year_text = get("day"), get("year")
            if month is None or not day_text:
                return None
            day_n = int(day_text)
            if year_text:
                return _bounded(_local(zone, date(int(year_text), month, day_n), hour, minute), now)
            year = today.year
            yesterday = today - timedelta(days=1)
            if (month, day_n) == (yesterday.month, yesterday.day):
                passed = _local(zone, yesterday, hour, minute, fold=1)
                if passed >= now.astimezone(UTC) - timedelta(hours=1):
                    # passed less than an hour ago ("Dec 8, 11:59pm" read at 0:01 on Dec 9, "Dec 31,
                    # 11:59pm" on Jan 1): that past instant ("re-check now"), not the date a year later
                    return _bounded(passed, now)
            candidate = date(year, month, day_n) if _valid(year, month, day_n) else None
            if candidate is None or candidate < today:
                year += 1
                for _ in range(8):  # Feb 29 -> next leap year; Feb 30 never exists
                    if _valid(year, month, day_n):
                        break
                    year += 1
                else:
                    return None
                candidate = date(year, month, day_n)
            return _bounded(_local(zone, candidate, hour, minute), now)
    except (ValueError, OverflowError):
        return None
    weekday = (get("weekday") or "").lower()
    if weekday in ("today", "tonight"):
        return _local(zone, today, hour, minute)
    if weekday == "tomorrow":
        return _local(zone, today + timedelta(days=1), hour, minute)
    floor = now.astimezone(UTC) - (timedelta(hours=1) if time_only_rule == "claude" else timedelta(0))
    if weekday[:3] in _WEEKDAYS:
        # the next such weekday after now, in the line's zone, with that date's offset (DST)
        # (a week back too: "Mon 11:59pm" read at 0:01 on Tuesday is the reset just passed, under the
        # Claude rule's hour of grace, not next Monday's)
        ahead = (_WEEKDAYS[weekday[:3]] - today.weekday()) % 7
        for extra in (-7, 0, 7, 14):
            for candidate in _both_folds(zone, today + timedelta(days=ahead + extra), hour, minute):
                if candidate >= floor:
                    return candidate
        return None  # pragma: no cover - two weeks ahead always qualifies
    if time_only_rule == "codex":
        same_day = _local(zone, today, hour, minute)
        day_before = _local(zone, today - timedelta(days=1), hour, minute)
        if same_day > now.astimezone(UTC) and day_before >= now.astimezone(UTC) - timedelta(hours=1):
            # Read in the hour after local midnight, the line printed before it (a reset just passed,
            # "11:59 PM" read at 0:00:30) would otherwise be taken for a reset a day later.
            return day_before
        return same_day
    for offset in (-1, 0, 1, 2):
        # both instants of a repeated DST hour: "1:05am" read at 1:06 EST is the 1:05 EST just passed,
        # not tomorrow's (the first 1:05, EDT, passed an hour before)
        for candidate in _both_folds(zone, today + timedelta(days=offset), hour, minute):
            if candidate >= floor:
                return candidate
    return None  # pragma: no cover - offset 2 always qualifies


def _valid(year: int, month: int, day_n: int) -> bool:
    try:
        date(year, month, day_n)
    except ValueError:
        return False
    return True


def is_relative(span: str) -> bool:
    """Whether ``span`` (a time expression as :func:`parse_when_span` returns it) counts from ``now``:
    "in 2 days 3 hours 4 minutes", "8m", "3h 20m" (True); a clock, date, weekday, ISO instant or epoch (False).
    Such a reading moves with the ``now`` it is read at; only the first reading of a line is the one meant."""
    text = span.strip()
    lead = _RE_LEAD.match(text)
    text = text[lead.end():] if lead else text
    if not text or _RE_ISO.match(text) or _RE_EPOCH.match(text):
        return False
    m = _RE_REL.match(text)
    return bool(m and any(m.groupdict().values()))


def parse_when(
    text: str,
    now: datetime,
    tz: str,
    time_only_rule: TimeOnlyRule = "claude",
) -> datetime | None:
    """Parse the reset expression at the start of ``text`` (the rest of the line is ignored).

    One grammar for every agent (as Claude Code 1.x-2.1.337 and Codex 0.x print them, and the
    variants reports show): clock times with or without minutes and am/pm ("5pm", "5:30am",
    "12am", "17:19", "07:16"); dates with or without a year in either order, ordinals, "at" or a
    comma between date and clock ("Nov 13 at 9am", "Aug 3, 7am", "Mar 10th, 2026 3:39 AM",
    "Aug 20, 2026, 7:38 AM", "14 Sep 2026 06:43", "21 de abr. de 2026 02:53"), the clock first
    ("7:26 PM on Aug 8"); weekdays and today/tomorrow ("Mon 12:00am", "Tuesday at 9am");
    relative forms in any unit combination ("8m", "3h 20m", "in 4 days 20 hours 9 minutes");
    epochs ("|1755615600", milliseconds too); ISO 8601 ("2026-04-21 02:53", "2026-09-14T06:43:00Z",
    "…+02:00"); zones in parentheses ("(Europe/Warsaw)", "(Etc/GMT+5)"), bare "UTC"/"GMT+2"/"+02:00".
    A leading "at"/"on"/"by"/"after"/"until"/"em"/"el"/"às" is skipped.

    Args:
        text: the text after "resets" / "reset at" / "try again" / "continuing automatically at".
        now: the instant the screen was seen (tz-aware).
        tz: the box's IANA zone.
        time_only_rule: "claude" or "codex" (see module docstring).

    Returns:
        The reset instant in UTC, or None when the text starts with no recognisable time
        (e.g. "later", "more than 24 hours out") or names an impossible one.
    """
    return parse_when_span(text, now, tz, time_only_rule)[0]


def parse_when_span(
    text: str,
    now: datetime,
    tz: str,
    time_only_rule: TimeOnlyRule = "claude",
) -> tuple[datetime | None, str]:
    """:func:`parse_when` that also returns the text it read, as it appears at the start of ``text``
    (lead words such as "at" included; ``""`` when nothing was parsed), so ``detect`` can show which
    time expression decided."""
    instant, span = _parse(text[:200].replace("\u00a0", " ").replace("\u202f", " "), now, tz, time_only_rule)
    return instant, span.strip()


def _parse(raw: str, now: datetime, tz: str, rule: TimeOnlyRule) -> tuple[datetime | None, str]:
    text = raw.lstrip()
    lead = _RE_LEAD.match(text)
    skipped = len(raw) - len(text) + (lead.end() if lead else 0)
    text = text[lead.end():] if lead else text
    if not text:
        return None, ""

    def read(m: re.Match[str], parts: Mapping[str, str | None] | None = None) -> tuple[datetime | None, str]:
        instant = from_parts(parts if parts is not None else m.groupdict(), now, tz, rule)
        return instant, raw[: skipped + m.end()].rstrip(" ,") if instant is not None else ""

    m = _RE_ISO.match(text)
    if m:
        return read(m)
    m = _RE_EPOCH.match(text)
    if m:
        return read(m)
    m = _RE_REL.match(text)
    if m and any(m.groupdict().values()):
        return read(m)
    m = _RE_WEEKDAY.match(text)
    if m:
        return read(m)
    for pattern in (_RE_MDY, _RE_DMY):
        m = pattern.match(text)
        if m and _month_number(m.group("month")) and (m.group("ampm") or m.group("minute")):
            return read(m)
    m = _RE_TIME_DATE.match(text)
    if m and (m.group("ampm") or m.group("minute")) and _month_number(m.group("month") or m.group("month2") or ""):
        parts = dict(m.groupdict())
        parts["month"] = parts.get("month") or parts.get("month2")
        parts["day"] = parts.get("day") or parts.get("day2")
        return read(m, parts)
    m = _RE_CLOCK.match(text)
    if m and (m.group("ampm") or m.group("minute")):
        return read(m)
    return None, ""
