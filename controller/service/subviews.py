"""Rotation's views of a namespace's Subscriptions, converted once per LIST result, not once per box pass.

Every watcher pass lists its namespace's Subscriptions (one LIST shared by simultaneous callers,
`controller.kube.objects.Kube.list_custom_shared`) and needs them as rotation candidates and reserves
(`controller.domain.box.candidate_from`, `reserve_from`, both pure). A thousand boxes woken by one reset
converted the same hundred objects a thousand times (bench/scale.py profile: 15 % of the operator's CPU
in a burst). The conversions depend only on the object, and a stored object's content is identified by
its ``metadata.uid`` and ``metadata.resourceVersion`` (the API server changes the resourceVersion on every
write, status included), so they are memoized by those.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from controller.domain.box import candidate_from, reserve_from
from controller.domain.rotation import Candidate
from controller.domain.box import Reserve

_Key = tuple[str, str, str]
"""(name, uid, resourceVersion) of one stored object."""


def _key(obj: Mapping[str, Any]) -> _Key | None:
    meta = obj.get("metadata") or {}
    name, uid, rv = meta.get("name"), meta.get("uid"), meta.get("resourceVersion")
    if not (isinstance(name, str) and isinstance(uid, str) and isinstance(rv, str) and uid and rv):
        return None
    return name, uid, rv


class SubscriptionViews:
    """Candidates and reserves of a list of Subscription objects, computed once per object version.

    `of(namespace, subs)` returns what ``tuple(candidate_from(o) for o in subs)`` and
    ``{name: reserve_from(o)}`` would, but a list whose objects all carry the same (name, uid,
    resourceVersion) as the namespace's last list gets the same (immutable) values back without any
    conversion, and a changed list converts only the objects that changed. An object without uid or
    resourceVersion is converted every time (never memoized). Memory: the views of each namespace's last
    list only.

    Attributes:
        conversions: objects converted so far (for tests and benchmarks).
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[tuple[_Key | None, ...], tuple[Candidate, ...], Mapping[str, Reserve]]] = {}
        self._objects: dict[str, dict[_Key, tuple[Candidate, Reserve]]] = {}
        self.conversions = 0

    def of(self, namespace: str, subs: Sequence[Mapping[str, Any]]
           ) -> tuple[tuple[Candidate, ...], Mapping[str, Reserve]]:
        """(candidates in list order, reserve per Subscription name: a read-only mapping) of `subs`, the
        Subscription objects of `namespace` as listed (dicts with metadata, spec, status).

        Raises:
            KeyError: an object without ``metadata.name`` (as `candidate_from`).
        """
        keys = tuple(_key(o) for o in subs)
        last = self._last.get(namespace)
        if last is not None and last[0] == keys and None not in keys:
            return last[1], last[2]
        known = self._objects.get(namespace, {})
        objects: dict[_Key, tuple[Candidate, Reserve]] = {}
        candidates: list[Candidate] = []
        reserves: dict[str, Reserve] = {}
        for key, obj in zip(keys, subs):
            view = known.get(key) if key is not None else None
            if view is None:
                view = (candidate_from(obj), reserve_from(obj))
                self.conversions += 1
            if key is not None:
                objects[key] = view
            candidates.append(view[0])
            reserves[obj["metadata"]["name"]] = view[1]
        out = (tuple(candidates), MappingProxyType(reserves))
        self._objects[namespace] = objects
        self._last[namespace] = (keys, *out)
        return out
