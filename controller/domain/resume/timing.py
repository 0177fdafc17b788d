"""When resume planning acts: its tunables (`ResumeConfig`), the instant the usage is re-read before a
resume (`prepare_at`), the delay to the watcher's next pass (`next_pass_in`) and the write budget of the armed
continues due at one instant (`write_budget_s`). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable


@dataclass(frozen=True)
class ResumeConfig:
    """Tunables of resume planning (seconds).

    Attributes:
        margin_s: delay after the reset instant before resuming (0-30).
        human_idle_s: a tab a human typed in during this many seconds is left alone.
        auto_continue_grace_s: time after the reset given to Claude Code's native continue.
        settle_s: after a send, the same limit line seen within this time is the old one.
        max_attempts: resumes for consecutive limit events without progress before asking a human.
        unknown_reset_recheck_s: when neither screen nor usage gives a reset, look again after this.
        prepare_s: how long before the resume instant the usage is re-read and the continue armed
            (0-60; `prepare_at` gives the exact rule; 0: re-read at the resume instant, send at once).
    """

    margin_s: float = 10.0
    human_idle_s: float = 60.0
    auto_continue_grace_s: float = 120.0
    settle_s: float = 20.0
    max_attempts: int = 5
    unknown_reset_recheck_s: float = 300.0
    prepare_s: float = 8.0

    def __post_init__(self) -> None:
        if not 0 <= self.margin_s <= 30:
            raise ValueError("margin_s must be within 0-30 seconds")
        if not 0 <= self.prepare_s <= 60:
            raise ValueError("prepare_s must be within 0-60 seconds")


PREPARE_AFTER_RESET_S = 1.0
"""The usage is never re-read for a resume earlier than this many seconds after the reset instant (the
provider's window must have reset by then; a read before would see the old window)."""


def prepare_at(resume_at: datetime, resets_at: datetime | None, cfg: ResumeConfig) -> datetime:
    """The instant the usage is re-read (and the continue armed) for a resume due at `resume_at` (UTC).

    Rule: `resume_at - prepare_s`, but never before `resets_at + PREPARE_AFTER_RESET_S` (1 s) and never
    after `resume_at`. Without a known reset (`resets_at` None: a resume requested by annotation, after a
    switch, or with no reset on screen and in usage) or with `prepare_s` 0 it is `resume_at` itself: the
    read happens at the resume instant and the continue is sent at once, as before arming existed.
    With the defaults (margin 10 s, prepare 8 s) the read comes 2 s after the reset and Enter lands at
    reset + 10 s; with a margin of 1 s (or less) the rule gives the resume instant again.
    """
    if cfg.prepare_s <= 0 or resets_at is None:
        return resume_at
    earliest = resets_at + timedelta(seconds=PREPARE_AFTER_RESET_S)
    return min(resume_at, max(resume_at - timedelta(seconds=cfg.prepare_s), earliest))


def next_pass_in(wakes: Iterable[datetime | None], now: datetime, scan_interval_s: float) -> float:
    """Seconds until the watcher's next pass.

    Args:
        wakes: the plans' `wake_at` instants (UTC; None = no deadline of its own).
        now: current instant (UTC).
        scan_interval_s: the regular scan period (the answer is never longer).
    Returns:
        The time to the earliest future wake-up, at most `scan_interval_s`. An instant at or before
        `now` (an action that was due and has been handled, or a plan that forgot to move its
        deadline) counts as `min(1, scan_interval_s)` seconds, never 0: a state that does not
        change is never re-handled in a busy loop.
    """
    floor = min(1.0, scan_interval_s)
    delay = scan_interval_s
    for at in wakes:
        if at is None:
            continue
        ahead = (at - now).total_seconds()
        delay = min(delay, ahead if ahead > 0 else floor)
    return delay


WRITE_BUDGET_STEP_S = 0.25
"""The write budget grows in steps of this many seconds (`write_budget_s`): the armed sends already waiting
for an instant are told again only when it moves by a step, not at every send armed after them."""


def write_budget_s(sends: int, base_s: float, per_send_s: float, max_s: float) -> float:
    """Seconds budgeted between the typing of an armed continue's text (after the send pause) and its Enter,
    for the status writes of the Enter steps of `sends` armed continues due at the same instant in this
    process (each a write to the API server, all in that window).

    Rule: `sends * per_send_s` rounded up to a `WRITE_BUDGET_STEP_S` step, never less than `base_s` and never
    more than `max(base_s, max_s)` (the text waits in the prompt at most that plus the send pause). With the
    defaults (2 s, 8 ms, 6 s): up to 250 sends 2 s, 500 sends 4 s, 750 and more 6 s.
    """
    if sends <= 0 or per_send_s <= 0:
        return base_s
    grown = WRITE_BUDGET_STEP_S * math.ceil(round(sends * per_send_s / WRITE_BUDGET_STEP_S, 6))
    return max(base_s, min(grown, max_s))
