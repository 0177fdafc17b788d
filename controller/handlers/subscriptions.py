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


def _deleted(type: str, **_: Any) -> bool:  # noqa: A002 - kopf passes the watch event type as `type`
    return type == "DELETED"


@kopf.on.event(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="subscription-gone", when=_deleted, registry=REGISTRY)
async def gone(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted subscription (seen on the watch: no finalizer holds it): stop its reader now and wake
    the boxes of its namespace (rotation moves them at once)."""
    rt: Runtime = memo.runtime
    event = rt.wakeups.get((C.SUBSCRIPTION_PLURAL + "/" + body.metadata.namespace, body.metadata.name))
    if event is not None:
        event.set()
    forget_writer(rt, C.SUBSCRIPTION_PLURAL, body.metadata.namespace, body.metadata.name)
    wake_boxes(rt, body.metadata.namespace, body.metadata.name, (body.get("spec") or {}).get("provider"))


@kopf.daemon(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="read-usage", cancellation_timeout=5.0, registry=REGISTRY)
async def read_usage(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                     logger: logging.Logger, **_: Any) -> None:
    """One usage reader per subscription, shared by every box on it."""
    rt: Runtime = memo.runtime
    ns, name = body.metadata.namespace, body.metadata.name

    reader = SubscriptionReader(rt, ns, name, poster(memo, body))
    try:
        await run_passes(lambda: reader.tick(dict(body)), rt.wakeup(C.SUBSCRIPTION_PLURAL + "/" + ns, name), stopped,
                         rt.settings.usage_interval_s, logger, "Usage read",
                         existence_check(rt, C.SUBSCRIPTION_PLURAL, ns, name, body.metadata.uid))
    finally:
        rt.wakeups.pop((C.SUBSCRIPTION_PLURAL + "/" + ns, name), None)
        forget_writer(rt, C.SUBSCRIPTION_PLURAL, ns, name)
        metrics.forget_subscription(ns, name)
