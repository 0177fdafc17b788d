"""Layered detection (DESIGN §3): structured data first, then line patterns. Pure.

`merge` combines a tab's screen `Detection` with a structured usage reading of the same account
(Claude Code's statusline input, Codex's rollout `token_count` events, the provider usage API):

* a limit line whose reset the structured data knows exactly gets that instant (agents print
  minute-rounded local times);
* an idle or unrecognised tab whose account has a window at 100 % (reset still ahead) is rate
  limited even without a line (e.g. the turn ended without a banner);
* a warning or a working agent is left as the screen says.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from controller.domain.types import Detection, LimitKind, TabState, Usage, plausible_reset
from controller.redact import redact

__all__ = ["exhausted", "last_lines", "merge", "redact"]

_LABEL = {"five_hour": "5-hour", "weekly": "weekly"}


def exhausted(usage: Usage | None, now: datetime) -> tuple[str, datetime] | None:
    """(window, reset) of the exhausted window with the latest reset still ahead, or None."""
    if usage is None:
        return None
    hits = [(w.name, w.resets_at) for w in usage.windows.values()
            if w.utilization >= 100 and w.resets_at is not None and plausible_reset(w.resets_at, now) is not None
            and w.resets_at > now]
    return max(hits, key=lambda h: h[1]) if hits else None


def merge(det: Detection, usage: Usage | None, source: str, now: datetime) -> Detection:
    """Combine a screen detection with structured usage data from `source` (e.g. "statusline").

    Args:
        det: what the screen says.
        usage: the structured reading, or None.
        source: name of the structured source, recorded in `detected_by`.
        now: current instant (UTC).
    """
    hit = exhausted(usage, now)
    if hit is None:
        return det
    window, reset = hit
    if det.state == TabState.RATE_LIMITED and det.kind == LimitKind.USAGE:
        return replace(det, resets_at=reset, window=det.window or window, reset_relative=False,
                       detected_by=f"structured:{source}+{det.detected_by}")
    if det.state in (TabState.IDLE, TabState.UNKNOWN):
        return Detection(TabState.RATE_LIMITED, LimitKind.USAGE, reset, window, prompt_text=det.prompt_text,
                         evidence=f"{source}: {_LABEL.get(window, window)} window at 100 %",
                         detected_by=f"structured:{source}")
    return det


def last_lines(screen: str, n: int = 5, width: int = 160) -> str:
    """The last `n` non-empty lines of a screen, each redacted as a whole and THEN cut to `width`
    characters (a token cut by the width is still masked)."""
    lines = [ln for ln in screen.splitlines() if ln.strip()][-n:] if n > 0 else []
    return " | ".join(redact(ln.rstrip())[:width] for ln in lines)
