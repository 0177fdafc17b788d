"""Process-wide setup: kopf settings, API client, usage reader, metrics server; and login."""

from __future__ import annotations

import concurrent.futures
import asyncio
import logging
from typing import Any

import kopf

from controller.handlers.registry import REGISTRY

from controller import constants as C
from controller.kube.aexec import AsyncExec
from controller.kube.cluster import api_client
from controller.kube.objects import Kube
from controller.runtime import Runtime
from controller.settings import Settings, utcnow


@kopf.on.login(registry=REGISTRY)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Service account in a cluster, else the kubeconfig named by $KUBECONFIG (read now, not at import)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup(registry=REGISTRY)
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """Configure kopf and build the shared Runtime (unless a test put one in `memo`)."""
    settings.persistence.finalizer = C.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=C.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=C.GROUP, key="last-handled-configuration")
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 270
    settings.networking.request_timeout = 60
    # Exec and status calls run in threads; the default pool (cores + 4) is too small for many tabs.
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=64))

    ops: Settings = getattr(memo, "settings", None) or Settings.from_env()
    api = api_client(getattr(memo, "kubeconfig", None))
    from controller.providers.readers import UsageCache, UsageReader

    reader = UsageReader(anthropic_base_url=ops.anthropic_base_url, openai_base_url=ops.openai_base_url)
    exec_override = getattr(memo, "exec", None)
    # Exec runs on the event loop over one connection pool (controller.kube.aexec says why aiohttp).
    aexec = memo.aexec = AsyncExec(api.configuration)

    async def run_exec(namespace: str, pod: str, container: str, argv: list[str], stdin: str | None = None):
        return await aexec.run(namespace, pod, container, argv, stdin=stdin, timeout=ops.exec_timeout_s,
                               max_output=ops.exec_max_output_bytes)

    from controller.notify import Notifier

    from controller.events import Recorder

    notifier = getattr(memo, "notifier", None) or Notifier.from_env()
    clock = getattr(memo, "clock", None) or utcnow
    kube = Kube(api)
    async def open_exec(namespace: str, pod: str, container: str, argv: list[str]):
        return await aexec.open(namespace, pod, container, argv, connect_timeout=ops.exec_timeout_s)

    memo.runtime = Runtime(settings=ops, kube=kube, usage=UsageCache(reader),
                           exec=exec_override or run_exec,
                           exec_open=getattr(memo, "exec_open", None) or (None if exec_override else open_exec), notifier=notifier, clock=clock,
                           events=Recorder(kube, notifier, clock, refresh_s=ops.event_refresh_s,
                                           quiet_s=ops.event_quiet_s))
    memo.reader = reader
    if ops.metrics_port and not getattr(memo, "no_metrics", False):
        from prometheus_client import start_http_server

        from controller.metrics import REGISTRY

        start_http_server(ops.metrics_port, registry=REGISTRY)
    logger.info("agentbox-controller started")


@kopf.on.cleanup(registry=REGISTRY)
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Close the HTTP session of the usage reader."""
    reader = getattr(memo, "reader", None)
    if reader is not None:
        await reader.close()
    aexec = getattr(memo, "aexec", None)
    if aexec is not None:
        await aexec.aclose()
    runtime = getattr(memo, "runtime", None)
    if runtime is not None:
        await runtime.events.aclose()
    if runtime is not None and runtime.notifier is not None:
        await runtime.notifier.aclose()
