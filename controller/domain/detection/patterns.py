"""User patterns (``spec.detection.patterns``): validated and compiled on RE2, refused with the field path
and the reason. Pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller.domain.types import LimitKind

MAX_PATTERN_CHARS = 500  # user patterns longer than this are refused

USER_PATTERN_GROUPS = frozenset(
    {"epoch", "year", "month", "day", "hour", "minute", "ampm", "zone",
     "rel_days", "rel_hours", "rel_minutes", "when", "window"}
)


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
