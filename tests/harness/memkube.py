"""An in-memory stand-in for the few `controller.kube.objects.Kube` calls the Subscription services make
(Secrets, custom objects, status patches with resourceVersion checks), for unit tests of services. Like the
API server it bumps resourceVersion on every write and refuses a conditional patch at an older version (409,
returned as False by `patch_status_at`)."""

from __future__ import annotations

import copy
from typing import Any


class MemKube:
    """Secrets and Subscriptions in memory; counts Secret reads."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.secret_reads: list[str] = []
        self.patches: list[dict[str, Any]] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}

    async def get_secret_value(self, namespace: str, name: str, key: str) -> tuple[bool, str | None]:
        self.secret_reads.append(name)
        data = self.secrets.get((namespace, name))
        if data is None:
            return False, None
        return True, data.get(key)

    async def list_custom(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        return [o for (p, ns, _), o in self.objects.items() if p == plural and ns == namespace]

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((plural, namespace, name)))

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> Any:
        self.patches.append(status)
        obj = self.objects.setdefault((plural, namespace, name), {"metadata": {"name": name, "namespace": namespace}})
        st = obj.setdefault("status", {})
        for k, v in status.items():
            if v is None:
                st.pop(k, None)
            else:
                st[k] = v
        meta = obj["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        return copy.deepcopy(obj)

    async def patch_status_at(self, plural: str, namespace: str, name: str, status: dict[str, Any],
                              resource_version: str | None) -> Any:
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            return None
        if resource_version is not None and (obj["metadata"].get("resourceVersion") != resource_version):
            return False
        return await self.patch_status(plural, namespace, name, status)
