"""The loop shared by the per-object daemons: run one pass, then sleep until the pass's deadline,
an early wake-up (a change that needs action now), or the daemon being stopped."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import kopf


async def run_passes(tick: Callable[[], Awaitable[float]], wake: asyncio.Event, stopped: kopf.DaemonStopped,
                     on_error_delay: float, logger: logging.Logger, what: str,
                     alive: Callable[[], Awaitable[bool]] | None = None,
                     serving: Callable[[], bool] | None = None) -> bool:
    """Call `tick()` (returns seconds until the next pass) until `stopped`, or until `alive()` says
    the object is gone (the daemons run without a finalizer, so kopf may not stop them on deletion), or
    (with shards) until `serving()` says this replica no longer serves the object. Returns True when the
    object is gone.

    A failing pass is logged by exception type only (messages may hold secrets) and retried after
    `on_error_delay` seconds; one object's failure never stops the others.
    """
    while not stopped:
        if serving is not None and not serving():
            return False
        if alive is not None:
            try:
                if not await alive():
                    logger.info("%s stopped: the object is gone", what)
                    return True
            except Exception as exc:  # noqa: BLE001 - API unavailable: keep going, check next pass
                logger.warning("%s: existence check failed (%s)", what, type(exc).__name__)
        # Cleared before the pass, never after it: a wake-up that arrives during the pass (the object
        # was deleted, a change needs action) makes the next pass start at once instead of being lost.
        wake.clear()
        try:
            delay = await tick()
        except Exception as exc:  # noqa: BLE001
            logger.warning("%s failed (%s); retrying", what, type(exc).__name__)
            delay = on_error_delay
        if not stopped and not wake.is_set() and delay > 0:
            await _sleep(wake, stopped, delay)
    return False


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
    """Sleep `delay` seconds or until `wake` is set or the daemon is stopped, whichever comes first.

    One waiter for each (a stop is noticed at once: kopf cancels daemons that linger), not a wake-up every
    second to look at the stop flag: with a thousand boxes that was a thousand timed waits a second, idle or
    not (each a task and a timer), which the operator paid for at every reset too. A stop flag that cannot
    be awaited (not kopf's) is looked at every second."""
    async def stop() -> None:
        await stopped.wait()

    awaitable = callable(getattr(stopped, "wait", None))
    until = asyncio.get_running_loop().time() + delay
    while not stopped and not wake.is_set():
        remaining = until - asyncio.get_running_loop().time()
        if remaining <= 0:
            return
        waiters = [asyncio.ensure_future(wake.wait())]
        if awaitable:
            waiters.append(asyncio.ensure_future(stop()))
        try:
            await asyncio.wait(waiters, timeout=remaining if awaitable else min(remaining, 1.0),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()


def poster(memo: kopf.Memo, body: kopf.Body) -> Callable[[str, str, str], Any]:
    """A function posting Kubernetes Events on `body`: (type Normal|Warning, reason, message),
    through the runtime's one deduplicating poster (`controller.events`)."""
    return memo.runtime.poster(body)


def existence_check(rt: Any, plural: str, namespace: str, name: str, uid: str | None) -> Callable[[], Awaitable[bool]]:
    """An `alive()` for `run_passes`: the object still exists with this uid (a re-created object of the
    same name is another object, with its own daemon).

    Answered from the watch (`Runtime.presence`, fed by the kinds' event handlers) while it vouches for the
    object; a GET only when it does not (not seen yet, or not confirmed for `presence.recheck_s`: a watch can
    miss a DELETED across a re-list). A thousand boxes woken by one reset made a thousand GETs before."""
    presence = rt.presence

    async def alive() -> bool:
        known = presence.alive(plural, namespace, name, uid)
        if known is not None:
            return known
        obj = await rt.kube.get_custom(plural, namespace, name)
        found = obj is not None and (uid is None or (obj.get("metadata") or {}).get("uid") == uid)
        if found and uid is not None:
            presence.confirm(plural, namespace, name, uid)
        return found
    return alive


def served_here(plural: str) -> Callable[..., bool]:
    """A kopf `when=` filter: True unless the operator is sharded (`Runtime.sharding`) and this replica does
    not serve the object's shard (then kopf calls none of the handler, and writes nothing for it: see
    `startup.sharded_storages`)."""
    def when(body: kopf.Body, memo: kopf.Memo, **_: Any) -> bool:
        sharding = getattr(getattr(memo, "runtime", None), "sharding", None)
        return sharding is None or sharding.serves(plural, body.metadata.namespace, body.metadata.name,
                                                   body.metadata.labels)
    return when


def events_here(plural: str) -> Callable[..., bool]:
    """A kopf `when=` filter of a watch-event handler: with shards by hash, only the events of objects this
    replica serves (or still has work running for, or a deletion) reach the handler. Every replica watches
    every object, and the handler's cost is kopf's per call (its invocation and its log line): at 10,000
    boxes on 3 replicas each replica spent half a core on the events of the boxes it does not serve
    (bench/shards.py). True whenever the operator is not sharded, and for every event with shards by label
    (a relabelled box must be seen by the replica whose work runs for its old label). What such a handler
    keeps for an object (its presence, its resume annotations) is then kept by the replicas serving it; a
    replica that gains its shard reads what it lacks (presence unknown: a GET). The box pods' events are not
    filtered: their bodies are used while a stream is attached and must not miss a change.

    Args:
        plural: the resource whose shard decides (AgentBoxes, Subscriptions).
    """
    def when(body: kopf.Body, memo: kopf.Memo, type: Any = None, **_: Any) -> bool:  # noqa: A002 -- kopf's name
        sharding = getattr(getattr(memo, "runtime", None), "sharding", None)
        if sharding is None or sharding.by != "hash" or type == "DELETED":
            return True
        ns, name = body.metadata.namespace, body.metadata.name
        return bool(sharding.serves(plural, ns, name) or sharding.running(plural, ns, name))
    return when


async def run_sharded(rt: Any, plural: str, body: kopf.Body, stopped: kopf.DaemonStopped, logger: logging.Logger,
                      what: str, work: Callable[[bool], Awaitable[bool]]) -> None:
    """A sharded daemon (`rt.sharding` set): wait until this replica serves the object's shard, run
    `work(gained)` (returns True when the object is gone; `gained`: the shard came to this replica after the
    daemon started, so the create/resume handler did not run here) while it does, wait again when the shard
    is given back (`work` is cancelled then, as a kill would), until the object is gone or the daemon stops."""
    sharding = rt.sharding
    ns, name, uid = body.metadata.namespace, body.metadata.name, body.metadata.uid

    def served() -> bool:
        return bool(sharding.serves(plural, ns, name, body.metadata.labels))

    def gone() -> bool:
        return rt.presence.alive(plural, ns, name, uid) is False

    first, served_at_start = True, served()
    while not stopped:
        if not served():
            if not await sharding.wait_served(plural, ns, name, lambda: body.metadata.labels, stopped, gone=gone):
                return
            logger.info("%s starts: this replica serves shard %s now", what, sharding.shard(plural, ns, name,
                                                                                            body.metadata.labels))
        gained = not (first and served_at_start)
        first = False
        shard = sharding.shard(plural, ns, name, body.metadata.labels)
        result = await sharding.serve(plural, ns, name, shard, work(gained))
        if result is True:
            return
        if result is None:
            logger.info("%s stopped: shard %s was given back", what, shard)
