"""Rotation across subscriptions of one provider (DESIGN §3 "Rotation"). Pure: `now` is a parameter.

Choice: most 5-hour headroom, then most weekly headroom, then the earliest 5-hour reset; skip
Exhausted, Reserved, Disconnected and Unknown (never-read) subscriptions. Sticky: a box leaves its
subscription only on a trigger (a limit line in a tab, a window at 100 %, the reserve reached,
disconnected, deleted) and a reset of the old one never pulls it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

USABLE = "Available"
BAD_STATES = frozenset({"Exhausted", "Reserved", "Disconnected", "Unknown"})


@dataclass(frozen=True)
class Candidate:
    """What rotation knows about one subscription (from its status).

    Attributes:
        name: Subscription name.
        provider: "anthropic" | "openai".
        state: status.state (Available | Exhausted | Reserved | Disconnected | Unknown).
        five_hour: utilization of the 5-hour window in percent 0-100, or None when not read.
        weekly: utilization of the weekly window in percent 0-100, or None.
        five_hour_reset: reset instant of the 5-hour window (UTC) or None.
        until: when Exhausted/Reserved ends (UTC) or None.
    """

    name: str
    provider: str
    state: str
    five_hour: float | None = None
    weekly: float | None = None
    five_hour_reset: datetime | None = None
    until: datetime | None = None


def group_members(group: str, selected: list[str], provider: str, all_subs: list[Candidate]) -> list[Candidate]:
    """The rotation group: `All` = every subscription of the provider (including ones created
    later); `Selected` = the listed names that exist and are of the provider."""
    same = [c for c in all_subs if c.provider == provider]
    if group == "Selected":
        wanted = set(selected)
        return [c for c in same if c.name in wanted]
    return same


def _rank(c: Candidate) -> tuple[float, float, float]:
    five = 100.0 - (c.five_hour if c.five_hour is not None else 0.0)
    week = 100.0 - (c.weekly if c.weekly is not None else 0.0)
    reset = c.five_hour_reset.timestamp() if c.five_hour_reset else float("inf")
    return (-five, -week, reset)


def choose_next(current: str | None, members: list[Candidate]) -> Candidate | None:
    """The subscription a box would switch to now, or None when none is usable.

    Never returns `current`; skips every state but Available.
    """
    usable = [c for c in members if c.name != current and c.state == USABLE]
    if not usable:
        return None
    return min(usable, key=lambda c: (_rank(c), c.name))


@dataclass(frozen=True)
class SwitchReason:
    """Why the current subscription must be left (None fields = stay)."""

    leave: bool
    reason: str = ""
    trigger: str = ""   # limit | exhausted | reserve | disconnected | deleted (a metric label)


def must_leave(current: Candidate | None, limited_tab: bool) -> SwitchReason:
    """Triggers of a switch: the current subscription is gone, exhausted, reserved, disconnected,
    or a tab shows a usage-limit line. Unknown (a failed read) alone is not a trigger."""
    if current is None:
        return SwitchReason(True, "subscription deleted", "deleted")
    if current.state == "Exhausted":
        return SwitchReason(True, _window_reason(current, "at 100 %"), "exhausted")
    if current.state == "Reserved":
        return SwitchReason(True, "reserve reached", "reserve")
    if current.state == "Disconnected":
        return SwitchReason(True, "login disconnected", "disconnected")
    if limited_tab:
        return SwitchReason(True, "usage limit reached in a tab", "limit")
    return SwitchReason(False)


def _window_reason(c: Candidate, what: str) -> str:
    if c.five_hour is not None and c.five_hour >= 100:
        return f"5-hour window {what}"
    if c.weekly is not None and c.weekly >= 100:
        return f"weekly window {what}"
    return f"a window {what}"


def first_to_reset(members: list[Candidate], now: datetime) -> Candidate | None:
    """When the whole group is exhausted: the member whose block ends first (for display)."""
    waiting = [c for c in members if c.until is not None and c.until > now and c.state in ("Exhausted", "Reserved")]
    return min(waiting, key=lambda c: c.until) if waiting else None  # type: ignore[arg-type,return-value]


# ---------------------------------------------------------------------------- spec.subscription changed
def follow_spec(current: str | None, spec_subscription: str | None, rotation: bool,
                subscriptions: list[Candidate] | tuple[Candidate, ...], provider: str) -> Candidate | None:
    """The subscription the tab watcher must move the box's live login to because a human changed
    spec.subscription while rotation is off; None when the box stays where it is.

    None with rotation on (the rotation owns status.subscription), when the box already runs on
    spec.subscription, and when spec.subscription is not a Subscription of the agent's provider in the
    namespace (the reconcile reports that on spec.subscription; the box keeps its login).

    Args:
        current: the subscription the box runs on now (status.subscription, the watcher's memory).
        spec_subscription: spec.subscription.
        rotation: spec.whenAgentStops.rotation.enabled.
        subscriptions: the namespace's Subscriptions (`Candidate`s).
        provider: the agent's provider ("anthropic" | "openai").
    """
    if rotation or not spec_subscription or not current or current == spec_subscription:
        return None
    return next((c for c in subscriptions if c.name == spec_subscription and c.provider == provider), None)


def subscription_of_box(spec_subscription: str | None, status_subscription: str | None,
                        switch_to: str | None) -> str | None:
    """The subscription whose login a box holds, or is being given: the login keeper pushes that one's login.

    During a switch (status.switch, written before the new login is installed and cleared with
    status.subscription) it is the switch's target, so the old subscription's keeper never writes its
    login back over the new one; else status.subscription; else spec.subscription (never placed yet).

    Args:
        spec_subscription: spec.subscription.
        status_subscription: status.subscription.
        switch_to: status.switch.to, None when no switch is in progress.
    """
    return switch_to or status_subscription or spec_subscription
