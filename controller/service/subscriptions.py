"""Subscription service: login validation and the periodic usage read (one reader per subscription). Both,
and the login keeper inside the reader, write status through the Subscription's one status writer
(:func:`controller.service.status.subscription_writer`)."""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta
from typing import Any, Callable

from pydantic import ValidationError

from controller import constants as C
from controller import metrics
from controller.conditions import rfc3339, set_condition
from controller.domain.subscription import evaluate, next_read_in, threshold_sentence
from controller.domain.types import Usage, Window
from controller.models import SubscriptionSpec
from controller.runtime import Runtime
from controller.models import validation_message
from controller.service.loginload import load_login
from controller.service.status import subscription_writer

log = logging.getLogger("agentbox.subscriptions")


def _condition(type_: str, ok: bool, reason: str, message: str, now: datetime, gen: int | None) -> dict[str, Any]:
    """One metav1.Condition (message redacted and bounded by :func:`controller.conditions.set_condition`)."""
    return set_condition([], type_, ok, reason, message, now, gen)[0]


async def validate_subscription(body: dict[str, Any], rt: Runtime) -> list[tuple[str, str, str]]:
    """Validate a Subscription's spec and login and write ``CredentialsValid``, ``observedGeneration`` and the
    threshold sentence through the Subscription's one status writer (:func:`subscription_writer`; the other
    writers' conditions are kept). Returns the events to post: (type, reason, message).

    Raises:
        Whatever the Kubernetes store raises for errors other than 404 (kopf retries the handler).
    """
    meta = body["metadata"]
    gen = meta.get("generation")
    now = rt.clock()
    writer = subscription_writer(rt, meta["namespace"], meta["name"])
    writer.seen(body)
    try:
        spec = SubscriptionSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        msg = validation_message(exc)
        await writer.write({"state": "Unknown", "observedGeneration": gen},
                           [_condition(C.COND_CREDENTIALS_VALID, False, C.R_INVALID_SPEC, msg, now, gen)])
        return [("Warning", C.R_INVALID_SPEC, msg)]
    loaded = await load_login(rt.kube, meta["namespace"], spec)
    login, reason, msg = loaded.login, loaded.reason, loaded.message
    # `state` is written by the usage reader only: a value decided here from a stale body could
    # overwrite a fresher read (the reader runs concurrently).
    await writer.write({"observedGeneration": gen,
                        "threshold": threshold_sentence(spec.reserve.five_hour_percent, spec.reserve.weekly_percent)},
                       [_condition(C.COND_CREDENTIALS_VALID, login is not None, reason, msg, now, gen)])
    return [] if login is not None else [("Warning", reason, msg)]


def _window_status(w: Window) -> dict[str, Any]:
    out: dict[str, Any] = {"utilization": w.utilization}
    if w.resets_at:
        out["resetsAt"] = rfc3339(w.resets_at)
    return out


def wake_boxes(rt: Runtime, namespace: str, subscription: str, provider: str | None) -> None:
    """Wake the box watchers of a namespace that a change of Subscription `subscription` (of `provider`;
    None: unknown) can concern (it changed state or went away), so rotation and the reserve act at once
    instead of at the next scan: the boxes running on it, the boxes rotating over its provider's
    Subscriptions, the boxes whose spec names it (a move to it pending), and the boxes whose watcher has not
    said yet (`Runtime.interests`).

    Every other box is left asleep: at a reset of many Subscriptions, waking every box of the namespace
    for each of them made every watcher run several passes at the very instant the due boxes resume
    (1,000 boxes: 2-4 passes each per reset, the resume lag p99 several seconds longer)."""
    for key, event in list(rt.wakeups.items()):
        if key[0] != namespace:
            continue
        interest = rt.interests.get(key)
        if (interest is None or subscription in interest[0]
                or (interest[1] is not None and (provider is None or interest[1] == provider))):
            event.set()


def _reader_wakes(rt: Runtime, namespace: str, subscription: str, provider: str | None) -> None:
    """The reader's wake of the boxes after it wrote a new state: only where the passes LIST the
    Subscriptions themselves (no kopf index, `Runtime.subscriptions`). With the index, the watch event of
    that write wakes them once the index has it (`controller.handlers.subscriptions.subscription_event`):
    a wake from here came before it, so each box ran a pass on the old state and a second on the new."""
    if rt.subscriptions.index is None:
        wake_boxes(rt, namespace, subscription, provider)


