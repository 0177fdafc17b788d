"""Layered screen detection: what a captured tab screen means. Pure, no I/O, ``now`` passed in.

Layers (each a small function, tested by tests/test_detection_*.py):

1. :func:`normalize_lines` strips ANSI, parses box borders (``╭ │ ╰``) and horizontal rules.
2. The profile's input parser finds the input box on the bottom (Claude's ``│ > text │`` or
   ``> text``; Codex's ``› text`` composer); everything below it is the footer.
3. :func:`join_lines` joins lines the terminal wrapped mid-sentence ("…will reset\\n at 3pm (…)").
4. Every joined line is classified against the profile's families (data, see
   :class:`controller.domain.profile.Profile`) and the user patterns.
5. The LIVE BOTTOM decides: lines below the last agent-output line (``⏺ …``, ``• Ran …``); the
   newest limit line there wins; a spinner/interrupt hint below it, or agent output after it,
   makes it stale (corpus C31, C57; field-pitfalls §5).
6. The reset instant is parsed with :mod:`controller.domain.timeparse` (zone rules, DST).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.domain.timeparse import from_parts, is_relative, parse_when_span
from controller.domain.types import (
    WINDOW_FIVE_HOUR,
    WINDOW_MONTHLY,
    WINDOW_WEEKLY,
    Detection,
    LimitKind,
    TabState,
)

from controller.domain.profile import LinePattern, Profile

__all__ = [
    "InputBox",
    "InvalidPattern",
    "ScreenLine",
    "UserPattern",
    "compile_user_pattern",
    "detect_screen",
    "join_lines",
    "normalize_lines",
    "MAX_LINES",
    "MAX_PATTERN_CHARS",
    "USER_PATTERN_GROUPS",
]

MAX_LINES = 60          # only the last 60 joined lines are read (live bottom + user-pattern guard)
MAX_PATTERN_CHARS = 500  # user patterns longer than this are refused
_MAX_LINE_CHARS = 2000   # user patterns see at most this much of one line
_MAX_JOIN_ROWS = 6       # a wrapped message rarely spans more rows; keeps plain output lines apart

USER_PATTERN_GROUPS = frozenset(
    {"epoch", "year", "month", "day", "hour", "minute", "ampm", "zone",
     "rel_days", "rel_hours", "rel_minutes", "when", "window"}
)


# ---------------------------------------------------------------------------------------------
# 1. normalization


@dataclass(frozen=True)
class ScreenLine:
    """One physical screen row after normalization.

    Attributes:
        text: the row without ANSI, box side borders and surrounding whitespace.
        kind: "text" | "blank" | "box_top" | "box_bottom" | "rule".
        in_box: the row sat between ``│`` borders.
        index: 0-based row number on the screen.
    """

    text: str
    kind: str
    in_box: bool
    index: int


@dataclass(frozen=True)
class InputBox:
    """The agent's input area found on the live bottom.

    Attributes:
        start: first row index of the input area (box top, rule or prompt row).
        end: last row index of the input area; rows after it are the footer.
        text: the typed text ("" when empty or a placeholder is shown).
    """

    start: int
    end: int
    text: str


_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"        # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1b[PX^_][^\x1b]*\x1b\\"       # DCS/SOS/PM/APC
    r"|\x1b[@-Z\\-_]"                  # 2-byte
)
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BOX_TOP = re.compile(r"^[╭┌╔┏][─━═┄┈╌\s\S]*[╮┐╗┓]$")
_BOX_BOTTOM = re.compile(r"^[╰└╚┗][─━═┄┈╌\s\S]*[╯┘╝┛]$")
_RULE = re.compile(r"^[─━═╌┄┈▔▁]{8,}$")
_SIDES = "│┃║▕▏"


def normalize_lines(screen: str) -> list[ScreenLine]:
    """Split a captured screen into :class:`ScreenLine` rows.

    Strips ANSI escape sequences and control characters, converts tabs/NBSP to spaces, and parses
    box borders so text inside ``│ … │`` is returned without them (``in_box=True``).
    Trailing blank rows are dropped.
    """
    screen = _ANSI.sub("", screen).replace("\r\n", "\n").replace("\r", "\n")
    screen = _CTRL.sub("", screen.replace("\t", "    "))
    screen = screen.replace("\u00a0", " ").replace("\u202f", " ")
    rows: list[ScreenLine] = []
    for index, raw in enumerate(screen.split("\n")):
        s = raw.strip()
        if not s:
            rows.append(ScreenLine("", "blank", False, index))
        elif "─" in s[:3] + s[-3:] or "━" in s[:3] + s[-3:] or "═" in s[:3] + s[-3:]:
            if _BOX_TOP.match(s) and len(s) > 2:
                rows.append(ScreenLine(s.strip("╭┌╔┏╮┐╗┓─━═ "), "box_top", True, index))
            elif _BOX_BOTTOM.match(s) and len(s) > 2:
                rows.append(ScreenLine("", "box_bottom", True, index))
            elif _RULE.match(s):
                rows.append(ScreenLine("", "rule", False, index))
            else:
                rows.append(_side_parsed(s, index))
        else:
            rows.append(_side_parsed(s, index))
    while rows and rows[-1].kind == "blank":
        rows.pop()
    return rows


def _side_parsed(s: str, index: int) -> ScreenLine:
    if s[0] in _SIDES:
        inner = s[1:]
        if inner and inner[-1] in _SIDES:
            inner = inner[:-1]
        inner = inner.strip()
        return ScreenLine(inner, "text" if inner else "blank", True, index)
    return ScreenLine(s, "text", False, index)


@dataclass(frozen=True)
class JoinedLine:
    """A logical line: one or more physical rows joined where the terminal wrapped them."""

    text: str
    in_box: bool
    first: int
    last: int
    rows: int = 1


# A row starting like this begins a new logical line (it is not a wrapped continuation).
_STARTER = re.compile(
    r"^(?:[⎿●⏺■🖐⚠◦└├›❯>✶✻✽✢✳*$#✔✓✗✘☐☒□▪‣⏵↓↑─▌\[]"
    r"|[·•](?!\s*[a-z])"  # a separator that wrapped to the row start ("· resets 5pm") continues the line
    r"|\d+[.)]\s"
    r"|(?:ERROR|Error|Warning|WARN|Press|Enter to|Esc to|Tip:|\? for)\b)"
)


def join_lines(rows: Sequence[ScreenLine]) -> list[JoinedLine]:
    """Join rows that continue a sentence wrapped by the terminal.

    A text row is appended to the previous text row (same box side) unless it starts like a new
    item (a glyph such as ⎿ ● ⏺ ■ ⚠ • › ❯ >, a numbered option, "ERROR:", "Press …"), the previous
    row ends with "?" (a question is followed by its options), the previous row ends a sentence and
    the row starts a new one with a capital, or the logical line already spans 6 rows. Blank rows,
    borders and rules end a logical line and are not returned.
    """
    out: list[JoinedLine] = []
    current: JoinedLine | None = None
    for row in rows:
        if row.kind != "text":
            if current:
                out.append(current)
            current = None
            continue
        if (
            current is not None
            and current.in_box == row.in_box
            and not _STARTER.match(row.text)
            and not current.text.endswith("?")
            and not (current.text[-1:] in ".!" and row.text[:1].isupper())
            and current.rows < _MAX_JOIN_ROWS
        ):
            current = JoinedLine(f"{current.text} {row.text}", current.in_box, current.first, row.index,
                                 current.rows + 1)
            continue
        if current:
            out.append(current)
        current = JoinedLine(row.text, row.in_box, row.index, row.index)
    if current:
        out.append(current)
    return out


# ---------------------------------------------------------------------------------------------
# user patterns


class InvalidPattern(ValueError):
    """A user pattern was refused; the message starts with the field path (e.g.
    ``spec.detection.patterns[0].regex: …``)."""


@dataclass(frozen=True)
class UserPattern:
    """A validated user pattern from ``spec.detection.patterns``.

    Attributes:
        regex: the compiled regex (RE2 through the ``google-re2`` binding: matching time is
            linear in the line length, so a user pattern can never hang the controller).
        kind: what a match means: USAGE (default), CREDITS, OVERLOAD or WARNING.
        source: the pattern text as given.
    """

    regex: Any
    kind: LimitKind = LimitKind.USAGE
    source: str = ""


# A group that repeats something already repeated, e.g. (a+)+ or (\w*)*: catastrophic backtracking.
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*](?:[^()\\]|\\.)*\)\s*(?:[+*]|\{\d*,\d*\})")


def _re2_reason(exc: Exception) -> str:
    """RE2's parse error as text: the binding raises `error(b"missing ): (")` (bytes, "<reason>: <at>"),
    shown as `missing ) at '('`."""
    raw = exc.args[0] if exc.args else str(exc)
    text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    reason, sep, at = text.partition(": ")
    return f"{reason} at {at!r}" if sep and at else text


def compile_user_pattern(
    text: str,
    kind: str | LimitKind = LimitKind.USAGE,
    field_path: str = "spec.detection.patterns[]",
) -> UserPattern:
    """Validate and compile one user pattern.

    Args:
        text: a Python regex. Named groups must be among :data:`USER_PATTERN_GROUPS`
            (epoch, year, month, day, hour, minute, ampm, zone, rel_days, rel_hours, rel_minutes,
            plus ``when`` = free text parsed like a built-in reset expression and ``window``).
        kind: "usage" (default) | "credits" | "overload" | "warning".
        field_path: prefix for error messages (the CR field holding the pattern).

    Returns:
        A :class:`UserPattern` (case-insensitive).

    Raises:
        InvalidPattern: empty, longer than 500 characters, not compilable, an unknown named
            group, a nested quantifier (catastrophic backtracking), a pattern that matches the
            empty string, or an unknown kind. The message is ``"<field_path>: <reason>"``.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidPattern(f"{field_path}: pattern is empty")
    if len(text) > MAX_PATTERN_CHARS:
        raise InvalidPattern(f"{field_path}: pattern is {len(text)} characters, the limit is {MAX_PATTERN_CHARS}")
    try:
        limit_kind = LimitKind(kind.value if isinstance(kind, LimitKind) else str(kind).lower())
    except ValueError:
        raise InvalidPattern(
            f"{field_path}: unknown kind {kind!r} (expected usage, credits, overload or warning)"
        ) from None
    if _NESTED_QUANTIFIER.search(text):
        # RE2 would run it in linear time anyway; refused because it is almost always a mistake.
        raise InvalidPattern(f"{field_path}: nested quantifier (e.g. (a+)+) can backtrack catastrophically")
    import re2

    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    try:
        regex = re2.compile(text, options)
    except re2.error as exc:
        raise InvalidPattern(
            f"{field_path}: not a valid regular expression for RE2 (no lookaround or backreferences): "
            f"{_re2_reason(exc)}"
        ) from None
    unknown = sorted(set(regex.groupindex) - USER_PATTERN_GROUPS)
    if unknown:
        raise InvalidPattern(
            f"{field_path}: unknown named group(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(USER_PATTERN_GROUPS))}"
        )
    if regex.search("") is not None:
        raise InvalidPattern(f"{field_path}: pattern matches the empty string (it would match every line)")
    return UserPattern(regex=regex, kind=limit_kind, source=text)


