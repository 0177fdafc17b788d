"""Reading usage JSON into domain `Usage` / `Window`: the shared checks of every usage parser (providers'
APIs in :mod:`controller.providers.parse`, the agents' own files in :mod:`controller.agents.usage_files`).
Pure, no I/O.

Rules: windows are named by their length (``window_name``), never by their slot; percent is 0-100 and values
above 100 are kept up to 10000; ``resets_at`` is UTC, tz-aware, truncated to the second, between 2000 and
2100; a null or missing window is absent from ``Usage.windows`` (never 0 %); unknown keys are ignored; a
malformed or out-of-range value (NaN, 1e999, a negative percent or length, year 9999) raises
``UsageParseError`` whose message names the field (values themselves are never echoed) - never another
exception.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

from controller.domain.types import WINDOW_FIVE_HOUR, WINDOW_MONTHLY, WINDOW_WEEKLY, Usage, Window

_FIVE_HOUR_S = 5 * 3600
_WEEK_S = 7 * 86400
_MONTH_MIN_S = 28 * 86400
_MONTH_MAX_S = 31 * 86400

# Anthropic usage-endpoint keys that are account-wide windows, mapped to their length in seconds.
# Per-model keys (seven_day_opus, seven_day_sonnet, seven_day_oauth_apps) and extra_usage are not
# account-wide windows and are left out (they would collide with "weekly").
_ANTHROPIC_WINDOWS = {"five_hour": _FIVE_HOUR_S, "seven_day": _WEEK_S}

# rate_limit_event.rateLimitType → window name. Per-model types (seven_day_opus, seven_day_sonnet)
# keep their own name: a model's window never stands for the account's weekly window.
_EVENT_WINDOW_TYPES = {
    "five_hour": WINDOW_FIVE_HOUR,
    "seven_day": WINDOW_WEEKLY,
    "seven_day_opus": "weekly_opus",
    "seven_day_sonnet": "weekly_sonnet",
}

# Anthropic limits[].kind → window name; weekly_scoped (one model) is not an account window.
_LIMIT_KINDS = {"session": WINDOW_FIVE_HOUR, "five_hour": WINDOW_FIVE_HOUR, "weekly_all": WINDOW_WEEKLY,
                "weekly": WINDOW_WEEKLY, "monthly_all": WINDOW_MONTHLY}

_MAX_PERCENT = 10000.0            # values over 100 are kept; beyond this a value is garbage
_MAX_LENGTH_S = 400 * 86400       # no window is longer
_MIN_INSTANT = datetime(2000, 1, 1, tzinfo=timezone.utc)
_MAX_INSTANT = datetime(2100, 1, 1, tzinfo=timezone.utc)

_SLOTS = ("primary", "secondary", "tertiary")


class UsageParseError(ValueError):
    """A usage payload had a malformed value. The message names the field, never its value."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


# --------------------------------------------------------------------------------------------- helpers


def window_name(seconds: int) -> str:
    """Name a window by its length in seconds.

    18000 → "five_hour", 604800 → "weekly", 28-31 days (≈2628000) → "monthly", anything else → f"{n}s".
    """
    n = int(seconds)
    if n == _FIVE_HOUR_S:
        return WINDOW_FIVE_HOUR
    if n == _WEEK_S:
        return WINDOW_WEEKLY
    if _MONTH_MIN_S <= n <= _MONTH_MAX_S:
        return WINDOW_MONTHLY
    return f"{n}s"


def format_utc(dt: datetime | None) -> str | None:
    """RFC 3339 UTC with a 'Z' and second precision ("2026-03-10T04:59:59Z"), or None."""
    if dt is None:
        return None
    return _utc(dt).strftime("%Y-%m-%dT%H:%M:%SZ")


