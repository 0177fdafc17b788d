"""The per-object daemon loop (`controller.handlers.daemons.run_passes`): wake-ups are never lost."""

import asyncio
import logging

from controller.handlers.daemons import run_passes


class _Stopped:
    """A stand-in for kopf.DaemonStopped: falsy until set."""

    def __init__(self) -> None:
        self.flag = False

    def __bool__(self) -> bool:
        return self.flag


async def test_a_wake_up_during_a_pass_starts_the_next_pass_at_once():
    """The object is deleted while a pass runs (its deletion handler sets the wake-up): the loop must
    run the next pass (which finds the object gone) now, not after the pass's long deadline."""
    wake, stopped = asyncio.Event(), _Stopped()
    passes: list[float] = []
    loop = asyncio.get_running_loop()

    async def tick() -> float:
        passes.append(loop.time())
        if len(passes) == 1:
            wake.set()  # the deletion arrives while the first pass is still running
            await asyncio.sleep(0.05)
        else:
            stopped.flag = True
        return 3600.0

    await asyncio.wait_for(run_passes(tick, wake, stopped, 1.0, logging.getLogger("t"), "Test"), timeout=5)
    assert len(passes) == 2 and passes[1] - passes[0] < 1.0


async def test_the_loop_stops_when_the_object_is_gone_without_a_pass():
    wake, stopped = asyncio.Event(), _Stopped()
    calls = []

    async def tick() -> float:
        calls.append(1)
        return 0.0

    async def alive() -> bool:
        return not calls

    await asyncio.wait_for(run_passes(tick, wake, stopped, 1.0, logging.getLogger("t"), "Test", alive), timeout=5)
    assert calls == [1]
