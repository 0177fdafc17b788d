"""Subscription handlers: validate the login Secret; a reader daemon keeps the windows fresh."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller import metrics
from controller.handlers.daemons import existence_check, poster, run_passes
from controller.runtime import Runtime
from controller.service.status import forget_writer
from controller.service.subscriptions import SubscriptionReader, validate_subscription, wake_boxes


@kopf.on.resume(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="validate-subscription", registry=REGISTRY)
@kopf.on.create(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="validate-subscription", registry=REGISTRY)
@kopf.on.update(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="validate-subscription", registry=REGISTRY)
async def validate(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Check the Secret and login file; CredentialsValid and the threshold sentence are written by the
    service through the Subscription's one status writer (never through kopf's patch)."""
    rt: Runtime = memo.runtime
    events = await validate_subscription(dict(body), rt)
    post = poster(memo, body)
    for type_, reason, message in events:
        post(type_, reason, message)
    rt.wakeup(C.SUBSCRIPTION_PLURAL + "/" + body.metadata.namespace, body.metadata.name).set()


@kopf.on.event(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="subscription-event", registry=REGISTRY)
async def subscription_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every watch event of a subscription: record that it exists or is gone (`Runtime.presence`: the usage
    reader's existence check needs no GET). Deleted (no finalizer holds it): stop its reader now and wake
    the boxes of its namespace (rotation moves them at once)."""
    rt: Runtime = memo.runtime
    rt.presence.observe(C.SUBSCRIPTION_PLURAL, event.get("type"), event.get("object"))
    if event.get("type") != "DELETED":
        return
    wake = rt.wakeups.get((C.SUBSCRIPTION_PLURAL + "/" + body.metadata.namespace, body.metadata.name))
    if wake is not None:
        wake.set()
    forget_writer(rt, C.SUBSCRIPTION_PLURAL, body.metadata.namespace, body.metadata.name)
    wake_boxes(rt, body.metadata.namespace, body.metadata.name, (body.get("spec") or {}).get("provider"))


@kopf.daemon(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="read-usage", cancellation_timeout=5.0, registry=REGISTRY)
async def read_usage(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                     logger: logging.Logger, **_: Any) -> None:
    """One usage reader per subscription, shared by every box on it."""
    rt: Runtime = memo.runtime
    ns, name = body.metadata.namespace, body.metadata.name

    reader = SubscriptionReader(rt, ns, name, poster(memo, body))
    key = (C.SUBSCRIPTION_PLURAL + "/" + ns, name)
    rt.daemon_uids[key] = body.metadata.uid  # a re-created Subscription's reader may start before this one ends
    try:
        await run_passes(lambda: reader.tick(dict(body)), rt.wakeup(*key), stopped,
                         rt.settings.usage_interval_s, logger, "Usage read",
                         existence_check(rt, C.SUBSCRIPTION_PLURAL, ns, name, body.metadata.uid))
    finally:
        if rt.daemon_uids.get(key) == body.metadata.uid:  # only the newest reader drops the shared wake-up
            rt.daemon_uids.pop(key, None)
            rt.wakeups.pop(key, None)
            forget_writer(rt, C.SUBSCRIPTION_PLURAL, ns, name)
            metrics.forget_subscription(ns, name)
        rt.presence.forget(C.SUBSCRIPTION_PLURAL, ns, name, body.metadata.uid)