def usage_to_json(usage: Usage) -> dict[str, Any]:
    """JSON shape of a Usage: {"windows": {name: {"utilization", "resets_at"}}, "read_at"} (times via format_utc)."""
    return {
        "windows": {
            name: {"utilization": w.utilization, "resets_at": format_utc(w.resets_at)}
            for name, w in sorted(usage.windows.items())
        },
        "read_at": format_utc(usage.read_at),
    }


def _utc(dt: datetime) -> datetime:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).replace(microsecond=0)


def _bounded_instant(dt: datetime, field: str) -> datetime:
    try:
        value = _utc(dt)
    except (OverflowError, ValueError):
        raise UsageParseError(field, "instant out of range") from None
    if not _MIN_INSTANT <= value < _MAX_INSTANT:
        raise UsageParseError(field, "instant out of range (2000-2100)")
    return value


def _after(base: datetime, seconds: float, field: str) -> datetime:
    """``base`` + a relative reset (``reset_after_seconds``), bounded to 0-400 days."""
    if not 0 <= seconds <= _MAX_LENGTH_S:
        raise UsageParseError(field, "relative reset out of range")
    return base + timedelta(seconds=int(seconds))


def _is_number(v: Any) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # a JSON integer of 400 digits is a Python int no float can hold
        return False


def _obj(v: Any, field: str) -> dict[str, Any] | None:
    """None for null/missing, the dict itself, else UsageParseError."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise UsageParseError(field, f"expected an object, got {type(v).__name__}")
    return v


def _number(v: Any, field: str, *, allow_str: bool = False) -> float | None:
    if v is None:
        return None
    if allow_str and isinstance(v, str):
        try:
            f = float(v.strip())
        except ValueError:
            raise UsageParseError(field, "expected a number") from None
        if not math.isfinite(f):
            raise UsageParseError(field, "expected a finite number")
        return f
    if not _is_number(v):
        raise UsageParseError(field, f"expected a number, got {type(v).__name__}")
    return float(v)


def _percent(v: Any, field: str, *, fraction: bool = False, allow_str: bool = False) -> float | None:
    f = _number(v, field, allow_str=allow_str)
    if f is None:
        return None
    if f < 0:
        raise UsageParseError(field, "negative utilization")
    pct = round(f * 100.0, 6) if fraction else f
    if pct > _MAX_PERCENT:
        raise UsageParseError(field, "utilization out of range")
    return pct


def _epoch(v: Any, field: str, *, allow_str: bool = False) -> datetime | None:
    f = _number(v, field, allow_str=allow_str)
    if f is None:
        return None
    # Some sources give milliseconds; seconds stay below 1e11 until the year 5138.
    if f > 1e11:
        f = f / 1000.0
    try:
        value = datetime.fromtimestamp(int(f), tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise UsageParseError(field, "epoch out of range") from None
    return _bounded_instant(value, field)


def _instant(v: Any, field: str) -> datetime | None:
    """ISO 8601 string or epoch seconds → UTC second precision; None stays None."""
    if v is None:
        return None
    if isinstance(v, str):
        s = v.strip()
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(s)
        except ValueError:
            raise UsageParseError(field, "expected an ISO 8601 instant") from None
        return _bounded_instant(parsed, field)
    if _is_number(v):
        return _epoch(v, field)
    raise UsageParseError(field, f"expected an ISO 8601 instant, got {type(v).__name__}")


def _put(windows: dict[str, Window], w: Window) -> None:
    """Add a window; when two slots carry the same length keep the more used one."""
    old = windows.get(w.name)
    if old is None or w.utilization > old.utilization:
        windows[w.name] = w


def _seconds_of(v: Any, field: str) -> int:
    f = _number(v, field)
    if f is None:
        raise UsageParseError(field, "missing (windows are named by their length)")
    if f <= 0 or f > _MAX_LENGTH_S:
        raise UsageParseError(field, "expected a positive length of at most 400 days")
    return int(f)


def _require_dict(payload: Any, field: str) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise UsageParseError(field, f"expected an object, got {type(payload).__name__}")
    return payload


# --------------------------------------------------------------------------------------------- parsers