def compile_user_patterns(patterns: Sequence[tuple[str, str]]) -> tuple[list[UserPattern], tuple[str, ...]]:
    """Compile spec.detection.patterns ((regex, kind) pairs, in spec order).

    Returns:
        The compiled patterns (those that compile) and, sorted and without repeats, the message of each
        pattern that does not (naming its field `spec.detection.patterns[i].regex`, ending with
        "(the pattern is ignored)"), for InputIgnored.
    """
    out: list[UserPattern] = []
    errors: set[str] = set()
    for i, (regex, kind) in enumerate(patterns):
        try:
            out.append(compile_user_pattern(regex, kind=kind, field_path=f"spec.detection.patterns[{i}].regex"))
        except InvalidPattern as exc:
            errors.add(str(exc))
    return out, tuple(e + " (the pattern is ignored)" for e in sorted(errors))


# ---------------------------------------------------------------------------------------------
# classification


@dataclass
class _Event:
    cls: str                 # usage | credits | auto | overload | retrying | warning | auto_cancel | recovered
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


def _ev(info: _Info) -> _Event:
    """The event of a line that matched a family (the limit and note lists hold only those)."""
    assert info.event is not None
    return info.event


_SLASH_ECHO = re.compile(r"^[>❯›]\s*/[\w-]+(?:\s|$)")
_PREFIX = re.compile(r"^[\s⎿●⏺■🖐\ufe0f⚠•◦>❯›│▌✗✘×!*\-]*")
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
    info.limit_menu = any(p.search(text) for p in profile.limit_menu)
    if info.event is None and not info.working and not info.awaiting and not info.option and not line.in_box:
        if profile.user_echo is not None and profile.user_echo.match(stripped):
            # a slash command ("❯ /rate-limit-options") is no new turn: it leaves the limit standing
            info.user = not _SLASH_ECHO.match(stripped)
        elif profile.progress is not None and profile.progress.match(stripped):
            info.progress = True
    return info


