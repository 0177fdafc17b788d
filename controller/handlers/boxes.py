"""AgentBox handlers: reconcile on change, one tab watcher daemon per box."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller import metrics
from controller.runtime import Runtime
from controller.service.boxes import reconcile_box
from controller.service.tabs import BoxWatcher


@kopf.on.resume(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", registry=REGISTRY)
@kopf.on.create(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", registry=REGISTRY)
@kopf.on.update(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="reconcile-box", registry=REGISTRY)
async def reconcile(body: kopf.Body, memo: kopf.Memo, patch: kopf.Patch, **_: Any) -> None:
    """Create the box credentials Secret and pod; report conditions; wake the tab watcher."""
    rt: Runtime = memo.runtime
    outcome = await reconcile_box(dict(body), rt)
    for type_, reason, message in outcome.events:
        kopf.event(body, type=type_, reason=reason, message=message)
    patch.status.update(outcome.status)
    rt.wakeup(body.metadata.namespace, body.metadata.name).set()
    if outcome.retry_after:
        raise kopf.TemporaryError(outcome.events[-1][2] if outcome.events else "retrying", delay=outcome.retry_after)


@kopf.daemon(C.GROUP, C.VERSION, C.AGENTBOX_PLURAL, id="watch-tabs", cancellation_timeout=5.0, registry=REGISTRY)
async def watch_tabs(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                     logger: logging.Logger, **_: Any) -> None:
    """Watch the box's tabs until the box is deleted, sleeping until the next deadline."""
    rt: Runtime = memo.runtime
    ns, name = body.metadata.namespace, body.metadata.name

    def post(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)

    watcher = BoxWatcher(rt, ns, name, post)
    wake = rt.wakeup(ns, name)
    try:
        while not stopped:
            try:
                delay = await watcher.tick(dict(body))
            except Exception as exc:  # noqa: BLE001 - one box's failure never stops the others
                logger.warning("Tab watch failed (%s); retrying", type(exc).__name__)
                delay = rt.settings.scan_interval_s
            wake.clear()
            loop = asyncio.get_running_loop()
            until = loop.time() + delay
            while not stopped and not wake.is_set():
                remaining = until - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(wake.wait(), timeout=min(remaining, 1.0))
                except asyncio.TimeoutError:
                    pass
    finally:
        rt.wakeups.pop((ns, name), None)
        metrics.forget_box(ns, name)
