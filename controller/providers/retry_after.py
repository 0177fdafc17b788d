"""The one `Retry-After` parser (RFC 9110 §10.2.3), shared by every HTTP client of the controller
(usage reads, token refreshes, identity checks, webhooks). Pure: ``now`` is passed in."""

from __future__ import annotations

import email.utils
import math
from datetime import datetime, timezone

__all__ = ["MAX_RETRY_AFTER_S", "parse_retry_after"]

MAX_RETRY_AFTER_S = 7 * 24 * 3600.0
"""Longest wait accepted (seconds): a value beyond a week is clamped to it (a provider's typo or a
hostile header must not park a client forever, nor overflow a date)."""


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds to wait, 0 to `MAX_RETRY_AFTER_S`.

    Args:
        value: the header value: delay-seconds (``"120"``; decimals accepted) or an HTTP-date
            (``"Wed, 21 Oct 2026 07:28:00 GMT"``, relative to ``now``).
        now: the current UTC instant (tz-aware).
    Returns:
        Seconds, or None when absent or unparseable (``"soon"``, ``"nan"``, ``"inf"``, empty).
    """
    if value is None:
        return None
    v = value.strip()[:64]
    if not v:
        return None
    try:
        secs = float(v)
    except ValueError:
        secs = None
    if secs is not None:
        if math.isnan(secs):
            return None
        return min(MAX_RETRY_AFTER_S, max(0.0, secs)) if math.isfinite(secs) else (
            MAX_RETRY_AFTER_S if secs > 0 else 0.0)
    try:
        dt = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return min(MAX_RETRY_AFTER_S, max(0.0, (dt - now).total_seconds()))
