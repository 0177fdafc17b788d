"""What resume planning remembers and answers for one tab: its phase, its record between scans (`TabRecord`),
the plan of a pass (`TabPlan`, `Action`), and the identity of a limit event (`limit_key`, `first_reading`
for the same line read again later). Pure."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from controller.domain.resume.journal import Journal
from controller.domain.types import Detection, TabState


class Phase(str, enum.Enum):
    """Where a tab is in the resume cycle (persisted as TabStatus.state)."""

    WORKING = "Working"
    IDLE = "Idle"
    RATE_LIMITED = "RateLimited"
    AWAITING_INPUT = "AwaitingInput"
    RESUMING = "Resuming"
    NEEDS_ATTENTION = "NeedsAttention"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class TabRecord:
    """What the controller remembers about a tab between scans (mirrors status.tabs[]).

    All instants are UTC. `limit_key` identifies the limit event being handled; `sent_for` the
    event a resume was already sent for; `attempts` counts the resumes actually sent since the
    agent last made progress (one per send, never per scan). `menu_for` is the limit event whose
    rate-limit menu was answered, at `menu_at` (the menu is answered once per limit event).
    """

    name: str
    phase: Phase = Phase.UNKNOWN
    limit_key: str | None = None
    resets_at: datetime | None = None
    resume_at: datetime | None = None
    window: str | None = None
    auto_continue: bool = False
    detected_by: str | None = None
    message: str | None = None
    sent_for: str | None = None
    sent_at: datetime | None = None
    attempts: int = 0
    last_input_at: datetime | None = None
    stopped_by_reserve: bool = False
    journal: "Journal | None" = None
    menu_for: str | None = None
    menu_at: datetime | None = None


class Action(str, enum.Enum):
    """What the handler must do now for a tab."""

    NONE = "none"
    ANSWER_MENU = "answer_menu"      # press the displayed number of "Stop and wait for limit to reset"
    CHECK_USAGE = "check_usage"      # re-read usage, then call after_usage()


@dataclass(frozen=True)
class TabPlan:
    """Result of planning: the updated record, an action, and when to look at the tab again.

    `not_before` (from `after_usage` only): the continue is armed; its Enter must not be pressed before
    this instant (UTC), the resume instant. None: send now."""

    record: TabRecord
    action: Action = Action.NONE
    menu_choice: int | None = None
    wake_at: datetime | None = None
    event: str | None = None       # a milestone worth an Event (e.g. "LimitDetected")
    not_before: datetime | None = None


def limit_key(det: Detection) -> str:
    """Stable identity of a limit event: the evidence line, its kind and its reset minute (12 hex chars).

    The reset counts to the minute only: the same limit read from structured data (exact to the
    second) and from the screen (rounded down to the minute, once the exact reset has dropped out
    of the structured data at the reset) keeps one identity. A reset printed relative to the reading
    (`Detection.reset_relative`: "try again in 3 hours") does not count: it reads later at every pass.
    """
    minute = det.resets_at.replace(second=0, microsecond=0).isoformat() if det.resets_at else ""
    if det.reset_relative and det.resets_at is not None:
        minute = "relative"  # "try again in 3 hours" reads later at every pass: the line is the identity
    basis = f"{det.evidence or ''}|{minute}|{det.kind}"
    return hashlib.sha256(basis.encode()).hexdigest()[:12]


_REREAD_SHIFTS = tuple(timedelta(days=days, hours=hours) for days in (1, 7, 365, 366) for hours in (0, -1, 1))
"""How much later the same printed reset reads when read again after its hour of grace: a clock alone a day
(the next occurrence, Claude; today's, Codex), a weekday a week, a date without a year a year; an hour either
way across a DST change."""


def first_reading(rec: TabRecord, det: Detection) -> Detection:
    """`det` with the reset first recorded for its line when it is the same limit line read again later.

    The screen is detected at every pass with that pass's ``now``, and a reset printed without a full date
    reads relative to it (`controller.domain.timeparse`): "resets 11:30pm" still on screen more than the
    hour of grace after 23:30 (the usage read said "not yet", a half-typed prompt held the tab, the operator
    was down) reads as the next day's 23:30, "Wed 11:30pm" as next week's, "Dec 8, 9pm" as next year's. The
    same text (evidence, kind) whose reading moved by whole days (`_REREAD_SHIFTS`, DST included) is the
    limit being handled, not a new one: its identity and resume (the usage read's reset) stand. A reset
    printed relative to the moment it is read ("try again in 3 hours 2 minutes", `Detection.reset_relative`)
    moves with every pass; the same line keeps the reset recorded for it. The reading only ever moves earlier
    here, so the usage read decides (never a continue before a confirmed reset).

    Args:
        rec: the tab's record (its `limit_key` is the limit being handled, from its first reading).
        det: this pass's detection.
    Returns:
        `det`, or `det` with `resets_at` set to the earlier instant whose `limit_key` is `rec.limit_key`.
    """
    if (det.state != TabState.RATE_LIMITED or det.resets_at is None or not rec.limit_key
            or rec.phase not in (Phase.RATE_LIMITED, Phase.RESUMING, Phase.NEEDS_ATTENTION)):
        return det
    if limit_key(det) == rec.limit_key:
        if det.reset_relative and rec.resets_at is not None:
            # "try again in 3 hours 2 minutes" read again: 3 h 2 min after this pass, not the reset meant
            return replace(det, resets_at=rec.resets_at)
        return det
    for shift in _REREAD_SHIFTS:
        try:
            earlier = replace(det, resets_at=det.resets_at - shift)
        except OverflowError:
            return det
        if limit_key(earlier) == rec.limit_key:
            return earlier
    return det
