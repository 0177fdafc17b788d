"""Events, posted on change: the ONE module every poster goes through (the box reconcile, the tab
watcher, the subscription daemons). It redacts and bounds each message once, deduplicates per
(object, type, reason, message), and fans a new occurrence out to the Kubernetes Event, the optional
webhook (`controller.notify`) and the `agentbox_events_total` metric.

Deduplication follows the Kubernetes EventRecorder: the Event's name is derived from the object's UID
and the (type, reason, message), so a repeat is the same Event with its `count` and `lastTimestamp`
patched, also after a controller restart (the create answers 409; the stored count is read and
raised). Within the process a repeat costs no API call: it is counted, and the count is written at
most once per `refresh_s` per Event (a pending count is flushed when that interval ends). The webhook
is called for the first occurrence, and again only after the Event was quiet for `quiet_s`.

`post` is synchronous and never raises: the writes run in one background task, in order.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Protocol

from controller import metrics
from controller.redact import EVENT_MESSAGE_MAX, bounded

log = logging.getLogger("agentbox.events")

COMPONENT = "agentbox-controller"

# Reasons that also go to the webhook, by the kind of object and the notification kind.
NOTIFY_KINDS: dict[str, str] = {  # AgentBox Events
    "Resumed": "resume", "Switched": "switch", "ReserveReached": "reserve",
    "PromptNotEmpty": "needs_attention", "ResumeNotTakingEffect": "needs_attention", "Stalled": "needs_attention",
    "OutOfCredits": "needs_attention", "NeedsAttention": "needs_attention",
    "RotationGroupExhausted": "needs_attention", "SubscriptionNotFound": "needs_attention",
}
SUBSCRIPTION_NOTIFY_KINDS: dict[str, str] = {  # Subscription Events: a human must log in again
    "Disconnected": "disconnected", "LoginRefreshRefused": "disconnected",
}

EventFn = Callable[[str, str, str], None]
"""Posts an Event on one object: (type Normal|Warning, reason, message)."""


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (an Event's `involvedObject`)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def of(cls, body: Any) -> "ObjectRef":
        """The reference of a Kubernetes object (a dict or a kopf Body)."""
        meta = body.get("metadata") or {}
        return cls(body.get("apiVersion") or "", body.get("kind") or "", meta.get("namespace") or "",
                   meta.get("name") or "", meta.get("uid") or "")

    def involved(self) -> dict[str, str]:
        """`involvedObject` of an Event."""
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out


class EventStore(Protocol):
    """Where Events are written (`controller.kube.objects.Kube` implements it)."""

    async def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        """Create an Event; False when one of that name exists (409)."""

    async def read_event_count(self, namespace: str, name: str) -> int | None:
        """`count` of a stored Event, None when absent."""

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch an Event."""


def event_name(ref: ObjectRef, type_: str, reason: str, message: str) -> str:
    """Stable Event name: `<object>.<16 hex of sha256(uid, type, reason, message)>` (a valid
    DNS subdomain: the object name is cut so the whole stays under 253 characters)."""
    digest = hashlib.sha256("\x00".join((ref.uid or f"{ref.namespace}/{ref.kind}/{ref.name}",
                                         type_, reason, message)).encode()).hexdigest()[:16]
    return f"{ref.name[:200]}.{digest}"


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int                  # occurrences known in this process (the stored count once written)
    written: int                # count last written to the API (0: not created yet)
    first: datetime
    last: datetime
    last_write: datetime
    flush: asyncio.TimerHandle | None = None


