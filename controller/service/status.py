"""The one status writer of an AgentBox's watcher: one patch per pass, only when something changed, the
watcher's conditions merged by type into the stored list (`controller.conditions.merge_conditions`) under
optimistic concurrency, so the reconcile handler's conditions and the watcher's never overwrite each other.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from controller.conditions import merge_conditions
from controller.kube.objects import Kube

MAX_CONFLICTS = 5
"""Retries of a write that met another writer (409) before it is left to the next pass."""


class StatusWriter:
    """Writes status fields and merges conditions by type into one object's stored status.

    Args:
        kube: the Kubernetes client wrapper.
        plural, namespace, name: the object (our group and version).
        clock: returns the current UTC instant (lastTransitionTime of a flip against the stored list).
    """

    def __init__(self, kube: Kube, plural: str, namespace: str, name: str, clock: Callable[[], Any]) -> None:
        self.kube, self.plural, self.namespace, self.name, self.clock = kube, plural, namespace, name, clock
        self._last: Any = None
        self._lock = asyncio.Lock()  # snapshots reach the API server in the order taken

    def forget(self) -> None:
        """The next write goes through even when it equals the last one (another writer changed status)."""
        self._last = None

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
            kubernetes.client.ApiException: other than 404 (deleted: nothing written) and 409 (retried).
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
                await self.kube.patch_status(self.plural, self.namespace, self.name, patch)
                self._last = key
                return True
            for _ in range(MAX_CONFLICTS):
                obj = await self.kube.get_custom(self.plural, self.namespace, self.name)
                if obj is None:
                    return False
                stored = list((obj.get("status") or {}).get("conditions") or [])
                merged = merge_conditions(stored, conditions, self.clock(), guards)
                if merged != stored:
                    patch["conditions"] = merged
                else:
                    patch.pop("conditions", None)
                rv = (obj.get("metadata") or {}).get("resourceVersion") if "conditions" in patch else None
                if await self.kube.patch_status_at(self.plural, self.namespace, self.name, patch, rv):
                    self._last = key
                    return True
            return False
