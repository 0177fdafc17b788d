"""Process-wide setup: kopf settings, API client, usage reader, metrics server; and login."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller import heap
from controller.kube.aexec import AsyncExec
from controller.kube.cluster import load_configuration
from controller.kube.objects import Kube
from controller.kube.rest import Rest
from controller.runtime import Runtime
from controller.settings import Settings, utcnow


@kopf.on.login(registry=REGISTRY)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Service account in a cluster, else the kubeconfig named by $KUBECONFIG (read now, not at import)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup(registry=REGISTRY)
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """Configure kopf and build the shared Runtime (unless a test put one in `memo`); tune the garbage
    collector (`controller.heap`: young-generation threshold, the periodic freeze)."""
    settings.persistence.finalizer = C.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=C.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=C.GROUP, key="last-handled-configuration")
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 270
    settings.networking.request_timeout = 60

    ops: Settings = getattr(memo, "settings", None) or Settings.from_env()
    cfg = load_configuration(getattr(memo, "kubeconfig", None))
    from controller.providers.readers import UsageCache, UsageReader

    reader = UsageReader(anthropic_base_url=ops.anthropic_base_url, openai_base_url=ops.openai_base_url)
    exec_override = getattr(memo, "exec", None)
    # Every API request runs on the event loop over ONE session (one connection pool): the REST calls
    # (controller.kube.rest) and the exec streams (controller.kube.aexec says why aiohttp).
    rest = memo.rest = Rest.from_settings(cfg, ops)
    aexec = memo.aexec = AsyncExec(cfg, session=rest.session)

    async def run_exec(namespace: str, pod: str, container: str, argv: list[str], stdin: str | None = None):
        return await aexec.run(namespace, pod, container, argv, stdin=stdin, timeout=ops.exec_timeout_s,
                               max_output=ops.exec_max_output_bytes)

    from controller.notify import Notifier

    from controller.events import Recorder

    notifier = getattr(memo, "notifier", None) or Notifier.from_env()
    clock = getattr(memo, "clock", None) or utcnow
    kube = Kube(rest)
    async def open_exec(namespace: str, pod: str, container: str, argv: list[str]):
        return await aexec.open(namespace, pod, container, argv, connect_timeout=ops.exec_timeout_s)

    memo.runtime = Runtime(settings=ops, kube=kube, usage=UsageCache(reader),
                           exec=exec_override or run_exec,
                           exec_open=getattr(memo, "exec_open", None) or (None if exec_override else open_exec), notifier=notifier, clock=clock,
                           events=Recorder(kube, notifier, clock, refresh_s=ops.event_refresh_s,
                                           quiet_s=ops.event_quiet_s))
    memo.reader = reader
    # kopf's Subscription index (`subscriptions_by_namespace`), passed to every handler as a kwarg.
    memo.runtime.subscriptions.index = _.get("subscriptions_by_namespace")
    memo.runtime.subscriptions.lister = lambda ns: kube.list_custom_versioned(C.SUBSCRIPTION_PLURAL, ns)
    if ops.shards > 1:
        await _start_sharding(settings, memo, ops, rest, logger)
    memo.gc_before = heap.tune(ops.gc_gen0_threshold, periodic_full=ops.gc_freeze_period_s > 0)
    leases = getattr(memo, "shard_leases_io", None)  # with shards: a collection stops the Lease thread too
    long_pause_s = leases.timings.renew_deadline_s / 4 if leases is not None else 1.0
    memo.gc_watch = heap.PauseWatch(long_pause_s).start()
    if ops.gc_freeze_period_s > 0:
        memo.gc_task = asyncio.get_running_loop().create_task(heap.refreeze_every(
            ops.gc_freeze_period_s, min(60.0, ops.gc_freeze_period_s),
            before=(lambda: heap.wait_fresh(leases.renewal_ages, leases.timings.retry_period_s / 2,
                                            3 * leases.timings.retry_period_s)) if leases is not None else None,
            long_pause_s=long_pause_s,
            # with shards a full collection must end well within the renew deadline
            full_budget_s=leases.timings.renew_deadline_s / 3 if leases is not None else None))
    if ops.metrics_port and not getattr(memo, "no_metrics", False):
        from prometheus_client import start_http_server

        from controller.metrics import REGISTRY

        start_http_server(ops.metrics_port, registry=REGISTRY)
    logger.info("agentbox-controller started")


async def _start_sharding(settings: kopf.OperatorSettings, memo: kopf.Memo, ops: Settings, rest: Rest,
                          logger: logging.Logger) -> None:
    """`shards > 1`: this replica serves the shards whose Lease it holds (`memo.shard_leases`: the Leases'
    name prefix, namespace, `ElectionTimings` and this replica's identity, from `run --leader-elect`). The
    first look is taken before any handler runs, so a replica alone serves every shard from its first event;
    kopf writes its annotations only on the objects this replica serves."""
    from controller.kube.shardleases import LeaseThread, ShardLeases, on_loop, stop_on_loop
    from controller.service.sharding import STOP_TIMEOUT_S, Sharding

    prefix, namespace, timings, identity = memo.shard_leases
    previous = getattr(memo, "shard_thread", None)
    if previous is not None:  # kopf retried the startup handler: one Lease thread per identity, never two
        await previous.stop()
    sharding = Sharding(ops.shards, ops.shard_by, ops.shard_label)
    # The Leases have a thread, an event loop and a transport of their own (no request slots shared with the
    # handlers' requests): a replica taking over a dead one's shards queues hundreds of requests and opens
    # hundreds of tab streams at once, and a renewal waiting behind them missed the renew deadline (the
    # replica ended; its peers too, in a cascade).
    lane = Rest(rest.cfg, max_requests=0, timeout_s=max(1.0, timings.renew_deadline_s / 3),
                connect_timeout_s=max(1.0, timings.renew_deadline_s / 3), keepalive_s=float(ops.kube_keepalive_s))
    main = asyncio.get_running_loop()
    leases = ShardLeases(lane, namespace, prefix, ops.shards, identity, timings, clock=utcnow,
                         stop_serving=stop_on_loop(main, sharding.stop_serving, STOP_TIMEOUT_S + 5.0),
                         on_change=on_loop(main, sharding.changed),
                         exit=getattr(memo, "shard_exit", None))
    sharding.served = lambda: leases.served
    memo.runtime.sharding = sharding
    memo.shard_leases_io = leases
    memo.shard_thread = LeaseThread(leases)
    await memo.shard_thread.start()
    leases.start_watchdog()
    owns = _owner_check(sharding)
    settings.persistence.progress_storage = _ShardedProgress(owns, prefix=C.GROUP)
    settings.persistence.diffbase_storage = _ShardedDiffBase(owns, prefix=C.GROUP, key="last-handled-configuration")
    logger.info("Sharded: %d shards by %s; this replica (%s) serves %s", ops.shards, ops.shard_by, identity,
                sorted(leases.served))


def _owner_check(sharding: Any) -> Any:
    def owns(body: Any) -> bool:
        plural = C.AGENTBOX_PLURAL if body.get("kind") == C.AGENTBOX_KIND else C.SUBSCRIPTION_PLURAL
        meta = body.get("metadata") or {}
        return bool(sharding.serves(plural, meta.get("namespace", ""), meta.get("name", ""), meta.get("labels")))
    return owns


class _ServedOnly:
    """A kopf annotations storage that writes only on the objects this replica serves (`owns(body)`)."""

    def __init__(self, owns: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._owns = owns

    def store(self, *, body: Any, patch: Any, **kwargs: Any) -> None:
        if self._owns(body):
            super().store(body=body, patch=patch, **kwargs)


class _ShardedProgress(_ServedOnly, kopf.AnnotationsProgressStorage):
    """kopf's progress annotations, written only on the objects this replica serves (another replica's
    kopf sees every object too: its skipped handlers must not purge or overwrite the serving one's)."""

    def purge(self, *, body: Any, patch: Any, **kwargs: Any) -> None:
        if self._owns(body):
            super().purge(body=body, patch=patch, **kwargs)

    def touch(self, *, body: Any, patch: Any, **kwargs: Any) -> None:
        if self._owns(body):
            super().touch(body=body, patch=patch, **kwargs)


class _ShardedDiffBase(_ServedOnly, kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled configuration, written only on the objects this replica serves (a replica
    skipping an update must not mark it handled for the one that serves it)."""


@kopf.on.cleanup(registry=REGISTRY)
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Close the HTTP sessions: the usage reader's, the Kubernetes API's (REST and exec), the notifier's; put
    the garbage collector back as it was."""
    task = getattr(memo, "gc_task", None)
    if task is not None:
        task.cancel()
    shard_thread = getattr(memo, "shard_thread", None)
    if shard_thread is not None:  # stop serving and give the shard Leases back, before the session closes
        await shard_thread.stop()
    before = getattr(memo, "gc_before", None)
    if before is not None:
        gc.set_threshold(*before)
    watch = getattr(memo, "gc_watch", None)
    if watch is not None:
        watch.stop()
    reader = getattr(memo, "reader", None)
    if reader is not None:
        await reader.close()
    aexec = getattr(memo, "aexec", None)
    if aexec is not None:
        await aexec.aclose()
    runtime = getattr(memo, "runtime", None)
    if runtime is not None:
        runtime.subscriptions.close()
        await runtime.events.aclose()
    if runtime is not None and runtime.notifier is not None:
        await runtime.notifier.aclose()
    rest = getattr(memo, "rest", None)
    if rest is not None:  # last: the Event recorder above may still write
        await rest.aclose()
