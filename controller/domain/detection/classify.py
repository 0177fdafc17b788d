"""Layer 4 of screen detection: one joined line classified against the profile's families and the user
patterns (a limit, credits, auto-continue, overload, retry or warning event, with the reset instant and the
window it names), or marked working, awaiting, a menu option, a human's echo or agent output. Pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.domain.detection.patterns import UserPattern
from controller.domain.detection.rows import JoinedLine
from controller.domain.profile import LinePattern, Profile
from controller.domain.timeparse import from_parts, is_relative, parse_when_span
from controller.domain.types import WINDOW_FIVE_HOUR, WINDOW_MONTHLY, WINDOW_WEEKLY, LimitKind

_MAX_LINE_CHARS = 2000   # user patterns see at most this much of one line


@dataclass
class _Event:
    cls: str                 # usage | credits | auto | overload | retrying | fallback | warning | auto_cancel | recovered
    name: str
    resets_at: datetime | None = None
    window: str | None = None
    auto: bool = False
    family: str = ""         # the profile family that matched (usage, credits, auto_continue, ...)
    when_text: str = ""      # the time expression that was parsed ("resets 5:13pm (UTC)")
    relative: bool = False   # that expression counts from now ("try again in 3 hours 2 minutes")
    why: str = ""            # a note for `detect --explain` (e.g. "a spend cap that names a reset")


@dataclass
class _Info:
    idx: int
    line: JoinedLine
    event: _Event | None = None
    working: bool = False
    awaiting: bool = False
    limit_menu: bool = False
    option: tuple[int, str] | None = None
    cursor: bool = False
    progress: bool = False
    user: bool = False
    neutral: bool = False    # a finished or background state (profile.neutral): neither output nor activity


def _ev(info: _Info) -> _Event:
    """The event of a line that matched a family (the limit and note lists hold only those)."""
    assert info.event is not None
    return info.event


_SLASH_ECHO = re.compile(r"^[>❯›]\s*/[\w-]+(?:\s|$)")
# glyphs before a line's text; ∴ ∷ ∵: Claude Code 2.1.337's notice glyph ("∷ Usage limit reached · …",
# cycling ∴ ∷ ∵ while the notice is live)
_PREFIX = re.compile(r"^[\s⎿●⏺∴∷∵■🖐\ufe0f⚠•◦>❯›│▌✗✘×!*\-]*")
_QUOTES_OPEN = "“«‘"
_OPTION = re.compile(r"^(?P<cursor>[❯›>▸▶]\s*)?(?P<num>\d{1,2})[.)]\s+(?P<text>.+)$")


def _window_of(text: str | None) -> str | None:
    if not text:
        return None
    t = text.lower()
    if re.search(r"5[- ]?h(?:our|r)?\b|five[- ]hour|session", t):
        return WINDOW_FIVE_HOUR
    if re.search(r"week|7[- ]?d(?:ay)?\b|seven[- ]day", t):
        return WINDOW_WEEKLY
    if re.search(r"month", t):
        return WINDOW_MONTHLY
    return None


# What a log or a wrapper may print before a limit line: timestamps, [tags], levels, module paths.
_LOG_LEAD = re.compile(
    r"^(?:\s*(?:\[[^\]]{1,48}\]"
    r"|\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
    r"|(?:ERROR|ERR|WARN(?:ING)?|INFO|DEBUG|TRACE|FATAL|CRITICAL)\b:?"
    r"|[A-Za-z_][\w-]*(?:::[\w-]+)+:?))+\s*"
)


def _lead_ok(lead: str) -> bool:
    """Text before a limit phrase: nothing (after glyph prefixes, log timestamps and levels) or a
    short "Something:" lead, never an open quote (limit text quoted in the agent's prose, corpus C57)."""
    lead = _PREFIX.sub("", lead).rstrip()
    lead = _PREFIX.sub("", _LOG_LEAD.sub("", lead)).rstrip()
    if not lead:
        return True
    if lead.count('"') % 2 or lead.count("`") % 2 or any(q in lead for q in _QUOTES_OPEN):
        return False
    return lead.endswith(":") and len(lead) <= 80


def _match(pattern: LinePattern, text: str) -> re.Match[str] | None:
    for m in pattern.regex.finditer(text):
        if not pattern.anchored or _lead_ok(text[: m.start()]):
            return m
    return None


_TIME_KEYS = ("epoch", "year", "month", "day", "hour", "minute", "ampm", "zone",
              "rel_days", "rel_hours", "rel_minutes", "rel_seconds")


def _find_time(
    profile: Profile | None,
    m: Any,
    text: str,
    tail: str,
    now: datetime,
    tz: str,
    rule: str,
) -> tuple[datetime | None, str, int, bool]:
    """The reset instant a limit line names: ``(instant or None, the time expression read,
    position in ``text`` where the reset clause starts or -1, relative)``; ``relative`` True when the
    expression counts from ``now`` ("try again in 3 hours 2 minutes", "resets 8m": read later, it reads later).

    A ``when`` group or time-part groups of the match decide (user patterns); otherwise the first
    reset clause of the profile ("resets", "try again", "until", …) after the match, in the line
    and then in ``tail`` (the rows continuing the line's paragraph), whose following text
    :func:`controller.domain.timeparse.parse_when` reads.
    """
    groups = m.groupdict()
    if groups.get("when"):
        instant, span = parse_when_span(groups["when"], now, tz, rule)  # type: ignore[arg-type]
        return instant, span, m.start(m.re.groupindex["when"]), is_relative(span)  # re2: group numbers only
    parts = {k: groups.get(k) for k in _TIME_KEYS if groups.get(k)}
    if parts:
        return (from_parts(parts, now, tz, rule), m.group(0), m.start(),  # type: ignore[arg-type]
                any(k.startswith("rel_") for k in parts) and not parts.get("epoch"))
    clause = profile.reset_clause if profile is not None else None
    if clause is None:
        return None, "", -1, False
    # right after the phrase ("continuing automatically at 7pm", "usage limit reached|1755615600")
    instant, span = parse_when_span(text[m.end():m.end() + 200], now, tz, rule)  # type: ignore[arg-type]
    if instant is not None:
        return instant, span, m.end(), is_relative(span)
    for source, offset in ((text[m.end():], m.end()), (tail, -1)):
        for c in clause.finditer(source[:_MAX_LINE_CHARS]):
            instant, span = parse_when_span(source[c.end():], now, tz, rule)  # type: ignore[arg-type]
            if instant is not None:
                return instant, f"{c.group(0)}{span_raw(source[c.end():], span)}".strip(), \
                    (offset + c.start() if offset >= 0 else -1), is_relative(span)
    return None, "", -1, False


def span_raw(after: str, span: str) -> str:
    """The clause's own spacing before the time expression ("try again" + " at 3:05 PM")."""
    return after[: len(after) - len(after.lstrip())] + span


def _window_near(text: str, start: int, clause: int) -> str | None:
    """The window named right before the reset clause, after the last separator ("monthly spend
    limit · your session limit resets 2:40pm" → five_hour)."""
    if clause <= start:
        return None
    segment = re.split(r"[∙·•|]", text[start:clause])[-1][-40:]
    return _window_of(segment)


_FAMILIES = (
    ("retrying", "retrying"),
    ("fallback", "fallback"),
    ("overload", "overload"),
    ("credits", "credits"),
    ("auto_cancel", "auto_cancel"),
    ("recovered", "recovered"),
    ("auto_continue", "auto"),
    ("usage", "usage"),
    ("warnings", "warning"),
)


def _classify(
    profile: Profile,
    idx: int,
    line: JoinedLine,
    now: datetime,
    tz: str,
    user_patterns: Sequence[UserPattern],
    tail: str = "",
) -> _Info:
    info = _Info(idx, line)
    text = line.text
    rule = profile.time_only_rule
    stripped = text.strip()
    m = _OPTION.match(stripped)
    if m:
        # a menu option ("2. Wait here, then continue automatically at 5:41pm") is a choice, not an event
        info.option = (int(m.group("num")), m.group("text").strip())
        info.cursor = bool(m.group("cursor"))
    hinted = profile.family_hint is None or profile.family_hint.search(text) is not None
    for attr, cls in _FAMILIES if info.option is None and hinted else ():
        for pattern in getattr(profile, attr):
            m = _match(pattern, text)
            if m is None:
                continue
            event = _Event(cls, f"pattern:{profile.agent}/{pattern.name}", family=attr)
            if cls in ("usage", "auto", "credits"):
                instant, when_text, clause, relative = _find_time(profile, m, text, tail, now, tz, rule)
                event.resets_at, event.when_text, event.relative = instant, when_text, relative
                if cls == "credits":
                    if instant is not None:
                        # a spend cap that names a session/weekly reset is lifted by it (corpus README)
                        event.cls, event.why = "usage", "a spend cap that names a reset: that reset lifts it"
                        event.window = pattern.window or _window_near(text, m.start(), clause)
                elif cls == "auto":
                    event.cls, event.auto = "usage", True
                else:
                    event.window = (pattern.window or _window_near(text, m.start(), clause)
                                    or _window_of(m.groupdict().get("window")))
                    if instant is None and profile.credits_hint is not None \
                            and profile.credits_hint.search(f"{text} {tail}"):
                        event.cls, event.why = "credits", "a usage limit without a reset, with a remedy no reset gives"
                    # "Usage limit reached · limit resets 5:13pm / Continuing automatically at 5:13pm"
                    event.auto = profile.auto_in_line is not None and \
                        profile.auto_in_line.search(text, m.end()) is not None
            info.event = event
            break
        if info.event:
            break
    if info.event is None and user_patterns and info.option is None:
        clipped = text[-_MAX_LINE_CHARS:]
        for number, up in enumerate(user_patterns):
            m = up.regex.search(clipped)
            if m is None:
                continue
            cls = {LimitKind.USAGE: "usage", LimitKind.CREDITS: "credits",
                   LimitKind.OVERLOAD: "overload", LimitKind.WARNING: "warning"}[up.kind]
            event = _Event(cls, f"user-pattern:{number}", window=_window_of(m.groupdict().get("window")),
                           family="user pattern")
            if cls == "usage":
                event.resets_at, event.when_text, _, event.relative = _find_time(None, m, clipped, "", now, tz, rule)
            info.event = event
            break
    if info.event is None:
        info.working = any(p.search(text) for p in profile.working)
        info.awaiting = any(p.search(text) for p in profile.awaiting)
        info.neutral = not info.working and any(p.search(stripped) for p in profile.neutral)
    info.limit_menu = any(p.search(text) for p in profile.limit_menu)
    if info.event is None and not info.working and not info.awaiting and not info.option and not line.in_box \
            and not info.neutral:
        if profile.user_echo is not None and profile.user_echo.match(stripped):
            # a slash command ("❯ /rate-limit-options") is no new turn: it leaves the limit standing
            info.user = not _SLASH_ECHO.match(stripped)
        elif profile.progress is not None and profile.progress.match(stripped):
            info.progress = True
    return info
