"""Parsers of the usage the agent CLIs write themselves (the parsers of each adapter's ``structured_sources``,
run on what :func:`controller.service.boxfiles.read_structured` read from the box, and used by
``agentbox-controller detect``). Pure, no I/O.

Formats mirrored (see tests/fixtures/corpus/usage-payloads.jsonl and field-pitfalls §8):

- Claude Code ``--output-format stream-json`` ``rate_limit_event`` (``rate_limit_info.status``,
  ``resetsAt`` epoch s, ``rateLimitType``, ``utilization`` as a 0-1 fraction; CLI 2.1.258+ adds
  ``unifiedWindows: {five_hour: {utilization, resetsAt}, seven_day: {...}}``, several windows in one event);
  the same object is recorded in its transcripts' API-error entries.
- Claude Code's statusline input (``rate_limits``, 2.1.x), saved by the box image's statusline helper.
- Codex rollout JSONL ``token_count`` events (``rate_limits.{primary,secondary,tertiary}`` with
  ``used_percent``, ``window_minutes``, ``resets_at`` epoch s or ``resets_in_seconds``).

The rules (windows named by length, bounds, ``UsageParseError`` naming the field) are
:mod:`controller.domain.usagejson`'s.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from controller.agents.adapter import SourceUnreadable
from controller.domain.types import Usage, Window
from controller.domain.usagejson import (
    _EVENT_WINDOW_TYPES,
    _MAX_LENGTH_S,
    _SLOTS,
    UsageParseError,
    window_name,
    _utc,
    _after,
    _obj,
    _number,
    _percent,
    _epoch,
    _instant,
    _put,
    _require_dict,
)

__all__ = ["parse_rate_limit_event", "parse_rate_limit_event_usage", "parse_statusline", "parse_token_count",
           "rollout_output_usage", "statusline_output_usage", "transcript_output_usage", "transcript_usage"]


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


# ---------------------------------------------------------------------- the outputs of the box reads
# Each takes the whole (bounded) output of a structured source's argv (see the adapters) and the instant of
# the read; None is "no data"; malformed data raises SourceUnreadable with a message naming no value.


def statusline_output_usage(stdout: str, now: datetime) -> Usage | None:
    """Usage from the statusline read: the file's modification time (epoch s, one line), then the JSON
    Claude Code piped to the box's statusline helper (:func:`parse_statusline`). It counts only when a
    window is used up (100 % or more): below that the screen and the usage API say more.

    Raises:
        SourceUnreadable: "unreadable usage (<field>: <problem>)", "not a JSON object" or "unreadable
            modification time".
    """
    first, _, rest = stdout.partition("\n")
    try:
        read_at = datetime.fromtimestamp(int(first.strip()), timezone.utc)
    except ValueError:
        raise SourceUnreadable("not a JSON object") from None  # as before: no header is no statusline
    except (OverflowError, OSError):
        raise SourceUnreadable("unreadable modification time") from None
    try:
        usage = parse_statusline(json.loads(rest), read_at)
    except UsageParseError as exc:  # a ValueError too: first
        raise SourceUnreadable(f"unreadable usage ({exc})") from None
    except (ValueError, RecursionError):
        raise SourceUnreadable("not a JSON object") from None
    if any(w.utilization >= 100 for w in usage.windows.values()):
        return usage
    return None


def transcript_usage(line: str, read_at: datetime) -> Usage | None:
    """Usage from one Claude Code transcript API-error entry (Claude Code 2.1.328 records a usage-limit 429
    with ``apiErrorParams.rate_limit_info``, the shape of stream-json's ``rate_limit_event``; older entries
    ``quotaLimits``): a rejected one makes its window 100 % until ``resetsAt``; anything else (not JSON,
    not rejected, malformed) is no data. Never raises."""
    try:
        entry = json.loads(line)
        info = (entry.get("apiErrorParams") or {}).get("rate_limit_info") or entry.get("quotaLimits")
        if not isinstance(info, dict):
            return None
        limited, window = parse_rate_limit_event({"type": "rate_limit_event", "rate_limit_info": info})
    except (ValueError, AttributeError, RecursionError, UsageParseError):
        return None
    if not limited:
        return None
    return Usage({window.name: replace(window, utilization=max(window.utilization, 100.0))}, read_at=read_at)


def transcript_output_usage(stdout: str, now: datetime) -> Usage | None:
    """Usage from the transcript read: its last line is the newest transcript's last API-error entry
    (:func:`transcript_usage`, read at ``now``); an empty output is no data. Never raises."""
    if not stdout.strip():
        return None
    return transcript_usage(stdout.strip().splitlines()[-1], now)


def rollout_output_usage(stdout: str, now: datetime) -> Usage | None:
    """Usage from the rollout read: its last line is the newest rollout's last ``token_count`` event
    (:func:`parse_token_count`; ``read_at`` is the event's timestamp, ``now`` is not used); an empty output
    is no data. A Usage without windows (null ``rate_limits``) is returned as it is.

    Raises:
        SourceUnreadable: "unreadable usage (<field>: <problem>)" or "the last token_count event is not JSON".
    """
    if not stdout.strip():
        return None
    try:
        return parse_token_count(json.loads(stdout.strip().splitlines()[-1]))
    except UsageParseError as exc:  # a ValueError too: first
        raise SourceUnreadable(f"unreadable usage ({exc})") from None
    except (ValueError, RecursionError):
        raise SourceUnreadable("the last token_count event is not JSON") from None
