"""Subscription state from its usage windows (pure). DESIGN §2: Available | Exhausted |
Reserved | Disconnected | Unknown; threshold = 100 - reserve."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from controller.domain.types import WINDOW_FIVE_HOUR, WINDOW_WEEKLY, Usage

_LABEL = {WINDOW_FIVE_HOUR: "5-hour", WINDOW_WEEKLY: "weekly"}


@dataclass(frozen=True)
class SubscriptionVerdict:
    """State of a subscription and the sentence explaining it.

    `until`: the reset that ends Exhausted/Reserved (UTC) or None.
    """

    state: str
    until: datetime | None
    message: str


def threshold_sentence(five_hour_reserve: int, weekly_reserve: int) -> str:
    """The reserve in plain words, e.g. "Boxes stop at 80% of the 5-hour limit; the weekly limit has no reserve."."""
    def part(label: str, reserve: int) -> str:
        return f"at {100 - reserve}% of the {label} limit" if reserve else ""
    five, week = part("5-hour", five_hour_reserve), part("weekly", weekly_reserve)
    if five and week:
        return f"Boxes stop {five} and {week}."
    if five:
        return f"Boxes stop {five}; the weekly limit has no reserve."
    if week:
        return f"Boxes stop {week}; the 5-hour limit has no reserve."
    return "No reserve: boxes run until a limit is reached."


def evaluate(usage: Usage | None, five_hour_reserve: int, weekly_reserve: int, now: datetime) -> SubscriptionVerdict:
    """State of a subscription from its last read.

    Args:
        usage: the last good read, or None when never read.
        five_hour_reserve, weekly_reserve: percent 0-95 kept for the human.
        now: current instant (UTC).
    """
    if usage is None or usage.read_at is None:
        return SubscriptionVerdict("Unknown", None, "Usage not read yet")
    exhausted = [w for w in usage.windows.values()
                 if w.utilization >= 100 and (w.resets_at is None or w.resets_at > now)]
    if exhausted:
        last = max(exhausted, key=lambda x: x.resets_at or now)
        label = _LABEL.get(last.name, last.name)
        when = f", resets {last.resets_at:%Y-%m-%d %H:%M} UTC" if last.resets_at else ""
        return SubscriptionVerdict("Exhausted", last.resets_at, f"{label} window at {last.utilization:.0f}%{when}")
    for name, reserve in ((WINDOW_FIVE_HOUR, five_hour_reserve), (WINDOW_WEEKLY, weekly_reserve)):
        w = usage.windows.get(name)
        if reserve and w and w.utilization >= 100 - reserve and (w.resets_at is None or w.resets_at > now):
            label = _LABEL[name]
            until = f"{w.resets_at:%Y-%m-%d %H:%M} UTC" if w.resets_at else "the next reset"
            return SubscriptionVerdict("Reserved", w.resets_at,
                                       f"Reserved until {until}: keeping {reserve}% of the {label} limit")
    return SubscriptionVerdict("Available", None, "Usage below every threshold")


def thresholds(five_hour_reserve: int, weekly_reserve: int) -> dict[str, float]:
    """Utilization (percent) at which each window stops the box: 100 - reserve, or 100."""
    return {WINDOW_FIVE_HOUR: 100.0 - five_hour_reserve, WINDOW_WEEKLY: 100.0 - weekly_reserve}


def next_read_in(usage: Usage, previous: Usage | None, five_hour_reserve: int, weekly_reserve: int,
                 now: datetime, *, near_s: float = 60.0, far_s: float = 300.0, min_s: float = 5.0,
                 band: float = 10.0) -> float:
    """Seconds until a subscription's usage should be read again.

    * about `near_s` when a window is within `band` points of its threshold (the reserve or 100 %);
    * sooner when the burn rate since `previous` predicts the threshold is crossed before then
      (read at 90 % of the predicted time, never sooner than `min_s`);
    * at the next reset instant (+1 s), when that comes first;
    * `far_s` otherwise (the caller adds jitter).

    Args:
        usage: the read just made (read_at set).
        previous: the read before it, or None.
        now: current instant (UTC).
    """
    delay = far_s
    limits = thresholds(five_hour_reserve, weekly_reserve)
    for name, w in usage.windows.items():
        limit = limits.get(name, 100.0)
        gap = limit - w.utilization
        if 0 < gap <= band:
            delay = min(delay, near_s)
        prev = previous.windows.get(name) if previous else None
        if (gap > 0 and prev is not None and previous is not None and previous.read_at and usage.read_at
                and usage.read_at > previous.read_at and (prev.resets_at == w.resets_at)):
            rate = (w.utilization - prev.utilization) / (usage.read_at - previous.read_at).total_seconds()
            if rate > 0:
                delay = min(delay, max(min_s, 0.9 * gap / rate))
    delay = max(min_s, delay)
    for w in usage.windows.values():
        if w.resets_at and w.resets_at > now:
            delay = min(delay, (w.resets_at - now).total_seconds() + 1.0)  # the reset itself is never late
    return delay
