"""The one status writer per object: one patch per write, only when something changed, each writer's
conditions merged by type into the stored list (`controller.conditions.merge_conditions`) under optimistic
concurrency, so two writers' conditions never overwrite each other.

An AgentBox's watcher writes through one (:mod:`controller.service.tabs`). A Subscription has exactly one,
held in the runtime (:func:`subscription_writer`) and shared by its three writers: the validate handler
(:func:`controller.service.subscriptions.validate_subscription`), the usage reader and the login keeper.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from controller import constants as C
from controller.conditions import merge_conditions
from controller.kube.objects import Kube

MAX_CONFLICTS = 5
"""Retries of a write that met another writer (409) before it is left to the next pass."""


class StatusWriter:
    """Writes status fields and merges conditions by type into one object's stored status.

    The stored conditions and resourceVersion are taken from the caller's copy of the object (`seen`) or
    from the answer to the writer's last patch; the object is read again only after another writer came
    first (409), so a write costs one request.

    Args:
        kube: the Kubernetes client wrapper.
        plural, namespace, name: the object (our group and version).
        clock: returns the current UTC instant (lastTransitionTime of a flip against the stored list).
    """

    def __init__(self, kube: Kube, plural: str, namespace: str, name: str, clock: Callable[[], Any]) -> None:
        self.kube, self.plural, self.namespace, self.name, self.clock = kube, plural, namespace, name, clock
        self._last: Any = None
        self._stored: tuple[list[dict[str, Any]], str | None] | None = None  # (conditions, resourceVersion)
        self._lock = asyncio.Lock()  # snapshots reach the API server in the order taken

    def forget(self) -> None:
        """The next write goes through even when it equals the last one (another writer changed status)."""
        self._last = None

    def seen(self, obj: Mapping[str, Any]) -> None:
        """The object as the caller last saw it (e.g. kopf's body): its conditions and resourceVersion are
        used for the next merge unless the writer's own last patch is newer."""
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if self._stored is not None and self._stored[1] is not None and rv is not None and \
                _newer(self._stored[1], str(rv)):
            return
        self._stored = (list((obj.get("status") or {}).get("conditions") or []), rv)

    async def write(self, fields: Mapping[str, Any], conditions: tuple[dict[str, Any], ...] | list[dict[str, Any]] = (),
                    guards: dict[str, frozenset[str]] | None = None) -> bool:
        """Patch `fields` and merge `conditions` by type; nothing when both equal the last write.

        Args:
            fields: status fields written as they are (lists replace stored lists; None removes a field).
            conditions: the writer's conditions (metav1.Condition dicts); other types are kept as stored.
            guards: condition type -> reasons under which a stored condition of that type may be replaced.
        Returns:
            True when a patch was sent.
        Raises:
            controller.kube.rest.KubeApiError: other than 404 (deleted: nothing written) and 409 (retried).
        """
        key = (repr(sorted(fields.items())), tuple((c["type"], c["status"], c["reason"], c["message"])
                                                   for c in conditions))
        async with self._lock:
            if key == self._last:
                return False
            patch: dict[str, Any] = dict(fields)
            if not conditions and not patch:
                return False
            if not conditions:
                # No precondition (no list to merge), but the answer's resourceVersion is kept: the next
                # write of conditions is then made at the version this write created, not refused (409)
                # and read again because of it.
                out = await self.kube.patch_status_at(self.plural, self.namespace, self.name, patch, None)
                if isinstance(out, dict):
                    self._remember(out)
                self._last = key
                return True
            for _ in range(MAX_CONFLICTS):
                if self._stored is None:
                    obj = await self.kube.get_custom(self.plural, self.namespace, self.name)
                    if obj is None:
                        return False
                    self._remember(obj)
                stored, rv = self._stored
                merged = merge_conditions(stored, conditions, self.clock(), guards)
                if merged != stored:
                    patch["conditions"] = merged
                else:
                    patch.pop("conditions", None)
                    if not patch:  # the stored conditions already say it and no field to write: no request
                        self._last = key
                        return False
                out = await self.kube.patch_status_at(self.plural, self.namespace, self.name, patch,
                                                      rv if "conditions" in patch else None)
                if out is False:
                    self._stored = None  # another writer came first: read what it wrote, merge again
                    continue
                if isinstance(out, dict):
                    self._remember(out)
                self._last = key
                return True
            return False

    def conditions(self) -> list[dict[str, Any]]:
        """The newest conditions this writer knows: the caller's copy (`seen`) or, when newer, what the last
        patch through this writer stored (e.g. the reconcile's Ready, written through the same writer just
        before it woke the box's watcher, whose copy of the object may not show it yet). A copy."""
        return [dict(c) for c in (self._stored[0] if self._stored is not None else [])]

    def _remember(self, obj: Mapping[str, Any]) -> None:
        """The object as the API server stored it after our patch: its conditions and resourceVersion."""
        self._stored = (list((obj.get("status") or {}).get("conditions") or []),
                        (obj.get("metadata") or {}).get("resourceVersion"))


def _newer(a: str, b: str) -> bool:
    """resourceVersion `a` is newer than `b` (compared as integers where both are; opaque otherwise)."""
    try:
        return int(a) > int(b)
    except ValueError:
        return False


def writer_of(rt: Any, plural: str, namespace: str, name: str) -> StatusWriter:
    """The one :class:`StatusWriter` of an object, held in the runtime (``rt.status_writers``) so that every
    writer of that object in this process shares it (made on first use).

    Args:
        rt: :class:`controller.runtime.Runtime` (``kube``, ``clock``, ``status_writers``).
        plural, namespace, name: the object (our group and version).
    """
    key = (plural, namespace, name)
    writer = rt.status_writers.get(key)
    if writer is None:
        writer = rt.status_writers[key] = StatusWriter(rt.kube, plural, namespace, name, rt.clock)
    return writer


def forget_writer(rt: Any, plural: str, namespace: str, name: str) -> None:
    """Drop an object's writer (the object was deleted, or its daemon stopped): nothing is held per object
    that is gone."""
    rt.status_writers.pop((plural, namespace, name), None)


def subscription_writer(rt: Any, namespace: str, name: str) -> StatusWriter:
    """The one status writer of the Subscription ``namespace/name`` (:func:`writer_of`)."""
    return writer_of(rt, C.SUBSCRIPTION_PLURAL, namespace, name)


def box_writer(rt: Any, namespace: str, name: str) -> StatusWriter:
    """The one status writer of the AgentBox ``namespace/name`` (:func:`writer_of`): the reconcile handler,
    the tab watcher and its executor's write-ahead points all write through it, so its merge of conditions
    by type, its 'unchanged since the last write' check and its write order see every write."""
    return writer_of(rt, C.AGENTBOX_PLURAL, namespace, name)
