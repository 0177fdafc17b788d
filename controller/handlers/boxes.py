"""AgentBox handlers: reconcile on change, one tab watcher daemon per box."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller import metrics
from controller.handlers.daemons import existence_check, events_here, poster, run_passes, run_sharded, served_here
from controller.events import ObjectRef
from controller.runtime import Runtime
from controller.service.boxes import reconcile_box
from controller.service.status import box_writer, forget_writer
from controller.service.tabs import BoxWatcher


@kopf.on.resume(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", when=served_here(C.AGENTBOX_PLURAL),
                registry=REGISTRY)
@kopf.on.create(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", when=served_here(C.AGENTBOX_PLURAL),
                registry=REGISTRY)
@kopf.on.update(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", when=served_here(C.AGENTBOX_PLURAL),
                registry=REGISTRY)
async def reconcile(body: kopf.Body, memo: kopf.Memo, reason: Any = None, **_: Any) -> None:
    """Create the box credentials Secret and pod; report status through the box's one status writer (shared
    with its tab watcher: fields and Ready in one patch, conditions merged by type); wake the tab watcher.
    With shards, only in the replica serving the box's shard (`served_here`)."""
    retry_after, why = await _reconcile(body, memo)
    if reason == kopf.Reason.UPDATE:  # a human changed the box (not the operator's start)
        memo.runtime.box_changed(body.metadata.namespace, body.metadata.name)
    else:
        memo.runtime.wakeup(body.metadata.namespace, body.metadata.name).set()
    if retry_after:
        raise kopf.TemporaryError(why, delay=retry_after)


async def _reconcile(body: kopf.Body, memo: kopf.Memo) -> tuple[float | None, str]:
    """One reconcile of the box: (seconds until it must be retried or None, why)."""
    rt: Runtime = memo.runtime
    outcome = await reconcile_box(dict(body), rt)
    post = poster(memo, body)
    for type_, reason, message in outcome.events:
        post(type_, reason, message)
    writer = box_writer(rt, body.metadata.namespace, body.metadata.name)
    writer.seen(body)
    await writer.write(outcome.status, outcome.conditions)
    return outcome.retry_after, (outcome.events[-1][2] if outcome.events else "retrying")


async def _reconcile_until_done(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                                logger: logging.Logger) -> None:
    """The reconcile of a box whose shard this replica gained (its create or resume handler ran elsewhere,
    or nowhere while the shard had no holder), retried as kopf would retry the handler."""
    while not stopped:
        try:
            retry_after, _why = await _reconcile(body, memo)
        except Exception as exc:  # noqa: BLE001 -- logged by type (messages may hold secrets)
            logger.warning("Reconcile of a gained box failed (%s); retrying", type(exc).__name__)
            retry_after = memo.runtime.settings.retry_delay_s
        if not retry_after:
            return
        await asyncio.sleep(retry_after)


_ASKED = (C.ANNOTATION_RESUME_NOW, C.ANNOTATION_RESUME_AT, C.ANNOTATION_CANCEL_RESUME)
_asked: dict[tuple[str, str], tuple[str | None, ...]] = {}


@kopf.on.event(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="box-event", when=events_here(C.AGENTBOX_PLURAL),
               registry=REGISTRY)
async def box_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every watch event of a box (one handler: kopf's cost is per handler and event). Records that the box
    exists or is gone (`Runtime.presence`: the tab watcher's existence check needs no GET), and wakes its tab
    watcher when it was deleted (no finalizer holds it: the watcher sees it gone and stops) or a human set or
    changed a resume annotation (resume-now, resume-at, cancel-resume: on the live stream nothing else would
    wake it, kopf calls no update handler for annotations). With shards by label, a box relabelled out of the
    shard its tab watcher runs for here has that watcher stopped at once (`Sharding.relabeled`). Only records,
    wakes and stops."""
    rt: Runtime = memo.runtime
    rt.presence.observe(C.AGENTBOX_PLURAL, event.get("type"), event.get("object"))
    key = (body.metadata.namespace, body.metadata.name)
    if rt.sharding is not None and rt.sharding.by == "label":  # relabelled to another shard: stop here at once
        rt.sharding.relabeled(C.AGENTBOX_PLURAL, *key, body.metadata.labels)
    if event.get("type") == "DELETED":
        _asked.pop(key, None)
        forget_writer(rt, C.AGENTBOX_PLURAL, *key)
        if key in rt.wakeups:
            rt.box_changed(*key)
        return
    annotations = body.metadata.annotations or {}
    values = tuple(annotations.get(a) for a in _ASKED)
    if _asked.get(key, (None,) * len(_ASKED)) != values:
        _asked[key] = values
        rt.box_changed(*key)


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
        memo.runtime.box_changed(body.metadata.namespace, box)


@kopf.daemon(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="watch-tabs", cancellation_timeout=5.0, registry=REGISTRY)
async def watch_tabs(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                     logger: logging.Logger, **_: Any) -> None:
    """Watch the box's tabs until the box is deleted, sleeping until the next deadline. With shards, only
    while this replica serves the box's shard (`run_sharded`: it waits for it, stops when it is given back)."""
    rt: Runtime = memo.runtime
    if rt.sharding is None:
        await _watch_tabs(body, memo, stopped, logger)
        return

    async def serve(gained: bool) -> bool:
        again = asyncio.ensure_future(_reconcile_until_done(body, memo, stopped, logger)) if gained else None
        try:
            return await _watch_tabs(body, memo, stopped, logger, serving=lambda: rt.sharding.serves(
                C.AGENTBOX_PLURAL, body.metadata.namespace, body.metadata.name, body.metadata.labels))
        finally:
            if again is not None:
                again.cancel()
    await run_sharded(rt, C.AGENTBOX_PLURAL, body, stopped, logger, "Tab watch", serve)


async def _watch_tabs(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: logging.Logger,
                      serving: Callable[[], bool] | None = None) -> bool:
    """The tab watcher's passes (True: the box is gone)."""
    rt: Runtime = memo.runtime
    ns, name = body.metadata.namespace, body.metadata.name

    watcher = BoxWatcher(rt, ns, name, poster(memo, body))
    # A box re-created under the same name is another object with its own daemon (kopf keys daemons by uid),
    # which may start before this one ends: what is kept by name is dropped by the newest daemon only.
    rt.daemon_uids[(ns, name)] = body.metadata.uid
    try:
        return await run_passes(lambda: watcher.tick(dict(body)), rt.wakeup(ns, name), stopped,
                                rt.settings.scan_interval_s, logger, "Tab watch",
                                existence_check(rt, C.AGENTBOX_PLURAL, ns, name, body.metadata.uid), serving)
    finally:  # what is kept about the box goes first: a cancelled aclose() must not skip it
        if rt.daemon_uids.get((ns, name)) == body.metadata.uid:
            rt.daemon_uids.pop((ns, name), None)
            rt.wakeups.pop((ns, name), None)
            rt.interests.pop((ns, name), None)
            rt.box_changes.pop((ns, name), None)
            forget_writer(rt, C.AGENTBOX_PLURAL, ns, name)
            metrics.forget_box(ns, name)
        rt.presence.forget(C.AGENTBOX_PLURAL, ns, name, body.metadata.uid)
        rt.events.forget(ObjectRef.of(body))  # deleted, or the process stops: its Event memory goes too
        await watcher.aclose()