# ---------------------------------------------------------------------------------------------
# the decision


def detect_screen(
    profile: Profile,
    screen: str,
    now: datetime,
    tz: str,
    user_patterns: Sequence[UserPattern] = (),
    trace: list[str] | None = None,
) -> Detection:
    """Say what a tab's screen means (the corpus README's rules).

    Args:
        profile: the agent's :class:`~controller.domain.profile.Profile` (line families as data).
        screen: captured pane text (``tmux capture-pane -p``, ANSI allowed, rows may wrap).
        now: tz-aware instant the screen was seen; relative and time-only resets count from it.
        tz: the box's IANA zone, used when a line names none (Codex never does) or an invalid one.
        user_patterns: validated ``spec.detection.patterns`` (:func:`compile_user_pattern`);
            tried on lines no built-in family claims, over the last 60 joined lines only.
        trace: when a list is given, one sentence per step is appended: which family matched
            which line, which time expression was read, why an older limit line is history
            (``agentbox-controller detect --explain`` prints it). Screen text in it is untrusted.

    Returns:
        :class:`~controller.domain.types.Detection`:
        - RATE_LIMITED + USAGE/CREDITS when the newest limit line on the live bottom is not stale
          (``resets_at`` UTC or None; ``window``; ``auto_continue`` for Claude Code's native wait,
          announced above the prompt or in the footer below it; ``limit_menu``/``menu_choice`` for
          its rate-limit options menu);
        - AWAITING_INPUT for a permission prompt, approval overlay, question or menu that is not the
          limit menu (a limit line above it still fills kind/resets_at);
        - WORKING for a live spinner/status/interrupt hint, a CLI retrying by itself, or a native
          continue that fired;
        - IDLE for a visible input box with nothing of the above; UNKNOWN otherwise.
        OVERLOAD/WARNING lines set ``kind`` without making the tab rate limited.
        ``prompt_text`` is the input box text ("" empty/placeholder, None when no box is visible).

    Raises:
        ValueError: ``now`` is naive.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    note = trace.append if trace is not None else (lambda _text: None)
    rows = normalize_lines(screen)
    box = profile.find_input(rows) if profile.find_input else None
    if box is not None and box.text:
        # a bare "> You've hit your limit · …" row is a limit line, not a half-typed prompt (corpus C23)
        probe = _classify(profile, 0, JoinedLine(box.text, False, box.start, box.end), now, tz, ())
        if probe.event is not None:
            box = None
    content = rows[: _pos(rows, box.start)] if box else rows
    footer = rows[_pos(rows, box.end) + 1:] if box else []
    joined = join_lines(content)[-MAX_LINES:]
    tails = [_tail(joined, i) for i in range(len(joined))]
    infos = [_classify(profile, i, line, now, tz, user_patterns, tails[i]) for i, line in enumerate(joined)]
    # the footer below the input is live status: Claude Code shows its native wait there too
    foot = [_classify(profile, -1, JoinedLine(r.text, False, r.index, r.index), now, tz, ())
            for r in footer if r.kind == "text"]
    for i in infos + foot:
        if i.event is not None:
            where = "footer" if i.idx < 0 else f"line {i.line.first + 1}"
            note(f"{where}: family {i.event.family} ({i.event.name}) matched {_quote(i.line.text)}"
                 + (f"; time expression {_quote(i.event.when_text)} -> {_iso(i.event.resets_at)}"
                    if i.event.when_text else ("; no time expression" if i.event.cls in ("usage", "credits") else ""))
                 + (f"; {i.event.why}" if i.event.why else ""))
    foot_auto = next((i for i in foot if i.event and i.event.auto), None)
    foot_cancel = any(i.event and i.event.cls == "auto_cancel" for i in foot)
    foot_limits = [i for i in foot if i.event and i.event.cls in ("usage", "credits")]

    last_progress = max((i.idx for i in infos if i.progress), default=-1)
    live = [i for i in infos if i.idx > last_progress]
    for i in infos:
        if i.event and i.event.cls in ("usage", "credits") and i.idx <= last_progress:
            note(f"line {i.line.first + 1} is history: agent output follows it "
                 f"(line {infos[last_progress].line.first + 1}: {_quote(infos[last_progress].line.text)})")
    limits = [i for i in live if i.event and i.event.cls in ("usage", "credits")]
    newest = limits[-1] if limits else None
    if newest is not None:
        echo = next((i for i in live if i.user and i.idx > newest.idx), None)
        if echo is not None:
            # the human sent a new turn after the limit line and no new limit line followed it
            note(f"line {newest.line.first + 1} is history: a message was sent after it "
                 f"(line {echo.line.first + 1}: {_quote(echo.line.text)})")
            limits = [i for i in limits if i.idx > echo.idx]
            newest = None
            last_progress = echo.idx
            live = [i for i in live if i.idx > echo.idx]
    after = [i for i in live if newest is None or i.idx > newest.idx]

    working_info = _working(profile, infos, after, footer)
    recovered = [i for i in after if i.event and i.event.cls == "recovered"]
    if newest is None and foot_limits and working_info is None and not recovered:
        # no limit line above the prompt (cleared, scrolled away): the footer's limit status decides
        newest = foot_limits[-1]
        note("no limit line above the prompt: the footer's limit status decides")
    menu_lines = [i for i in after if i.option or i.limit_menu or i.awaiting]
    is_limit_menu = any(i.limit_menu for i in menu_lines) and (newest is not None or any(
        i.option and profile.stop_option is not None and profile.stop_option.search(i.option[1])
        for i in menu_lines))
    awaiting = None if is_limit_menu else next(
        (i for i in after if i.awaiting or (i.option and i.cursor)), None)
    prompt = box.text if box else None

    if newest is not None and (working_info is not None or recovered):
        src = working_info if isinstance(working_info, str) else (
            working_info.line.text if working_info is not None else recovered[-1].line.text)
        note(f"the limit line is history: the agent is working again ({_quote(src)})")
    if newest is not None and working_info is None and not recovered:
        if newest.idx >= 0:
            block_start = max((i.idx for i in live if i.user and i.idx < newest.idx), default=last_progress)
            block = foot_limits + [i for i in limits if i.idx > block_start]  # the line above the prompt names a zone
        else:
            block = foot_limits
        # the newest line with a reset decides; one that prints its zone wins over a zoneless
        # repeat ("resets 2:50am (Asia/Muscat)" / "continuing automatically at 2:50am")
        timed = [i for i in reversed(block) if _ev(i).resets_at]
        chosen = next((i for i in timed if _ZONED.search(_ev(i).when_text)), timed[0] if timed else None)
        resets_at = _ev(chosen).resets_at if chosen else None
        relative = chosen is not None and _ev(chosen).relative
        if _ev(newest).cls == "credits":
            resets_at = None
        window = next((_ev(i).window for i in reversed(block) if _ev(i).window), None)
        auto_idx = max((i.idx for i in block if _ev(i).auto and i.idx >= 0), default=-1)
        cancelled = any(i.event and i.event.cls == "auto_cancel" and i.idx > auto_idx for i in live)
        auto = auto_idx >= 0 and not cancelled
        if foot_auto is not None and not foot_cancel:
            auto = True  # the footer is the live status: "Continuing automatically at … · Esc to cancel"
            if resets_at is None:
                resets_at, relative = _ev(foot_auto).resets_at, _ev(foot_auto).relative
        elif foot_cancel:
            auto = False
        if auto_idx >= 0 and cancelled:
            note("the native wait was cancelled or gave up after it was announced: the resume is ours")
        kind = LimitKind.CREDITS if _ev(newest).cls == "credits" else LimitKind.USAGE
        menu_choice = None
        if is_limit_menu and profile.stop_option is not None:
            menu_choice = next((i.option[0] for i in menu_lines
                                if i.option and profile.stop_option.search(i.option[1])), None)
        if awaiting is not None:
            note(f"a prompt or menu below the limit line waits for a person: {_quote(awaiting.line.text)}")
            return Detection(TabState.AWAITING_INPUT, kind, resets_at, window, False, False, None,
                             prompt, awaiting.line.text, _ev(newest).name)
        name = _ev(foot_auto).name if auto and foot_auto is not None and auto_idx < 0 and newest.idx < 0 \
            else _ev(newest).name
        return Detection(TabState.RATE_LIMITED, kind, resets_at, window, auto, is_limit_menu,
                         menu_choice, prompt, newest.line.text, name, reset_relative=relative and resets_at is not None)

    if newest is None and is_limit_menu:
        # the options menu is open but its limit line scrolled away: still a usage stop
        menu_choice = next((i.option[0] for i in menu_lines if i.option and profile.stop_option
                            and profile.stop_option.search(i.option[1])), None)
        first = next(i for i in menu_lines if i.limit_menu)
        note("the rate-limit options menu is open without its limit line")
        return Detection(TabState.RATE_LIMITED, LimitKind.USAGE, None, None, False, True, menu_choice,
                         prompt, first.line.text, f"pattern:{profile.agent}/limit-menu")

    # not rate limited: the newest overload / retry / warning line on the live bottom gives the kind
    notes = [i for i in live if i.event and i.event.cls in ("overload", "retrying", "warning")
             and (newest is None or i.idx > newest.idx or working_info is None)]
    notes += [i for i in foot if i.event and i.event.cls in ("overload", "retrying", "warning")]
    last_note = notes[-1] if notes else None
    note_kind: LimitKind | None = None
    if last_note is not None:
        note_kind = LimitKind.WARNING if _ev(last_note).cls == "warning" else LimitKind.OVERLOAD
        note(f"not a stop: {_ev(last_note).family} line {_quote(last_note.line.text)}")
    evidence = last_note.line.text if last_note else None
    detected_by = _ev(last_note).name if last_note else ""
    if awaiting is not None:
        return Detection(TabState.AWAITING_INPUT, note_kind, None, None, prompt_text=prompt,
                         evidence=awaiting.line.text, detected_by=f"marker:{profile.agent}/awaiting")
    retrying = last_note is not None and _ev(last_note).cls == "retrying"
    if working_info is not None or recovered or retrying:
        if last_note is None or _ev(last_note).cls != "retrying":
            shown = working_info if working_info is not None else (recovered[-1] if recovered else None)
            if isinstance(shown, _Info):
                evidence = evidence or shown.line.text
                detected_by = detected_by or (
                    shown.event.name if shown.event else f"marker:{profile.agent}/working")
            elif isinstance(shown, str):
                evidence = evidence or shown
                detected_by = detected_by or f"marker:{profile.agent}/working-footer"
        return Detection(TabState.WORKING, note_kind, None, None, prompt_text=prompt,
                         evidence=evidence, detected_by=detected_by)
    state = TabState.IDLE if box is not None else TabState.UNKNOWN
    return Detection(state, note_kind, None, None, prompt_text=prompt, evidence=evidence, detected_by=detected_by)


_ZONED = re.compile(r"\([A-Za-z][^)]*\)|\b(?:UTC|GMT)\b|[+-]\d{2}:?\d{2}\b|\d\s?Z\b|^\|")


def _quote(text: str, limit: int = 160) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f'"{text}"'


def _iso(instant: datetime | None) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ") if instant is not None else "none"


def _tail(joined: Sequence[JoinedLine], i: int) -> str:
    """Text of up to two logical lines that continue line ``i``'s paragraph (adjacent rows, not a
    new item): "ERROR: You've hit your usage limit for X.\nSwitch to another model now, or try
    again at Aug 8th, 2026 7:26 PM." keeps its time in the second sentence (corpus N30)."""
    parts: list[str] = []
    last = joined[i].last
    for nxt in joined[i + 1:i + 3]:
        if nxt.first != last + 1 or nxt.in_box != joined[i].in_box or _STARTER.match(nxt.text):
            break
        parts.append(nxt.text)
        last = nxt.last
    return " ".join(parts)


def _pos(rows: Sequence[ScreenLine], index: int) -> int:
    """List position of the row with screen index ``index``."""
    for pos, row in enumerate(rows):
        if row.index == index:
            return pos
    return len(rows)


def _working(
    profile: Profile,
    infos: Sequence[_Info],
    after: Sequence[_Info],
    footer: Sequence[ScreenLine],
) -> _Info | str | None:
    """A live working marker: an interrupt hint in the footer, or a spinner/status line below the
    newest limit line (Codex: only the last content line above the input counts)."""
    for row in footer:
        if any(p.search(row.text) for p in profile.working_hints):
            return row.text
    candidates = [i for i in after if i.working]
    if not candidates:
        return None
    if profile.working_adjacent:
        # the last content line above the input, skipping notes drawn under it (Codex 0.171's
        # right-aligned "⚠ 5h limit: … left" warning)
        content = [i for i in infos if not (i.event and i.event.cls in ("warning", "overload"))]
        return candidates[-1] if content and candidates[-1] is content[-1] else None
    recent = {i.idx for i in infos[-12:]}
    return next((i for i in reversed(candidates) if i.idx in recent), None)
