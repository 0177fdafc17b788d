"""The armed continues of this process by their instant, for a write budget that grows with them.

An armed continue types its text `send_pause_s` + the write budget before its instant and writes its Enter step
to status in between (`controller.service.tabsend`). Continues armed for the same instant (every box of the
subscriptions that reset at one minute) write in the same window, so the budget of an instant grows with the
continues armed for it, and for the instants a few seconds from it, here (`controller.domain.resume.write_budget_s`). Each armed continue joins its instant
when it starts to wait; when the budget moves (by a step), the continues already waiting are told once
(`moved`), not at every join, so 500 joins cost a few wake-ups each, not 500.

Touches nothing outside itself: counts and asyncio Events, the instants passed in (UTC).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Callable

from controller.domain.resume import write_budget_s

KEEP_S = 60.0
"""An instant is forgotten this many seconds after it passed (at the next join of another instant)."""

QUIET_AFTER_S = 2.0
"""Seconds after an armed instant that its burst lasts for work that can wait (`ArmedInstants.busy_for`)."""


class ArmedInstants:
    """Counts of the armed continues of this process per instant, and each instant's write budget.

    The budget of an instant counts the continues armed for it and for the instants less than `near_s`
    seconds from it (their typing and writes share the same seconds: resets a few seconds apart, as the
    usage API may give them, are one burst for the API server).

    Args:
        budget: sends -> seconds (`write_budget_s` with the operator's settings).
        near_s: seconds; instants closer than this count together (the most budget: `from_settings`).
    """

    def __init__(self, budget: Callable[[int], float], near_s: float = 0.0) -> None:
        self.budget = budget
        self.near_s = near_s
        self._count: dict[datetime, int] = {}
        self._moved: dict[datetime, asyncio.Event] = {}

    @classmethod
    def from_settings(cls, settings: object) -> "ArmedInstants":
        """With `resume_write_budget_s`, `resume_write_budget_per_send_s` and `resume_write_budget_max_s`
        (seconds) of the operator settings, read at each call (a test may change them); instants closer than
        `resume_write_budget_max_s` count together."""
        def budget(sends: int) -> float:
            return write_budget_s(sends, float(getattr(settings, "resume_write_budget_s")),
                                  float(getattr(settings, "resume_write_budget_per_send_s", 0.0)),
                                  float(getattr(settings, "resume_write_budget_max_s", 0.0)))
        return cls(budget, float(getattr(settings, "resume_write_budget_max_s", 0.0)))

    def join(self, instant: datetime, now: datetime) -> None:
        """One more continue armed for `instant` (UTC); `now` (UTC) forgets the instants passed `KEEP_S` ago.
        The continues already waiting for `instant` or an instant near it are told (`moved`) when its budget
        changed."""
        for old in [t for t in self._count if t < now - timedelta(seconds=KEEP_S)]:
            self._count.pop(old, None)
            event = self._moved.pop(old, None)
            if event is not None:
                event.set()
        waiting = [t for t in self._moved if self._near(t, instant)]
        before = {t: self.budget_s(t) for t in waiting}
        self._count[instant] = self._count.get(instant, 0) + 1
        for t in waiting:
            if self.budget_s(t) != before[t]:
                self._moved.pop(t).set()

    def sends(self, instant: datetime) -> int:
        """The continues armed so far for `instant` and the instants near it."""
        return sum(n for t, n in self._count.items() if self._near(t, instant))

    def budget_s(self, instant: datetime) -> float:
        """The write budget of `instant`, seconds (the least one when nothing joined it or an instant near it)."""
        return self.budget(self.sends(instant))

    def busy_for(self, now: datetime, lead_s: float = 1.0, after_s: float = QUIET_AFTER_S) -> float:
        """Seconds until the burst around an armed instant ends, 0.0 when `now` (UTC) is in none.

        A burst is the window of an instant with continues armed for it: from its typing (`budget_s` +
        `lead_s` seconds before it: the send pause and the text) until `after_s` seconds after it (the Enters
        and the agents' redraws). Work that can wait a few seconds (a periodic usage read far from any
        threshold) keeps out of it, so the API server and the box streams carry the Enters alone."""
        end = 0.0
        for t, n in self._count.items():
            if n <= 0:
                continue
            start = t - timedelta(seconds=self.budget_s(t) + lead_s)
            stop = t + timedelta(seconds=after_s)
            if start <= now < stop:
                end = max(end, (stop - now).total_seconds())
        return end

    def moved(self, instant: datetime) -> asyncio.Event:
        """An Event set once the budget of `instant` changes (a new one after that)."""
        event = self._moved.get(instant)
        if event is None:
            event = self._moved[instant] = asyncio.Event()
        return event

    def _near(self, a: datetime, b: datetime) -> bool:
        return a == b or abs((a - b).total_seconds()) < self.near_s
