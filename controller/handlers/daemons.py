"""The loop shared by the per-object daemons: run one pass, then sleep until the pass's deadline,
an early wake-up (a change that needs action now), or the daemon being stopped."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import kopf


async def run_passes(tick: Callable[[], Awaitable[float]], wake: asyncio.Event, stopped: kopf.DaemonStopped,
                     on_error_delay: float, logger: logging.Logger, what: str) -> None:
    """Call `tick()` (returns seconds until the next pass) until `stopped`.

    A failing pass is logged by exception type only (messages may hold secrets) and retried after
    `on_error_delay` seconds; one object's failure never stops the others.
    """
    loop = asyncio.get_running_loop()
    while not stopped:
        try:
            delay = await tick()
        except Exception as exc:  # noqa: BLE001
            logger.warning("%s failed (%s); retrying", what, type(exc).__name__)
            delay = on_error_delay
        wake.clear()
        until = loop.time() + delay
        # Short waits so a stop is noticed within a second (kopf cancels daemons that linger).
        while not stopped and not wake.is_set():
            remaining = until - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(wake.wait(), timeout=min(remaining, 1.0))
            except asyncio.TimeoutError:
                pass


def poster(memo: kopf.Memo, body: kopf.Body) -> Callable[[str, str, str], Any]:
    """A function posting Kubernetes Events on `body`: (type Normal|Warning, reason, message),
    through the runtime's one deduplicating poster (`controller.events`)."""
    return memo.runtime.poster(body)