@dataclass
class Recorder:
    """Posts Events on change (see the module docstring).

    Args:
        store: the Kubernetes side (`Kube`), or None to only count (tests of posters).
        notifier: `controller.notify.Notifier` or None.
        clock: current instant (UTC).
        refresh_s: shortest period between two writes of one Event's count (seconds).
        quiet_s: an Event silent this long is a new episode: the webhook is called again (seconds).
        max_events: Events remembered; the least recently seen are forgotten first.
        burst, refill_s: a new Event (or a re-announced one) per object spends a token of that object's
            bucket of ``burst`` tokens, refilled one per ``refill_s`` seconds; without a token it is not
            posted (metric result "limited"). As the Kubernetes EventRecorder's spam filter: a box
            whose messages change every pass (tab names it renames, many tabs) cannot flood the API
            server, the webhook, or the one queue every other object's Events wait in.
    """

    store: EventStore | None
    notifier: Any = None
    clock: Callable[[], datetime] = field(default=None)  # type: ignore[assignment]
    refresh_s: float = 60.0
    quiet_s: float = 600.0
    max_events: int = 10000
    burst: int = 50
    refill_s: float = 6.0
    _buckets: OrderedDict[str, tuple[float, datetime]] = field(default_factory=OrderedDict, init=False)
    _limited: set[str] = field(default_factory=set, init=False)
    _seen: OrderedDict[tuple[str, str, str, str], _Seen] = field(default_factory=OrderedDict, init=False)
    _queue: asyncio.Queue[Callable[[], Any]] | None = field(default=None, init=False)
    _worker: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.clock is None:
            from controller.settings import utcnow

            self.clock = utcnow

    # ------------------------------------------------------------------ posting
    def poster(self, ref: ObjectRef) -> EventFn:
        """An `EventFn` for one object."""
        def post(type_: str, reason: str, message: str) -> None:
            self.post(ref, type_, reason, message)
        return post

    def post(self, ref: ObjectRef, type_: str, reason: str, message: str) -> bool:
        """Record one occurrence; True when it was posted as new (Event created or re-announced
        after `quiet_s`), False when it was folded into an earlier one. Never raises."""
        message = bounded(message, EVENT_MESSAGE_MAX)
        key = (ref.uid or f"{ref.namespace}/{ref.kind}/{ref.name}", type_, reason, message)
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            quiet = (now - seen.last).total_seconds() >= self.quiet_s
            seen.count += 1
            seen.last = now
            if quiet and self._spend(key[0], now):
                self._cancel_flush(seen)
                self._enqueue(lambda s=seen, c=seen.count, t=now: self._write_count(s, c, t))
                self._fan_out(ref, type_, reason, message, "posted")
                return True
            metrics.EVENTS.labels(type_, reason, "repeated").inc()
            self._schedule_flush(seen, now)
            return False
        if not self._spend(key[0], now):
            metrics.EVENTS.labels(type_, reason, "limited").inc()
            return False
        name = event_name(ref, type_, reason, message)
        seen = _Seen(name, ref.namespace, 1, 0, now, now, now)
        self._seen[key] = seen
        while len(self._seen) > self.max_events:
            _, old = self._seen.popitem(last=False)
            self._cancel_flush(old)
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            "involvedObject": ref.involved(), "type": type_, "reason": reason, "message": message,
            "count": 1, "firstTimestamp": _ts(now), "lastTimestamp": _ts(now),
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
        }
        self._enqueue(lambda s=seen, b=body: self._create(s, b))
        self._fan_out(ref, type_, reason, message, "posted")
        return True

    def _spend(self, owner: str, now: datetime) -> bool:
        """Take one token of ``owner``'s bucket; False when it is empty (see ``burst``)."""
        tokens, at = self._buckets.pop(owner, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(0.0, (now - at).total_seconds()) / self.refill_s)
        ok = tokens >= 1.0
        if ok:
            tokens -= 1.0
        elif owner not in self._limited:
            self._limited.add(owner)
            log.warning("Events of %s are rate-limited (more than %d new Events in a burst)", owner, self.burst)
        if ok:
            self._limited.discard(owner)
        self._buckets[owner] = (tokens, now)
        while len(self._buckets) > self.max_events:
            self._limited.discard(self._buckets.popitem(last=False)[0])
        return ok

    def forget(self, ref: ObjectRef) -> None:
        """Drop what is remembered about an object's Events (it was deleted)."""
        owner = ref.uid or f"{ref.namespace}/{ref.kind}/{ref.name}"
        for key in [k for k in self._seen if k[0] == owner]:
            self._cancel_flush(self._seen.pop(key))

    def count(self, ref: ObjectRef, reason: str) -> int:
        """Occurrences of `reason` on `ref` seen by this process (all messages)."""
        owner = ref.uid or f"{ref.namespace}/{ref.kind}/{ref.name}"
        return sum(s.count for k, s in self._seen.items() if k[0] == owner and k[2] == reason)

    def _fan_out(self, ref: ObjectRef, type_: str, reason: str, message: str, result: str) -> None:
        metrics.EVENTS.labels(type_, reason, result).inc()
        kinds = {"AgentBox": NOTIFY_KINDS, "Subscription": SUBSCRIPTION_NOTIFY_KINDS}.get(ref.kind, {})
        kind = kinds.get(reason)
        notifier = self.notifier
        if kind and notifier is not None and getattr(notifier, "enabled", False):
            try:
                notifier.schedule(kind, ref.namespace, ref.name, message)
            except RuntimeError:  # no running loop (a sync caller in a test)
                pass

    # ------------------------------------------------------------------ writing, in order, in one task
    def _enqueue(self, job: Callable[[], Any]) -> None:
        if self.store is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._work(self._queue))
        self._queue.put_nowait(job)

    async def _work(self, queue: asyncio.Queue[Callable[[], Any]]) -> None:
        while True:
            job = await queue.get()
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a lost Event must not stop the others
                log.warning("Event write failed (%s)", type(exc).__name__)
            finally:
                queue.task_done()

    async def _create(self, seen: _Seen, body: dict[str, Any]) -> None:
        assert self.store is not None
        if await self.store.create_event(seen.namespace, body):
            seen.written = 1
            return
        # The Event exists (posted before a restart): it is the same occurrence stream.
        stored = await self.store.read_event_count(seen.namespace, seen.name) or 0
        seen.count += stored
        await self._write_count(seen, seen.count, seen.last)

    async def _write_count(self, seen: _Seen, count: int, at: datetime) -> None:
        assert self.store is not None
        if count <= seen.written:
            return
        await self.store.patch_event(seen.namespace, seen.name, {"count": count, "lastTimestamp": _ts(at)})
        seen.written = count
        seen.last_write = self.clock()

    def _schedule_flush(self, seen: _Seen, now: datetime) -> None:
        if seen.flush is not None or self.store is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        delay = max(0.0, self.refresh_s - (now - seen.last_write).total_seconds())

        def flush() -> None:
            seen.flush = None
            self._enqueue(lambda: self._write_count(seen, seen.count, seen.last))
        seen.flush = loop.call_later(delay, flush)

    @staticmethod
    def _cancel_flush(seen: _Seen) -> None:
        if seen.flush is not None:
            seen.flush.cancel()
            seen.flush = None

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Write pending counts, wait (briefly) for queued writes, then stop the worker."""
        for seen in self._seen.values():
            if seen.flush is not None:
                self._cancel_flush(seen)
                self._enqueue(lambda s=seen: self._write_count(s, s.count, s.last))
        if self._queue is not None and self._worker is not None and not self._worker.done():
            try:
                await asyncio.wait_for(self._queue.join(), timeout_s)
            except asyncio.TimeoutError:
                log.warning("Event writes still pending at shutdown: %d", self._queue.qsize())
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
