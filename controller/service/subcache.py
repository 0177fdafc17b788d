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

Freshness: a pass sees what the watch has delivered, at most one watch latency behind a LIST. A change of a
Subscription's ``status.state`` wakes its boxes from the watch event itself
(`controller.handlers.subscriptions.subscription_event`), after the index has that event, so the pass it
wakes sees the new state. Everything a box then does to a Subscription reads it again (a move GETs its
target, the resume re-reads the provider's limits), as before.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class WatchedSubscriptions:
    """Reads kopf's Subscription index: `of(namespace)` is the namespace's Subscriptions sorted by name
    (the order of a LIST's answer), each a dict with metadata, spec and status, shared: read them, never
    change them. `index` is the kopf index (a mapping namespace -> iterable of bodies), None until the
    operator's startup handler got it; while None, `of` returns None (the caller LISTs instead).

    Attributes:
        reads: passes answered from the index (for tests and benchmarks).
    """

    def __init__(self, index: Mapping[str, Iterable[Mapping[str, Any]]] | None = None) -> None:
        self.index = index
        self.reads = 0

    def of(self, namespace: str) -> list[Mapping[str, Any]] | None:
        """The Subscriptions of `namespace` sorted by name, or None when there is no index."""
        if self.index is None:
            return None
        self.reads += 1
        store = self.index.get(namespace)
        return sorted(store or (), key=_name)


def index_entry(namespace: str | None, body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the kopf index keeps of one Subscription: ``{namespace: body}``, the body as a plain dict of its
    top-level fields (their values are the watch event's own parsed JSON, never changed in place)."""
    return {str(namespace or ""): dict(body)}
