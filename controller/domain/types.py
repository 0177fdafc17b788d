"""Value types of the domain: windows, detections, tab observations. Pure, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

MAX_RESET_DISTANCE = timedelta(days=31)
"""Farthest a reset instant may lie from now, either side. Usage windows last five hours, a week or a
month: a reset beyond this (a screen or file saying year 9999, an epoch in milliseconds read as
seconds) is not believed and counts as unknown."""


def plausible_reset(at: datetime | None, now: datetime) -> datetime | None:
    """`at` when it is within `MAX_RESET_DISTANCE` of `now` (UTC, tz-aware), else None (unknown).

    Every reset instant that comes from a screen, a box file or a provider passes here before any
    arithmetic, so no value can overflow a date or park a tab until the year 9999.
    """
    if at is None:
        return None
    try:
        if abs(at - now) > MAX_RESET_DISTANCE:
            return None
    except (OverflowError, TypeError):  # naive vs aware, or beyond datetime's range
        return None
    return at


class TabState(str, enum.Enum):
    """What a tab's live bottom says the agent is doing."""

    RATE_LIMITED = "rate_limited"     # stopped on a limit; see Detection.kind
    AWAITING_INPUT = "awaiting_input"  # permission prompt, question, menu (not the limit menu)
    WORKING = "working"               # spinner / interrupt hint / fresh output
    IDLE = "idle"                     # empty prompt, nothing running, no limit line
    UNKNOWN = "unknown"               # nothing recognisable (e.g. a shell, a blank pane)


class LimitKind(str, enum.Enum):
    """Class of a limit line (field-pitfalls §2)."""

    USAGE = "usage"        # a window reset lifts it: wait or rotate
    CREDITS = "credits"    # out of credits / spend cap: no reset lifts it
    OVERLOAD = "overload"  # provider incident or CLI retrying: do nothing
    WARNING = "warning"    # approaching a limit: record only


WINDOW_FIVE_HOUR = "five_hour"
WINDOW_WEEKLY = "weekly"
WINDOW_MONTHLY = "monthly"


@dataclass(frozen=True)
class Detection:
    """The meaning of one tab screen, as the corpus README defines it.

    Attributes:
        state: the tab state on the live bottom of the screen.
        kind: limit class when a limit/warning line decided, else None.
        resets_at: reset instant (UTC, tz-aware) or None when the screen gives none.
        window: "five_hour" | "weekly" when the line names it, else None.
        auto_continue: Claude Code announced its native automatic continue.
        limit_menu: Claude Code's rate-limit options menu is open.
        menu_choice: displayed number of the "Stop and wait for limit to reset" option
            when limit_menu is True and that option is visible, else None.
        prompt_text: text typed in the agent's input box (a human's half-typed line),
            "" when the box is empty, None when no input box is visible.
        evidence: the (joined) screen line that decided, or None.
        detected_by: which rule decided, e.g. "pattern:claude-code/hit-your-limit",
            "user-pattern:0", "structured:statusline"; "" when nothing matched.
        reset_relative: ``resets_at`` was printed relative to the moment the screen is read ("try again in
            3 hours 2 minutes", "resets 8m"): every later reading of the same line moves with ``now``; the
            first reading is the one meant (see ``controller.domain.resume.limit_key``).
    """

    state: TabState
    kind: LimitKind | None = None
    resets_at: datetime | None = None
    window: str | None = None
    auto_continue: bool = False
    limit_menu: bool = False
    menu_choice: int | None = None
    prompt_text: str | None = None
    evidence: str | None = None
    detected_by: str = ""
    reset_relative: bool = False

    def to_json(self) -> dict[str, Any]:
        """Corpus-shaped dict: state, kind, resets_at (RFC 3339 UTC 'Z' or None), window,
        auto_continue, limit_menu, menu_choice, prompt_text, evidence, detected_by."""
        return {
            "state": self.state.value,
            "kind": self.kind.value if self.kind else None,
            "resets_at": self.resets_at.strftime("%Y-%m-%dT%H:%M:%SZ") if self.resets_at else None,
            "window": self.window,
            "auto_continue": self.auto_continue,
            "limit_menu": self.limit_menu,
            "menu_choice": self.menu_choice,
            "prompt_text": self.prompt_text,
            "evidence": self.evidence,
            "detected_by": self.detected_by,
        }


@dataclass(frozen=True)
class Window:
    """One provider usage window.

    Attributes:
        name: "five_hour" | "weekly" | "monthly" | "<n>s" named by its length, never its slot.
        utilization: percent used, 0-100 (values above 100 are kept as read).
        resets_at: reset instant (UTC, tz-aware) or None before the window started.
    """

    name: str
    utilization: float
    resets_at: datetime | None


@dataclass(frozen=True)
class Usage:
    """A usage read of one subscription: windows by name and the instant they were read (UTC)."""

    windows: dict[str, Window] = field(default_factory=dict)
    read_at: datetime | None = None
