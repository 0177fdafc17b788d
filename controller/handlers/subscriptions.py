"""Subscription handlers: validate the login Secret; a reader daemon keeps the windows fresh."""

from __future__ import annotations

import logging
from typing import Any, Callable

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller import metrics
from controller.handlers.daemons import existence_check, poster, run_passes, run_sharded, served_here
from controller.runtime import Runtime
from controller.service.status import forget_writer
from controller.service.subcache import index_entry
from controller.service.subscriptions import SubscriptionReader, validate_subscription, wake_boxes


@kopf.on.resume(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="validate-subscription",
                when=served_here(C.SUBSCRIPTION_PLURAL), registry=REGISTRY)
@kopf.on.create(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="validate-subscription",
                when=served_here(C.SUBSCRIPTION_PLURAL), registry=REGISTRY)
@kopf.on.update(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="validate-subscription",
                when=served_here(C.SUBSCRIPTION_PLURAL), registry=REGISTRY)
async def validate(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Check the Secret and login file; CredentialsValid and the threshold sentence are written by the
    service through the Subscription's one status writer (never through kopf's patch). With shards, only in
    the replica serving the Subscription's shard (`served_here`)."""
    await _validate(body, memo)
    memo.runtime.wakeup(C.SUBSCRIPTION_PLURAL + "/" + body.metadata.namespace, body.metadata.name).set()


async def _validate(body: kopf.Body, memo: kopf.Memo) -> None:
    events = await validate_subscription(dict(body), memo.runtime)
    post = poster(memo, body)
    for type_, reason, message in events:
        post(type_, reason, message)


@kopf.index(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="subscriptions_by_namespace", registry=REGISTRY)
def subscriptions_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    """kopf's index of every Subscription by namespace (`controller.service.subcache`): the watcher passes
    read their namespace's Subscriptions here, not with a LIST. kopf updates it before any other handler of
    the same event runs, and runs no resource handler before its initial listing is in."""
    return index_entry(namespace, body)


@kopf.on.event(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="subscription-event", registry=REGISTRY)
async def subscription_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every watch event of a subscription: record that it exists or is gone (`Runtime.presence`: the usage
    reader's existence check needs no GET). Deleted (no finalizer holds it): stop its reader now and wake
    the boxes of its namespace (rotation moves them at once)."""
    rt: Runtime = memo.runtime
    rt.presence.observe(C.SUBSCRIPTION_PLURAL, event.get("type"), event.get("object"))
    if event.get("type") is None:  # from a listing: after a relist, one LIST finds what was deleted meanwhile
        rt.subscriptions.listed(body.metadata.namespace)
    if event.get("type") != "DELETED":
        # Its reader may run in another replica (shards), and the passes read the Subscriptions from the
        # index, which has this event only now: a state change wakes the boxes it concerns from here.
        _wake_on_state_change(rt, body)
        return
    _states.pop((body.metadata.namespace, body.metadata.name), None)
    wake = rt.wakeups.get((C.SUBSCRIPTION_PLURAL + "/" + body.metadata.namespace, body.metadata.name))
    if wake is not None:
        wake.set()
    forget_writer(rt, C.SUBSCRIPTION_PLURAL, body.metadata.namespace, body.metadata.name)
    wake_boxes(rt, body.metadata.namespace, body.metadata.name, (body.get("spec") or {}).get("provider"))


_states: dict[tuple[str, str], str | None] = {}


def _wake_on_state_change(rt: Runtime, body: kopf.Body) -> None:
    """Wake this replica's boxes that a change of the Subscription's `status.state` concerns. Its usage
    reader wakes them too when it runs here, but their passes read the Subscriptions from the watch
    (`controller.service.subcache`), which may not have brought the change yet; with shards the reader may
    run in another replica."""
    key = (body.metadata.namespace, body.metadata.name)
    state = (body.get("status") or {}).get("state")
    if key in _states and _states[key] != state:
        wake_boxes(rt, key[0], key[1], (body.get("spec") or {}).get("provider"))
    _states[key] = state


@kopf.daemon(C.GROUP, C.VERSION, C.SUBSCRIPTION_PLURAL, id="read-usage", cancellation_timeout=5.0, registry=REGISTRY)
async def read_usage(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                     logger: logging.Logger, **_: Any) -> None:
    """One usage reader per subscription, shared by every box on it (with shards: in the one replica serving
    the Subscription's shard)."""
    rt: Runtime = memo.runtime
    if rt.sharding is None:
        await _read_usage(body, memo, stopped, logger)
        return

    async def serve(gained: bool) -> bool:
        if gained:  # its create or resume handler ran elsewhere (or nowhere while the shard had no holder)
            try:
                await _validate(body, memo)
            except Exception as exc:  # noqa: BLE001 -- the reader reports the Secret's problems too
                logger.warning("Validation of a gained Subscription failed (%s)", type(exc).__name__)
        return await _read_usage(body, memo, stopped, logger, serving=lambda: rt.sharding.serves(
            C.SUBSCRIPTION_PLURAL, body.metadata.namespace, body.metadata.name))
    await run_sharded(rt, C.SUBSCRIPTION_PLURAL, body, stopped, logger, "Usage read", serve)


async def _read_usage(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: logging.Logger,
                      serving: Callable[[], bool] | None = None) -> bool:
    """The usage reader's passes (True: the Subscription is gone)."""
    rt: Runtime = memo.runtime
    ns, name = body.metadata.namespace, body.metadata.name

    reader = SubscriptionReader(rt, ns, name, poster(memo, body))
    key = (C.SUBSCRIPTION_PLURAL + "/" + ns, name)
    rt.daemon_uids[key] = body.metadata.uid  # a re-created Subscription's reader may start before this one ends
    try:
        return await run_passes(lambda: reader.tick(dict(body)), rt.wakeup(*key), stopped,
                                rt.settings.usage_interval_s, logger, "Usage read",
                                existence_check(rt, C.SUBSCRIPTION_PLURAL, ns, name, body.metadata.uid), serving)
    finally:
        if rt.daemon_uids.get(key) == body.metadata.uid:  # only the newest reader drops the shared wake-up
            rt.daemon_uids.pop(key, None)
            rt.wakeups.pop(key, None)
            forget_writer(rt, C.SUBSCRIPTION_PLURAL, ns, name)
            metrics.forget_subscription(ns, name)
        rt.presence.forget(C.SUBSCRIPTION_PLURAL, ns, name, body.metadata.uid)
