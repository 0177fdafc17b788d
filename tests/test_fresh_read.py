"""controller.kube.objects.FreshRead: simultaneous callers share a read, and none gets a result read before
it asked (the guarantee of doing its own read)."""

from __future__ import annotations

import asyncio

import pytest

from controller.kube.objects import FreshRead

pytestmark = pytest.mark.unit


async def settle() -> None:
    """Let every ready task run (no time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_simultaneous_callers_share_reads_that_started_after_they_asked() -> None:
    version = 0  # the stored object's version; a write bumps it
    started: list[int] = []
    gate = asyncio.Event()

    async def fetch() -> int:
        seen = version  # what the read returns: the version when it started
        started.append(seen)
        await gate.wait()
        return seen

    shared = FreshRead(fetch)
    first = asyncio.ensure_future(shared.get())
    await settle()
    assert started == [0]
    version = 1  # a write lands while the first read is in flight; later callers must see it
    later = [asyncio.ensure_future(shared.get()) for _ in range(100)]
    await settle()
    assert started == [0], "the later callers wait for the next read, they do not start their own"
    gate.set()
    assert await first == 0
    assert [await f for f in later] == [1] * 100
    assert shared.reads == 2, "101 callers, two reads"
    gate.clear()
    again = asyncio.ensure_future(shared.get())  # nothing in flight: a new read at once
    await settle()
    assert started == [0, 1, 1]
    gate.set()
    assert await again == 1


async def test_a_failed_read_fails_its_callers_only() -> None:
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 1:
            raise RuntimeError("API server unavailable")
        return "ok"

    shared = FreshRead(fetch)
    with pytest.raises(RuntimeError):
        await shared.get()
    assert await shared.get() == "ok"


async def test_callers_of_the_same_instant_share_one_read() -> None:
    """Callers woken together (before the read started) share it: it starts after each of them asked."""
    version = 0
    started: list[int] = []

    async def fetch() -> int:
        started.append(version)
        await asyncio.sleep(0)
        return version

    shared = FreshRead(fetch)
    results = await asyncio.gather(*(shared.get() for _ in range(500)))
    assert results == [0] * 500 and started == [0] and shared.reads == 1
    # ... but a caller that arrives once the read has started still waits for the next one
    gate = asyncio.Event()

    async def slow() -> int:
        seen = version
        started.append(seen)
        await gate.wait()
        return seen

    shared = FreshRead(slow)
    first = asyncio.ensure_future(shared.get())
    await settle()
    version = 1
    later = asyncio.ensure_future(shared.get())
    await settle()
    gate.set()
    assert await first == 0 and await later == 1 and shared.reads == 2