class SubscriptionReader:
    """Reads one subscription's usage on a cadence and writes windows and state to its status."""

    def __init__(self, rt: Runtime, namespace: str, name: str, post_event: Callable[[str, str, str], None]) -> None:
        self.rt, self.namespace, self.name = rt, namespace, name
        self.post_event = post_event  # controller.events: also the `disconnected` webhook notification
        self.last_state: str | None = None
        self.previous: Usage | None = None
        from controller.service.logins import LoginKeeper

        self.logins = LoginKeeper(rt, namespace, name, self.post_event)
        self.login_delay = float("inf")
        self.timer_at: datetime | None = None  # when the next far pass is due by the timer (UTC)

    async def tick(self, body: dict[str, Any]) -> float:
        """Read once and keep the login fresh; returns seconds until the next read or login refresh.

        A pass its own timer brought (not a wake-up) that was far off (`usage_near_interval_s` or more) and
        falls in the burst of continues armed for one instant (`ArmedInstants.busy_for`: from their typing to
        2 s after the instant) waits that burst out, a few seconds: the API server and the boxes' streams then
        carry the Enters alone."""
        now = self.rt.clock()
        armed = getattr(self.rt, "armed", None)
        if self.timer_at is not None and now >= self.timer_at - timedelta(seconds=0.5) and armed is not None:
            busy = armed.busy_for(now)
            if busy > 0:
                return busy
        self.login_delay = float("inf")
        delay = min(await self._tick(body), self.login_delay)
        far = delay >= self.rt.settings.usage_near_interval_s
        self.timer_at = now + timedelta(seconds=delay) if far else None
        return delay

    async def _tick(self, body: dict[str, Any]) -> float:
        """Read once (through the shared cache) and patch status; returns seconds until the next read."""
        rt = self.rt
        try:
            spec = SubscriptionSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            return rt.settings.usage_interval_s
        status = body.get("status") or {}
        gen = body["metadata"].get("generation")
        now = rt.clock()
        subscription_writer(rt, self.namespace, self.name).seen(body)
        keeper_conds: tuple[dict[str, Any], ...] = ()
        # The Secret may be created, fixed or removed after the Subscription: CredentialsValid follows
        # it here (the validate handler only runs when the Subscription itself changes).
        loaded = await load_login(rt.kube, self.namespace, spec)
        login, reason, msg = loaded.login, loaded.reason, loaded.message
        if login is not None:  # login lifecycle: refresh, store, propagate, read back (service/logins.py)
            kept = await self.logins.tick(spec, loaded, status)
            login, status, self.login_delay = kept.login, kept.status, kept.delay
            keeper_conds = kept.conditions
            if login is None:
                return kept.delay
        current = status.get("conditions") or []
        base = set_condition(current, C.COND_CREDENTIALS_VALID, login is not None, reason, msg, now, gen)
        valid = _condition(C.COND_CREDENTIALS_VALID, login is not None, reason, msg, now, gen)
        if login is None:
            if base != current or status.get("state") != "Unknown":
                # Unknown: rotation never picks a subscription whose login cannot be read (the
                # validate handler leaves `state` to this reader).
                await self._patch({"state": "Unknown", "message": msg}, [valid])
            metrics.set_subscription_state(self.namespace, self.name, "Unknown")
            return rt.settings.usage_interval_s
        from controller.providers.readers import UsageThrottled, UsageUnauthorized

        usage: Usage | None = None
        try:
            # The reader wants a fresh read (its cadence decides when); a box's read of the last
            # few seconds is shared rather than repeated.
            usage = await rt.usage.get((self.namespace, self.name), spec.provider, login,
                                       max_age_s=min(rt.settings.usage_min_interval_s, rt.settings.usage_max_age_s),
                                       now=rt.clock)
            fetched = _condition(C.COND_USAGE_FETCHED, True, C.R_USAGE_READ, "Usage read", now, gen)
            metrics.USAGE_READS.labels(spec.provider, "ok").inc()
        except UsageUnauthorized:
            metrics.USAGE_READS.labels(spec.provider, "unauthorized").inc()
            metrics.set_subscription_state(self.namespace, self.name, "Disconnected")
            fetched = _condition(C.COND_USAGE_FETCHED, False, C.R_UNAUTHORIZED,
                                 "The provider refused the login (401/403)", now, gen)
            await self._patch({"state": "Disconnected", "message": "Login refused by the provider"},
                              [valid, fetched, *keeper_conds])
            if self.last_state != "Disconnected":
                self.last_state = "Disconnected"
                _reader_wakes(rt, self.namespace, self.name, spec.provider)
                self.post_event("Warning", "Disconnected", "The provider refused the login (401/403); "
                                "update the login Secret")
            return rt.settings.usage_interval_s
        except UsageThrottled as exc:
            metrics.USAGE_READS.labels(spec.provider, "throttled").inc()
            if self._stale(status, now):
                metrics.set_subscription_state(self.namespace, self.name, "Unknown")
            fetched = _condition(C.COND_USAGE_FETCHED, False, "Throttled",
                                 "The provider asked to slow down; keeping the last windows", now, gen)
            await self._patch({"state": "Unknown"} if self._stale(status, now) else {},
                              [valid, fetched, *keeper_conds])
            return max(rt.settings.usage_interval_s, float(getattr(exc, "retry_after_s", 0) or 0))
        except Exception as exc:  # noqa: BLE001
            metrics.USAGE_READS.labels(spec.provider, "error").inc()
            if self._stale(status, now):
                metrics.set_subscription_state(self.namespace, self.name, "Unknown")
            fetched = _condition(C.COND_USAGE_FETCHED, False, C.R_UPSTREAM_UNAVAILABLE,
                                 f"Usage read failed ({type(exc).__name__})", now, gen)
            await self._patch({"state": "Unknown"} if self._stale(status, now) else {},
                              [valid, fetched, *keeper_conds])
            return rt.settings.usage_interval_s
        verdict = evaluate(usage, spec.reserve.five_hour_percent, spec.reserve.weekly_percent, now)
        windows = {}
        if "five_hour" in usage.windows:
            windows["fiveHour"] = _window_status(usage.windows["five_hour"])
        if "weekly" in usage.windows:
            windows["weekly"] = _window_status(usage.windows["weekly"])
        await self._patch({
            "windows": windows, "readAt": rfc3339(usage.read_at), "state": verdict.state,
            "reservedUntil": rfc3339(verdict.until) if verdict.state == "Reserved" else None,
            "message": verdict.message,
            "loginExpiresAt": rfc3339(login.expires_at) if login.expires_at else None,
        }, [valid, fetched, *keeper_conds])
        if verdict.state != self.last_state:
            self.last_state = verdict.state
            _reader_wakes(rt, self.namespace, self.name, spec.provider)
            self.post_event("Normal", verdict.state, verdict.message)
        self._export(usage, verdict.state)
        st = rt.settings
        delay = next_read_in(usage, self.previous, spec.reserve.five_hour_percent, spec.reserve.weekly_percent, now,
                             near_s=st.usage_near_interval_s, far_s=st.usage_interval_s, min_s=st.usage_min_interval_s)
        if self.previous is None or usage.read_at != self.previous.read_at:
            self.previous = usage
        return delay * (0.9 + 0.2 * random.random()) if delay >= st.usage_interval_s else delay

    def _export(self, usage: Usage, state: str) -> None:
        """Per-subscription gauges (labels: namespace, subscription, window/state; never a token)."""
        for name, w in usage.windows.items():
            metrics.SUBSCRIPTION_UTILIZATION.labels(self.namespace, self.name, name).set(w.utilization)
            if w.resets_at:
                metrics.SUBSCRIPTION_RESET.labels(self.namespace, self.name, name).set(w.resets_at.timestamp())
        metrics.set_subscription_state(self.namespace, self.name, state)

    def _stale(self, status: dict[str, Any], now: datetime) -> bool:
        """The last good windows are too old to decide from (rotation treats Unknown as unusable)."""
        read_at = status.get("readAt")
        if not read_at:
            return True
        try:
            at = datetime.fromisoformat(read_at.replace("Z", "+00:00"))
        except ValueError:
            return True
        return (now - at).total_seconds() > self.rt.settings.usage_stale_s

    async def _patch(self, fields: dict[str, Any], conditions: list[dict[str, Any]]) -> None:
        """Write status fields and the reader's (and keeper's) conditions through the Subscription's one
        status writer: other writers' condition types are kept as stored."""
        await subscription_writer(self.rt, self.namespace, self.name).write(fields, conditions)
