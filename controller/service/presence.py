"""Which AgentBoxes and Subscriptions exist, as kopf's watch of them said, so a daemon pass need not GET its
object to know it still exists.

Each per-object daemon (the tab watcher, the usage reader) runs without a finalizer, so it checks before every
pass that its object still exists (`controller.handlers.daemons.run_passes`). That check was a GET of the whole
object: a thousand GETs, each parsed, when a reset woke a thousand boxes (11 % of the operator's CPU at a
deadline, bench/scale.py). kopf already watches both kinds; its events feed this record
(`controller.handlers.boxes.box_event`, `controller.handlers.subscriptions.subscription_event`), and a
daemon asks it first:

* the object was seen (listed, added, modified) with the daemon's uid within `recheck_s`: it exists;
* a DELETED event came for that uid, or the name now belongs to another uid: it is gone;
* otherwise (never seen, or not confirmed for `recheck_s`: a watch can miss a DELETED across a re-list
  after "410 Gone", as kopf's re-list yields only the objects that still exist): unknown, and the daemon
  GETs it as before (`confirm` records a GET that found it).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from controller.kube.objects import identity

Key = tuple[str, str, str]
"""(plural, namespace, name)."""

RECHECK_S = 60.0
"""Seconds a watch event (or a GET) vouches for an object's existence before a daemon GETs it again."""


class Presence:
    """The last word of the watch on each object: (uid, when seen) or gone.

    Args:
        recheck_s: seconds one sighting vouches for an object (then `alive` answers None: GET it).
        clock: monotonic seconds (injected in tests).
    """

    def __init__(self, recheck_s: float = RECHECK_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.recheck_s = recheck_s
        self.clock = clock
        self._seen: dict[Key, tuple[str, float]] = {}
        self._gone: dict[Key, tuple[str, float]] = {}

    def observe(self, plural: str, event_type: str | None, obj: Mapping[str, Any] | None) -> None:
        """One watch event of `plural`: `event_type` ADDED | MODIFIED | DELETED (None: kopf's listing),
        `obj` the object as the API server sent it (only its metadata is read)."""
        ident = identity(obj)
        if ident is None:
            return
        ns, name, uid = ident
        key, now = (plural, ns, name), self.clock()
        if event_type == "DELETED":
            if (self._seen.get(key) or ("",))[0] == uid:
                del self._seen[key]
            self._gone[key] = (uid, now)
            if len(self._gone) > 256:
                self._prune(now)
            return
        self._seen[key] = (uid, now)
        if (self._gone.get(key) or ("",))[0] != uid:
            self._gone.pop(key, None)

    def confirm(self, plural: str, namespace: str, name: str, uid: str) -> None:
        """A GET found the object with `uid`: it vouches as a watch event would."""
        key = (plural, namespace, name)
        if (self._gone.get(key) or ("",))[0] != uid:
            self._seen[key] = (uid, self.clock())

    def alive(self, plural: str, namespace: str, name: str, uid: str | None) -> bool | None:
        """True: seen with `uid` within `recheck_s`; False: deleted, or the name now holds another object;
        None: not known well enough (GET it). `uid` None (an object without one) is always None."""
        if uid is None:
            return None
        key = (plural, namespace, name)
        gone = self._gone.get(key)
        if gone is not None and gone[0] == uid:
            return False
        seen = self._seen.get(key)
        if seen is None:
            return None
        if seen[0] != uid:
            return False
        return True if self.clock() - seen[1] < self.recheck_s else None

    def forget(self, plural: str, namespace: str, name: str, uid: str | None) -> None:
        """The daemon of object `uid` ended: drop what is kept about it (not about a newer object of the
        same name)."""
        key = (plural, namespace, name)
        for store in (self._seen, self._gone):
            if (store.get(key) or ("",))[0] == uid:
                del store[key]

    def _prune(self, now: float) -> None:
        # A DELETED for an object whose daemon already ended is never forgotten by it: when many such marks
        # piled up, keep only those a daemon could still be about to ask for.
        for key, (_, at) in list(self._gone.items()):
            if now - at > 10 * self.recheck_s:
                del self._gone[key]

    def __len__(self) -> int:
        return len(self._seen)
