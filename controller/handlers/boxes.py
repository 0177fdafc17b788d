"""AgentBox handlers: reconcile on change, one tab watcher daemon per box."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller import metrics
from controller.handlers.daemons import existence_check, poster, run_passes
from controller.events import ObjectRef
from controller.runtime import Runtime
from controller.service.boxes import reconcile_box
from controller.service.status import box_writer, forget_writer
from controller.service.tabs import BoxWatcher


@kopf.on.resume(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", registry=REGISTRY)
@kopf.on.create(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", registry=REGISTRY)
@kopf.on.update(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", registry=REGISTRY)
async def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Create the box credentials Secret and pod; report status through the box's one status writer (shared
    with its tab watcher: fields and Ready in one patch, conditions merged by type); wake the tab watcher."""
    rt: Runtime = memo.runtime
    outcome = await reconcile_box(dict(body), rt)
    post = poster(memo, body)
    for type_, reason, message in outcome.events:
        post(type_, reason, message)
    writer = box_writer(rt, body.metadata.namespace, body.metadata.name)
    writer.seen(body)
    await writer.write(outcome.status, outcome.conditions)
    rt.wakeup(body.metadata.namespace, body.metadata.name).set()
    if outcome.retry_after:
        raise kopf.TemporaryError(outcome.events[-1][2] if outcome.events else "retrying", delay=outcome.retry_after)


def _deleted(type: str, **_: Any) -> bool:  # noqa: A002 - kopf passes the watch event type as `type`
    return type == "DELETED"


@kopf.on.event(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="box-gone", when=_deleted, registry=REGISTRY)
async def gone(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted box (no finalizer holds it): wake its tab watcher, which sees it gone and stops."""
    key = (body.metadata.namespace, body.metadata.name)
    forget_writer(memo.runtime, C.AGENTBOX_PLURAL, *key)
    event = memo.runtime.wakeups.get(key)
    if event is not None:
        event.set()


_ASKED = (C.ANNOTATION_RESUME_NOW, C.ANNOTATION_RESUME_AT, C.ANNOTATION_CANCEL_RESUME)
_asked: dict[tuple[str, str], tuple[str | None, ...]] = {}


@kopf.on.event(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="box-asked", registry=REGISTRY)
async def asked(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A human set or changed a resume annotation (resume-now, resume-at, cancel-resume): wake the box's tab
    watcher now. On the live tmux stream nothing else would (no screen changed; kopf calls no update
    handler for annotations); polling would only see it at its next scan. Only wakes."""
    key = (body.metadata.namespace, body.metadata.name)
    if event.get("type") == "DELETED":
        _asked.pop(key, None)
        return
    annotations = body.metadata.annotations or {}
    values = tuple(annotations.get(a) for a in _ASKED)
    if _asked.get(key, (None,) * len(_ASKED)) != values:
        _asked[key] = values
        memo.runtime.wakeup(*key).set()


@kopf.on.event("", "v1", "pods", id="box-pod-changed", labels={C.LABEL_BOX: kopf.PRESENT,
                                                                  C.LABEL_MANAGED_BY: C.MANAGER_NAME},
               registry=REGISTRY)
async def box_pod_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Keep the pod's latest body for its watcher (`Runtime.pods`: a pass on the live stream reads its pod
    from there instead of a GET). A box pod was deleted, is being deleted, or ended (evicted, failed): wake
    its box's tab watcher now (it heals the pod and updates Ready) instead of at its next scan. Only
    records and wakes; never acts on the pod."""
    memo.runtime.pods.observe(event.get("type"), event.get("object"))
    box = (body.metadata.labels or {}).get(C.LABEL_BOX)
    phase = (body.get("status") or {}).get("phase")
    gone = event.get("type") == "DELETED" or body.metadata.deletion_timestamp or phase in ("Failed", "Succeeded")
    if box and gone:
        memo.runtime.wakeup(body.metadata.namespace, box).set()


@kopf.daemon(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="watch-tabs", cancellation_timeout=5.0, registry=REGISTRY)
async def watch_tabs(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                     logger: logging.Logger, **_: Any) -> None:
    """Watch the box's tabs until the box is deleted, sleeping until the next deadline."""
    rt: Runtime = memo.runtime
    ns, name = body.metadata.namespace, body.metadata.name

    watcher = BoxWatcher(rt, ns, name, poster(memo, body))
    try:
        await run_passes(lambda: watcher.tick(dict(body)), rt.wakeup(ns, name), stopped,
                         rt.settings.scan_interval_s, logger, "Tab watch",
                         existence_check(rt, C.AGENTBOX_PLURAL, ns, name, body.metadata.uid))
    finally:
        await watcher.aclose()
        rt.wakeups.pop((ns, name), None)
        rt.interests.pop((ns, name), None)
        forget_writer(rt, C.AGENTBOX_PLURAL, ns, name)
        metrics.forget_box(ns, name)
        rt.events.forget(ObjectRef.of(body))  # deleted, or the process stops: its Event memory goes too
