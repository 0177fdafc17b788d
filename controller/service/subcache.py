"""A namespace's Subscriptions as the Subscription watch delivered them, so a watcher pass need not LIST them.

Every tab-watcher pass needs its namespace's Subscriptions (rotation candidates and reserves,
`controller.service.subviews`). It listed them (`controller.kube.objects.Kube.list_custom_shared`): one
LIST per pass, shared only by passes started in the same instant. With 1,000 Subscriptions in a namespace
that is a megabyte encoded by the API server and parsed by the replica on every pass; in `bench/shards.py`
at 4,000-6,000 boxes it was 22 % of the emulated API server's CPU (py-spy), and on a real cluster it is the
load that a watch cache exists to remove (informers: client-go's ``Lister``).

kopf already watches every Subscription. Its index (`kopf.index`, handler
`controller.handlers.subscriptions.subscriptions_by_namespace`) keeps each one's latest body by namespace,
and kopf runs no resource handler, daemon included, before every index has its initial listing
(kopf 1.45: ``operator_indexed`` in ``kopf/_core/reactor/processing.py``). So the first pass of any box
already sees every Subscription that existed when the operator started, and later ones as the watch brings
them (a DELETED event removes one before any handler of that event runs).

Relists: after a watch ends with 410 Gone (an etcd compaction, an API server restart), kopf lists again and
delivers the objects that exist; a Subscription deleted in the gap gets no DELETED event, and kopf's index
keeps it (kopf 1.45 removes an entry on DELETED only). So every listing event (kopf marks them with no
event type) has one LIST of the namespace follow it, a second after the last (`WatchedSubscriptions.listed`):
every indexed object that LIST does not hold, at a version the LIST already covers, is left out of `of` from
then on. The index also keeps one entry per uid, so a Subscription deleted and re-created in the gap is
there twice under one name: `of` gives each name once, its newest version.

Freshness: a pass sees what the watch has delivered, at most one watch latency behind a LIST. A change of a
Subscription's ``status.state`` wakes its boxes from the watch event itself
(`controller.handlers.subscriptions.subscription_event`), after the index has that event, so the pass it
wakes sees the new state. Everything a box then does to a Subscription reads it again (a move GETs its
target, the resume re-reads the provider's limits), as before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Iterable, Mapping

log = logging.getLogger("agentbox.subscriptions")

QUIET_S = 1.0
"""Seconds without a listing event before the LIST that finds what a relist left out."""

Lister = Callable[[str], Awaitable[tuple[list[dict[str, Any]], str]]]
"""async (namespace) -> (the namespace's Subscriptions, the list's resourceVersion)."""


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")


def _newer(a: str, b: str) -> bool:
    """resourceVersion `a` is newer than `b`: integers where both are (etcd's are), else unknown (False)."""
    try:
        return int(a) > int(b)
    except ValueError:
        return False


class WatchedSubscriptions:
    """Reads kopf's Subscription index: `of(namespace)` is the namespace's Subscriptions sorted by name
    (the order of a LIST's answer), each a dict with metadata, spec and status, shared: read them, never
    change them. `index` is the kopf index (a mapping namespace -> iterable of bodies), None until the
    operator's startup handler got it; while None, `of` returns None (the caller LISTs instead).

    `lister` (given with the index) lists a namespace after a relist (module docstring); None: no check.

    Attributes:
        reads: passes answered from the index (for tests and benchmarks).
        checks: LISTs made after listing events.
    """

    def __init__(self, index: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
                 lister: Lister | None = None) -> None:
        self.index = index
        self.lister = lister
        self.reads = 0
        self.checks = 0
        self._gone: dict[str, frozenset[str]] = {}
        self._checks: dict[str, asyncio.Task[None]] = {}
        self._last_listing: dict[str, float] = {}

    def of(self, namespace: str) -> list[Mapping[str, Any]] | None:
        """The Subscriptions of `namespace` sorted by name, each name once (its newest version), without
        those a check after a relist found gone; None when there is no index."""
        if self.index is None:
            return None
        self.reads += 1
        gone = self._gone.get(namespace, frozenset())
        newest: dict[str, Mapping[str, Any]] = {}
        for obj in self.index.get(namespace) or ():
            uid, rv = _meta(obj)
            if uid in gone:
                continue
            name = _name(obj)
            kept = newest.get(name)
            if kept is None or _newer(rv, _meta(kept)[1]):
                newest[name] = obj
        return [newest[n] for n in sorted(newest)]

    def listed(self, namespace: str) -> None:
        """kopf delivered a Subscription of `namespace` from a listing (its initial one or a relist): a LIST
        follows once no listing event came for `QUIET_S` (one per relist). Call on the event loop."""
        loop = asyncio.get_running_loop()
        self._last_listing[namespace] = loop.time()
        if self.lister is None or namespace in self._checks:
            return
        self._checks[namespace] = loop.create_task(self._check(namespace))

    async def _check(self, namespace: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (wait := self._last_listing[namespace] + QUIET_S - loop.time()) > 0:
                await asyncio.sleep(wait)
            assert self.lister is not None and self.index is not None
            items, list_rv = await self.lister(namespace)
            self.checks += 1
            live = {_meta(o)[0] for o in items}
            gone = frozenset(uid for uid, rv in map(_meta, self.index.get(namespace) or ())
                             if uid not in live and list_rv and not _newer(rv, list_rv))
            self._gone[namespace] = gone
            if gone:
                log.info("Namespace %s: %d Subscription(s) deleted while the watch was away; left out", namespace,
                         len(gone))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next listing event checks again
            log.warning("Namespace %s: the Subscription check after a relist failed (%s)", namespace,
                        type(exc).__name__)
        finally:
            self._checks.pop(namespace, None)

    def close(self) -> None:
        """Cancel the checks in flight (the operator's cleanup)."""
        for task in list(self._checks.values()):
            task.cancel()
        self._checks.clear()


def index_entry(namespace: str | None, body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the kopf index keeps of one Subscription: ``{namespace: body}``, the body as a plain dict of its
    top-level fields (their values are the watch event's own parsed JSON, never changed in place)."""
    return {str(namespace or ""): dict(body)}
