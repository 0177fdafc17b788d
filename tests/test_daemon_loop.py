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


async def test_a_stop_is_noticed_at_once_while_sleeping():
    """kopf's stop flag is awaited with the wake-up: a daemon sleeping until a far deadline stops at once
    (before: a timed wait every second per daemon to look at the flag, a thousand a second with a thousand
    boxes, and a stop noticed up to a second late)."""
    from kopf._cogs.aiokits.aioenums import FlagSetter  # what kopf hands a daemon as `stopped`

    class Counting(asyncio.Event):
        waits = 0

        async def wait(self):  # type: ignore[override]
            Counting.waits += 1
            return await super().wait()

    stopper: FlagSetter = FlagSetter()
    wake, loop = Counting(), asyncio.get_running_loop()
    passes: list[float] = []

    async def tick() -> float:
        passes.append(loop.time())
        return 3600.0

    task = asyncio.ensure_future(run_passes(tick, wake, stopper.async_waiter, 1.0, logging.getLogger("t"), "Test"))
    while not Counting.waits:  # the first pass ran; the loop sleeps
        await asyncio.sleep(0.01)
    wake.set()  # a wake-up starts the next pass at once
    while len(passes) < 2 or Counting.waits < 2:
        await asyncio.sleep(0.01)
    t0 = loop.time()
    stopper.set()
    await asyncio.wait_for(task, timeout=5)
    assert loop.time() - t0 < 0.5, "the stop was noticed at once"
    assert len(passes) == 2
