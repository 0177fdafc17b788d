"""Process-wide things the handlers share (kept in kopf's `memo`): settings, clients, caches, clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from controller.events import EventFn, ObjectRef, Recorder
from controller.kube.objects import Kube
from controller.service.armed import ArmedInstants
from controller.service.loginload import SharedLogins
from controller.service.podcache import WatchedPods
from controller.service.presence import Presence
from controller.service.status import StatusWriter
from controller.service.subcache import WatchedSubscriptions
from controller.service.subviews import SubscriptionViews
from controller.settings import Clock, Settings, utcnow


@dataclass
class Runtime:
    """Everything a handler needs besides the object it handles.

    Attributes:
        settings: operator settings.
        kube: Kubernetes client wrapper.
        usage: `controller.providers.readers.UsageCache` shared by every box (one reader per subscription).
        exec: `async (namespace, pod, container, argv, stdin=None) -> ExecResult` running one argv in a box container.
        exec_open: `async (namespace, pod, container, argv) -> controller.kube.aexec.ExecStream` opening a
            long-lived exec with stdin (the live tmux stream), or None where streams are not available.
        notifier: `controller.notify.Notifier` (optional webhook) or None.
        clock: returns the current UTC instant.
        events: the one Event poster (deduplicated; also the webhook and the metric). The default
            only counts (no API writes); the operator's startup gives it the Kubernetes client.
        wakeups: per box (namespace, name) an Event that wakes its tab watcher early.
        interests: per box (namespace, name) what a Subscription change must wake it for, as its watcher
            last saw it: (the names of the Subscriptions it runs on or is to move to: status.subscription and
            spec.subscription, the provider whose Subscriptions it rotates over or None). A box not in it (no
            pass yet) is woken by every change of its namespace.
        status_writers: per object (plural, namespace, name) its one status writer
            (:func:`controller.service.status.writer_of`), shared by every writer of that object.
        sub_views: rotation's views of each namespace's Subscriptions, converted once per object version
            (`controller.service.subviews.SubscriptionViews`).
        subscriptions: the Subscriptions as their watch delivered them (kopf's index, given by the startup
            handler; `controller.service.subcache.WatchedSubscriptions`), read by every watcher pass instead
            of a LIST.
        logins: a Subscription's login loaded once for the boxes that ask at the same instant
            (`controller.service.loginload.SharedLogins`; nothing kept after).
        pods: the box pods as the pod watch delivered them (`controller.service.podcache.WatchedPods`).
        presence: which AgentBoxes and Subscriptions exist as their watch said, for the daemons' existence
            check (`controller.service.presence.Presence`).
        box_changes: per box (namespace, name) how many times a human changed what a decision of its tab
            watcher rests on (its spec, a resume annotation, its pod gone, the box deleted): `box_changed`.
            An armed continue waiting for its instant is cancelled when it moves (`service.executor`).
        daemon_uids: per box (namespace, name), and per Subscription ("subscriptions/<namespace>", name), the
            uid of the newest daemon of that name (tab watcher, usage reader): what is kept by name
            (wakeups, interests, box_changes, the status writer, metric series) is dropped only by it, never by
            an older daemon of a deleted box of the same name that ends after the re-created box's started.
        sharding: with `settings.shards` > 1, which objects this replica serves
            (`controller.service.sharding.Sharding`); None otherwise (every object is served).
        armed: the armed continues of this process by instant, whose write budget grows with them
            (`controller.service.armed.ArmedInstants`, made from `settings`).
    """

    settings: Settings
    kube: Kube
    usage: Any
    exec: Any = None
    exec_open: Any = None
    notifier: Any = None
    clock: Clock = utcnow
    events: Recorder = field(default=None)  # type: ignore[assignment]
    wakeups: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    interests: dict[tuple[str, str], tuple[tuple[str, ...], str | None]] = field(default_factory=dict)
    status_writers: dict[tuple[str, str, str], StatusWriter] = field(default_factory=dict)
    box_changes: dict[tuple[str, str], int] = field(default_factory=dict)
    daemon_uids: dict[tuple[str, str], str | None] = field(default_factory=dict)
    sub_views: SubscriptionViews = field(default_factory=SubscriptionViews)
    subscriptions: WatchedSubscriptions = field(default_factory=WatchedSubscriptions)
    logins: SharedLogins = field(default_factory=SharedLogins)
    pods: WatchedPods = field(default_factory=WatchedPods)
    presence: Presence = field(default_factory=Presence)
    sharding: Any = None
    armed: ArmedInstants = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.armed is None:
            self.armed = ArmedInstants.from_settings(self.settings)
        if self.events is None:
            self.events = Recorder(None, self.notifier, self.clock)
        self.presence.recheck_s = self.settings.existence_recheck_s

    def poster(self, body: Any) -> EventFn:
        """Posts Events on the object `body` (a dict or kopf Body) through `events`."""
        return self.events.poster(ObjectRef.of(body))

    def wakeup(self, namespace: str, name: str) -> asyncio.Event:
        """The wake-up Event of one box (created on first use)."""
        return self.wakeups.setdefault((namespace, name), asyncio.Event())

    def box_changed(self, namespace: str, name: str) -> None:
        """A box's spec or resume annotations changed, its pod went or the box was deleted: count it in
        `box_changes` and wake its tab watcher."""
        key = (namespace, name)
        self.box_changes[key] = self.box_changes.get(key, 0) + 1
        self.wakeup(namespace, name).set()
