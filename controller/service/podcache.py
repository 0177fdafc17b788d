"""The latest body of each box pod as the pod watch delivered it, so a watcher pass need not GET its pod.

kopf already watches every box pod (`controller.handlers.boxes.box_pod_changed` gets each event); every
watcher pass also read its pod with a GET, a thousand GETs when a reset woke a thousand boxes
(bench/scale.py). The watcher uses a body from here only while its live tmux stream is attached to that
very pod (same uid; see `controller.service.tabs.BoxWatcher`): the stream's exec proves the pod still
exists (a pod deleted or replaced ends it), and the watch brings its changes (a deletion started, a
container that ended). In every other case, and when the watch has not delivered the pod, it reads the
pod with a GET as before. Ownership is checked on the body exactly as on a GET's answer.
"""

from __future__ import annotations

from typing import Any, Mapping

from controller.kube.objects import identity


def _newer(a: str, b: str) -> bool:
    """resourceVersion `a` is newer than `b` (integers where both are; else `a` is taken as newer: the
    watch delivers one object's events in order)."""
    try:
        return int(a) > int(b)
    except ValueError:
        return True


class WatchedPods:
    """Box pods by (namespace, name), each the latest body a watch event delivered; a DELETED event
    removes it. Bodies are shared: read them, never change them.

    Attributes:
        events: watch events observed (for tests and benchmarks).
    """

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.events = 0

    def observe(self, event_type: str | None, obj: Mapping[str, Any] | None) -> None:
        """One watch event of a box pod: `event_type` ADDED | MODIFIED | DELETED (None: kopf's initial
        listing), `obj` the pod as the API server sent it. An event older than the stored body (a lower
        resourceVersion of the same pod uid) is ignored."""
        ident = identity(obj)
        if ident is None:
            return
        ns, name, uid = ident
        meta = obj["metadata"]  # type: ignore[index] - identity() read it
        self.events += 1
        key = (ns, name)
        if event_type == "DELETED":
            stored = self._pods.get(key)
            if stored is not None and (stored.get("metadata") or {}).get("uid") == uid:
                del self._pods[key]
            return
        stored = self._pods.get(key)
        if stored is not None:
            smeta = stored.get("metadata") or {}
            if smeta.get("uid") == uid and not _newer(str(meta.get("resourceVersion") or ""),
                                                       str(smeta.get("resourceVersion") or "")):
                return
        self._pods[key] = obj

    def get(self, namespace: str, name: str, uid: str) -> Mapping[str, Any] | None:
        """The stored body of pod `name` when it is the pod with `uid`; None when absent or another pod."""
        pod = self._pods.get((namespace, name))
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            return None
        return pod

    def __len__(self) -> int:
        return len(self._pods)
