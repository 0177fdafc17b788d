"""Parsers of the providers' structured usage data into domain `Usage` / `Window`. Pure, no I/O.

Formats mirrored (see tests/fixtures/corpus/usage-payloads.jsonl and field-pitfalls §8):

- Anthropic ``GET /api/oauth/usage`` (what Claude Code 2.1.x's ``/usage`` reads): windows keyed
  ``five_hour`` / ``seven_day``, ``utilization`` already in percent 0-100, ``resets_at`` ISO 8601; the newer
  ``limits[]`` list (``kind: session | weekly_all | weekly_scoped``, ``percent`` 0-100, ``resets_at`` ISO with
  offsets such as ``+02:00``); a ``weekly_scoped`` (per-model) entry never stands for the account's window.
- ChatGPT ``GET /backend-api/wham/usage`` (what Codex CLI 0.169 reads): ``rate_limit.{primary,secondary,
  tertiary}_window`` with ``used_percent`` (0-100), ``limit_window_seconds``, ``reset_at`` (epoch s) or
  ``reset_after_seconds``.
- Claude Code ``--output-format stream-json`` ``rate_limit_event`` (``rate_limit_info.status``,
  ``resetsAt`` epoch s, ``rateLimitType``, ``utilization`` as a 0-1 fraction; CLI 2.1.258+ adds
  ``unifiedWindows: {five_hour: {utilization, resetsAt}, seven_day: {...}}``, several windows in one event).
- Codex rollout JSONL ``token_count`` events (``rate_limits.{primary,secondary,tertiary}`` with
  ``used_percent``, ``window_minutes``, ``resets_at`` epoch s or ``resets_in_seconds``).
- Codex's usage-limit 429: body ``error.{type, resets_at, resets_in_seconds}`` and ``x-codex-*`` headers.

Rules: windows are named by their length (``window_name``), never by their slot; percent is 0-100 and values
above 100 are kept up to 10000; ``resets_at`` is UTC, tz-aware, truncated to the second, between 2000 and
2100; a null or missing window is absent from ``Usage.windows`` (never 0 %); unknown keys are ignored; a
malformed or out-of-range value (NaN, 1e999, a negative percent or length, year 9999) raises
``UsageParseError`` whose message names the field (values themselves are never echoed) - never another
exception.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from controller.domain.types import WINDOW_FIVE_HOUR, WINDOW_MONTHLY, WINDOW_WEEKLY, Usage, Window

__all__ = [
    "UsageParseError",
    "format_utc",
    "parse_anthropic_usage",
    "parse_codex_429",
    "parse_openai_usage",
    "parse_rate_limit_event",
    "parse_rate_limit_event_usage",
    "parse_token_count",
    "usage_to_json",
    "window_name",
]

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


def parse_anthropic_usage(payload: dict[str, Any], now: datetime) -> Usage:
    """Parse Anthropic's OAuth usage endpoint (``GET /api/oauth/usage``, as Claude Code 2.1.x reads it).

    Args:
        payload: the JSON body in either shape, or both together:
            legacy ``{"five_hour": {"utilization": 37.0, "resets_at": "2026-…+00:00"}, "seven_day": {...},
            "seven_day_opus": null, "extra_usage": {...}}``;
            newer ``{"limits": [{"kind": "session" | "weekly_all" | "weekly_scoped", "percent": 34,
            "resets_at": "2026-08-15T07:29:59.821118+02:00", "scope": null | {"model": {...}}, ...}]}``.
        now: the instant the body was received; becomes ``Usage.read_at`` (UTC).

    Returns:
        Usage with ``five_hour`` (``five_hour`` / ``limits[kind=session]``) and ``weekly`` (``seven_day`` /
        ``limits[kind=weekly_all]``) when present and non-null; percent 0-100 as given (> 100 kept). When both
        shapes name a window the more used one is kept. Per-model windows (``seven_day_opus``…, ``limits[]``
        entries of kind ``weekly_scoped`` or with a ``scope``) and ``extra_usage`` are not included: a model's
        window never stands for the account's.

    Raises:
        UsageParseError: a window is not an object, ``utilization``/``percent`` not a number or out of range,
            ``resets_at`` not ISO 8601 or outside 2000-2100, ``limits`` not a list.
    """
    payload = _require_dict(payload, "payload")
    windows: dict[str, Window] = {}
    for key, length in _ANTHROPIC_WINDOWS.items():
        w = _obj(payload.get(key), key)
        if w is None:
            continue
        pct = _percent(w.get("utilization"), f"{key}.utilization")
        if pct is None:
            continue
        _put(windows, Window(window_name(length), pct, _instant(w.get("resets_at"), f"{key}.resets_at")))
    limits = payload.get("limits")
    if limits is not None and not isinstance(limits, list):
        raise UsageParseError("limits", f"expected a list, got {type(limits).__name__}")
    for n, entry in enumerate((limits or [])[:64]):
        field = f"limits[{n}]"
        entry = _obj(entry, field)
        if entry is None:
            continue
        kind = entry.get("kind")
        name = _LIMIT_KINDS.get(kind) if isinstance(kind, str) else None
        if name is None or entry.get("scope") not in (None, {}):
            continue  # weekly_scoped or another model-scoped entry: not the account's window
        pct = _percent(entry.get("percent", entry.get("utilization")), f"{field}.percent")
        if pct is None:
            continue
        _put(windows, Window(name, pct, _instant(entry.get("resets_at"), f"{field}.resets_at")))
    return Usage(windows=windows, read_at=_utc(now))


def parse_openai_usage(payload: dict[str, Any], now: datetime) -> Usage:
    """Parse ChatGPT's usage endpoint (``GET /backend-api/wham/usage``, as Codex CLI 0.169 reads it).

    Args:
        payload: e.g. ``{"plan_type": "plus", "rate_limit": {"primary_window": {"used_percent": 27,
            "limit_window_seconds": 18000, "reset_after_seconds": 13140, "reset_at": 1782770922},
            "secondary_window": {...} | null}}``.
        now: the instant the body was received (UTC); ``Usage.read_at``, and the base of
            ``reset_after_seconds`` when ``reset_at`` is absent.

    Returns:
        Usage with windows named by ``limit_window_seconds`` (``window_name``), never by slot: Pro/prolite
        plans put the weekly window in ``primary_window``. ``used_percent`` is percent 0-100.

    Raises:
        UsageParseError: naming e.g. ``rate_limit.primary_window.limit_window_seconds``.
    """
    payload = _require_dict(payload, "payload")
    now = _utc(now)
    windows: dict[str, Window] = {}
    rl = _obj(payload.get("rate_limit"), "rate_limit")
    if rl is not None:
        for slot in _SLOTS:
            field = f"rate_limit.{slot}_window"
            w = _obj(rl.get(f"{slot}_window"), field)
            if w is None:
                continue
            pct = _percent(w.get("used_percent"), f"{field}.used_percent")
            if pct is None:
                continue
            length = _seconds_of(w.get("limit_window_seconds"), f"{field}.limit_window_seconds")
            resets_at = _epoch(w.get("reset_at"), f"{field}.reset_at")
            if resets_at is None:
                after = _number(w.get("reset_after_seconds"), f"{field}.reset_after_seconds")
                if after is not None:
                    resets_at = _after(now, after, f"{field}.reset_after_seconds")
            _put(windows, Window(window_name(length), pct, resets_at))
    return Usage(windows=windows, read_at=now)


def parse_rate_limit_event(payload: dict[str, Any]) -> tuple[bool, Window]:
    """Parse Claude Code's ``rate_limit_event`` (``claude -p --output-format stream-json --verbose``, 2.1.x).

    Args:
        payload: the whole event ``{"type": "rate_limit_event", "rate_limit_info": {"status": "rejected" |
            "allowed" | "allowed_warning", "resetsAt": <epoch s>, "rateLimitType": "five_hour" | "seven_day" …,
            "utilization": <0-1 fraction, optional>}}`` or the ``rate_limit_info`` object itself.

    Returns:
        ``(limited, window)``: ``limited`` is True only for ``status == "rejected"`` (a warning is not a
        stop). ``window.name`` from ``rateLimitType`` ("five_hour", "weekly"; unknown types as given);
        ``window.utilization`` is the fraction scaled to percent (> 100 kept); when the event carries none,
        100.0 if rejected else 0.0 (the event only says "allowed"). ``window.resets_at`` UTC or None.

    Raises:
        UsageParseError: missing ``rate_limit_info``/``status``/``rateLimitType`` or malformed values.
    """
    payload = _require_dict(payload, "payload")
    if "rate_limit_info" in payload:
        info = _obj(payload.get("rate_limit_info"), "rate_limit_info")
        prefix = "rate_limit_info."
    else:
        info, prefix = payload, ""
    if info is None:
        raise UsageParseError("rate_limit_info", "missing")
    status = info.get("status")
    if not isinstance(status, str) or not status:
        raise UsageParseError(f"{prefix}status", "missing or not a string")
    rtype = info.get("rateLimitType")
    if not isinstance(rtype, str) or not rtype:
        raise UsageParseError(f"{prefix}rateLimitType", "missing or not a string")
    limited = status == "rejected"
    pct = _percent(info.get("utilization"), f"{prefix}utilization", fraction=True)
    if pct is None:
        pct = 100.0 if limited else 0.0
    resets_at = _epoch(info.get("resetsAt"), f"{prefix}resetsAt")
    return limited, Window(_EVENT_WINDOW_TYPES.get(rtype, rtype), pct, resets_at)


def parse_rate_limit_event_usage(payload: dict[str, Any], read_at: datetime | None = None) -> tuple[bool, Usage]:
    """Every window a ``rate_limit_event`` carries (Claude Code 2.1.x stream-json; 2.1.258+ adds several).

    Args:
        payload: as for :func:`parse_rate_limit_event`; ``rate_limit_info.unifiedWindows`` may be an object
            ``{"five_hour": {"utilization": 0.37, "resetsAt": <epoch s>}, "seven_day": {...}}`` or a list of
            ``{"rateLimitType"|"type": …, "utilization", "resetsAt"}``.
        read_at: becomes ``Usage.read_at``.

    Returns:
        ``(limited, usage)``: ``limited`` as in :func:`parse_rate_limit_event`; ``usage.windows`` holds every
        window of ``unifiedWindows`` (fractions scaled to percent, > 100 kept) and the event's own
        ``rateLimitType`` window (100 % when rejected) when ``unifiedWindows`` lacks it. Per-model types keep
        their own names (``weekly_opus``), never ``weekly``.

    Raises:
        UsageParseError: as :func:`parse_rate_limit_event`, or naming e.g.
            ``rate_limit_info.unifiedWindows.seven_day.utilization``.
    """
    limited, main = parse_rate_limit_event(payload)
    info = payload.get("rate_limit_info", payload) if isinstance(payload, dict) else {}
    prefix = "rate_limit_info." if isinstance(payload, dict) and "rate_limit_info" in payload else ""
    raw = info.get("unifiedWindows") if isinstance(info, dict) else None
    items: list[tuple[str, Any]] = []
    if isinstance(raw, dict):
        items = [(str(k), v) for k, v in list(raw.items())[:16]]
    elif isinstance(raw, list):
        for n, v in enumerate(raw[:16]):
            v = _obj(v, f"{prefix}unifiedWindows[{n}]")
            if v is not None:
                items.append((str(v.get("rateLimitType") or v.get("type") or ""), v))
    elif raw is not None:
        raise UsageParseError(f"{prefix}unifiedWindows", "expected an object or a list")
    windows: dict[str, Window] = {}
    for key, value in items:
        field = f"{prefix}unifiedWindows.{key}"
        w = _obj(value, field)
        if w is None or not key:
            continue
        pct = _percent(w.get("utilization"), f"{field}.utilization", fraction=True)
        if pct is None:
            continue
        _put(windows, Window(_EVENT_WINDOW_TYPES.get(key, key), pct, _epoch(w.get("resetsAt"), f"{field}.resetsAt")))
    if main.name not in windows and (limited or info.get("utilization") is not None):
        windows[main.name] = main
    elif limited:
        old = windows[main.name]
        windows[main.name] = Window(old.name, max(old.utilization, 100.0), old.resets_at or main.resets_at)
    return limited, Usage(windows=windows, read_at=_utc(read_at) if read_at is not None else None)


def parse_token_count(payload: dict[str, Any]) -> Usage:
    """Parse a Codex rollout ``token_count`` event (``~/.codex/sessions/**.jsonl``, Codex CLI 0.1xx).

    Args:
        payload: the rollout line ``{"timestamp": "…Z", "type": "event_msg", "payload": {"type":
            "token_count", "rate_limits": {"primary": {"used_percent": 7.0, "window_minutes": 300,
            "resets_at": <epoch s>}, "secondary": {...}, "tertiary": {...}} | null}}``, or its inner
            ``payload`` object.

    Returns:
        Usage with windows named by ``window_minutes`` (never by slot), percent 0-100; ``read_at`` is the
        line's ``timestamp`` (UTC) when present, which is also the base of ``resets_in_seconds``. Null
        ``rate_limits`` (common, openai/codex#14880) gives a Usage without windows ("no data").

    Raises:
        UsageParseError: naming e.g. ``payload.rate_limits.primary.window_minutes``.
    """
    payload = _require_dict(payload, "payload")
    read_at = None
    if "timestamp" in payload:
        read_at = _instant(payload.get("timestamp"), "timestamp")
    inner, prefix = payload, ""
    if "rate_limits" not in payload and isinstance(payload.get("payload"), dict):
        inner, prefix = payload["payload"], "payload."
    windows: dict[str, Window] = {}
    rl = _obj(inner.get("rate_limits"), f"{prefix}rate_limits")
    if rl is not None:
        for slot in _SLOTS:
            field = f"{prefix}rate_limits.{slot}"
            w = _obj(rl.get(slot), field)
            if w is None:
                continue
            pct = _percent(w.get("used_percent"), f"{field}.used_percent")
            if pct is None:
                continue
            minutes = _number(w.get("window_minutes"), f"{field}.window_minutes")
            if minutes is None:
                raise UsageParseError(f"{field}.window_minutes", "missing (windows are named by their length)")
            if minutes <= 0 or minutes * 60 > _MAX_LENGTH_S:
                raise UsageParseError(f"{field}.window_minutes", "expected a positive length of at most 400 days")
            resets_at = _epoch(w.get("resets_at"), f"{field}.resets_at")
            if resets_at is None and read_at is not None:
                after = _number(w.get("resets_in_seconds"), f"{field}.resets_in_seconds")
                if after is not None:
                    resets_at = _after(read_at, after, f"{field}.resets_in_seconds")
            _put(windows, Window(window_name(int(minutes * 60)), pct, resets_at))
    return Usage(windows=windows, read_at=read_at)


def parse_codex_429(
    body: dict[str, Any], headers: Mapping[str, str], now: datetime | None = None
) -> tuple[bool, datetime | None, Usage]:
    """Parse Codex's usage-limit 429 (ChatGPT backend ``/backend-api/codex/responses``, Codex CLI 0.169).

    Args:
        body: ``{"error": {"type": "usage_limit_reached", "plan_type": "plus", "resets_at": <epoch s>,
            "resets_in_seconds": <s>, …}}``.
        headers: response headers (any case): ``x-codex-{primary,secondary,tertiary}-{used-percent,
            window-minutes, reset-at, reset-after-seconds}``; ``used-percent`` is percent 0-100.
        now: receive instant (UTC), the base of ``*-reset-after-seconds`` / ``resets_in_seconds`` when no
            epoch is given; also ``Usage.read_at``. Optional.

    Returns:
        ``(limited, resets_at, usage)``: ``limited`` True only for ``error.type == "usage_limit_reached"``
        (a reset lifts it); ``resets_at`` from the body, else the latest reset of the windows at ≥ 100 %
        (with several windows exhausted the latest reset wins), else None; ``usage`` holds the header
        windows named by ``window-minutes``.

    Raises:
        UsageParseError: naming the field, e.g. ``error.resets_at`` or ``x-codex-primary-used-percent``.
    """
    body = _require_dict(body if body is not None else {}, "body")
    hdr = {str(k).lower(): v for k, v in (headers or {}).items()}
    now_utc = _utc(now) if now is not None else None

    windows: dict[str, Window] = {}
    for slot in _SLOTS:
        p = f"x-codex-{slot}-"
        pct = _percent(hdr.get(p + "used-percent"), p + "used-percent", allow_str=True)
        if pct is None:
            continue
        minutes = _number(hdr.get(p + "window-minutes"), p + "window-minutes", allow_str=True)
        if minutes is None:
            continue  # cannot be named by its length; never guess from the slot
        if minutes <= 0 or minutes * 60 > _MAX_LENGTH_S:
            raise UsageParseError(p + "window-minutes", "expected a positive length of at most 400 days")
        resets_at = _epoch(hdr.get(p + "reset-at"), p + "reset-at", allow_str=True)
        if resets_at is None and now_utc is not None:
            after = _number(hdr.get(p + "reset-after-seconds"), p + "reset-after-seconds", allow_str=True)
            if after is not None:
                resets_at = _after(now_utc, after, p + "reset-after-seconds")
        _put(windows, Window(window_name(int(minutes * 60)), pct, resets_at))

    err = _obj(body.get("error"), "error") or {}
    etype = err.get("type")
    if etype is not None and not isinstance(etype, str):
        raise UsageParseError("error.type", "expected a string")
    limited = etype == "usage_limit_reached"
    resets_at = _epoch(err.get("resets_at"), "error.resets_at")
    if resets_at is None and now_utc is not None:
        after = _number(err.get("resets_in_seconds"), "error.resets_in_seconds")
        if after is not None:
            resets_at = _after(now_utc, after, "error.resets_in_seconds")
    if resets_at is None and limited:
        exhausted = [w.resets_at for w in windows.values() if w.utilization >= 100.0 and w.resets_at]
        if exhausted:
            resets_at = max(exhausted)
    return limited, resets_at, Usage(windows=windows, read_at=now_utc)


_STATUSLINE_WINDOWS = {"five_hour": "five_hour", "seven_day": "weekly"}


def parse_statusline(payload: dict[str, Any], read_at: datetime | None = None) -> Usage:
    """Parse the JSON Claude Code pipes to its statusline command (Claude Code 2.1.x, saved by the
    box's statusline helper): ``{"rate_limits": {"five_hour": {"used_percentage": 42, "resets_at":
    <epoch s>}, "seven_day": {...}}, ...}``.

    Returns:
        Usage with `five_hour` / `weekly` windows in percent 0-100 (values above 100 kept) and
        `read_at` = the given instant (the file's modification time). No `rate_limits` (before the
        first reply) gives a Usage without windows ("no data", not 0 %).

    Raises:
        UsageParseError: naming e.g. ``rate_limits.five_hour.used_percentage``.
    """
    payload = _require_dict(payload, "statusline")
    windows: dict[str, Window] = {}
    rl = _obj(payload.get("rate_limits"), "rate_limits")
    for key, name in _STATUSLINE_WINDOWS.items():
        w = _obj((rl or {}).get(key), f"rate_limits.{key}")
        if w is None:
            continue
        pct = _percent(w.get("used_percentage"), f"rate_limits.{key}.used_percentage")
        if pct is None:
            continue
        _put(windows, Window(name, pct, _epoch(w.get("resets_at"), f"rate_limits.{key}.resets_at")))
    return Usage(windows=windows, read_at=read_at)
