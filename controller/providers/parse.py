"""Parsers of the providers' usage API answers into domain `Usage` / `Window`. Pure, no I/O.

The agents' own usage files (stream-json events, statusline input, Codex rollouts) are parsed in
:mod:`controller.agents.usage_files`; both share :mod:`controller.domain.usagejson`.

Formats mirrored (see tests/fixtures/corpus/usage-payloads.jsonl and field-pitfalls §8):

- Anthropic ``GET /api/oauth/usage`` (what Claude Code 2.1.x's ``/usage`` reads): windows keyed
  ``five_hour`` / ``seven_day``, ``utilization`` already in percent 0-100, ``resets_at`` ISO 8601; the newer
  ``limits[]`` list (``kind: session | weekly_all | weekly_scoped``, ``percent`` 0-100, ``resets_at`` ISO with
  offsets such as ``+02:00``); a ``weekly_scoped`` (per-model) entry never stands for the account's window.
- ChatGPT ``GET /backend-api/wham/usage`` (what Codex CLI 0.169 reads): ``rate_limit.{primary,secondary,
  tertiary}_window`` with ``used_percent`` (0-100), ``limit_window_seconds``, ``reset_at`` (epoch s) or
  ``reset_after_seconds``.
- Codex's usage-limit 429: body ``error.{type, resets_at, resets_in_seconds}`` and ``x-codex-*`` headers.

Rules: :mod:`controller.domain.usagejson` (windows named by length, bounds, ``UsageParseError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.domain.types import Usage, Window
from controller.domain.usagejson import (
    _ANTHROPIC_WINDOWS,
    _LIMIT_KINDS,
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
    _seconds_of,
    _require_dict,
    format_utc,
    usage_to_json,
)

__all__ = [
    "UsageParseError",
    "format_utc",
    "parse_anthropic_usage",
    "parse_codex_429",
    "parse_openai_usage",
    "usage_to_json",
    "window_name",
]


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
