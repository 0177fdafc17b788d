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
