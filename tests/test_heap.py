"""controller.heap: the garbage collector's young threshold and the periodic full collection + freeze."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from controller import heap




class Node:
    def __init__(self) -> None:
        self.other: "Node | None" = None


@pytest.mark.unit
def test_tune_sets_the_young_threshold_only_and_returns_the_previous() -> None:
    before = gc.get_threshold()
    try:
        assert heap.tune(12345) == before
        assert gc.get_threshold() == (12345, before[1], before[2])
        heap.tune(0)
        assert gc.get_threshold()[0] == 12345, "0 keeps what is set"
    finally:
        gc.set_threshold(*before)


@pytest.mark.unit
def test_a_cycle_frozen_while_alive_is_collected_by_the_next_refreeze() -> None:
    """A deleted box's watcher is alive at one freeze and garbage by the next: the next period collects it
    (a freeze without the unfreeze would keep it for good)."""
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        frozen, took = heap.refreeze()
        assert frozen > 0 and took >= 0 and gc.get_freeze_count() > 0  # frozen objects may still be freed
        del a, b
        gc.collect()
        assert ref() is not None, "frozen: out of the automatic collections' reach"
        heap.refreeze()
        assert ref() is None
    finally:
        gc.unfreeze()


@pytest.mark.unit
async def test_the_periodic_freeze_runs_and_unfreezes_when_cancelled() -> None:
    try:
        task = asyncio.ensure_future(heap.refreeze_every(3600.0, 0.0))
        while not gc.get_freeze_count():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


@pytest.mark.unit
def test_with_the_periodic_refreeze_no_automatic_full_collection_runs() -> None:
    before = gc.get_threshold()
    try:
        assert heap.tune(23456, periodic_full=True) == before
        assert gc.get_threshold() == (23456, before[1], heap.NO_AUTOMATIC_FULL)
        heap.tune(0, periodic_full=False)
        assert gc.get_threshold()[2] == heap.NO_AUTOMATIC_FULL, "generation 2 is what was set before"
    finally:
        gc.set_threshold(*before)


@pytest.mark.unit
def test_a_long_collection_is_a_warning_with_its_generation(caplog) -> None:
    watch = heap.PauseWatch(long_s=1.0)
    watch._on_gc("start", {"generation": 0})
    watch._on_gc("stop", {"generation": 0, "collected": 3})
    assert not [r for r in caplog.records if r.levelname == "WARNING"], "a short one is not"
    watch._on_gc("start", {"generation": 2})
    watch._started -= 2.5  # as if it had started 2.5 s ago
    watch._on_gc("stop", {"generation": 2, "collected": 9})
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "A generation-2 garbage collection took 2.5 s (9 objects collected); no other thread ran meanwhile"]
    assert watch.longest[2] >= 2.5 and watch.longest[0] < 1.0
    watch.start()
    try:
        assert watch._on_gc in gc.callbacks
    finally:
        watch.stop()
    assert watch._on_gc not in gc.callbacks


@pytest.mark.unit
def test_the_period_is_jittered_by_20_percent_either_way() -> None:
    assert heap.jittered(600.0, lambda: 0.0) == pytest.approx(480.0)
    assert heap.jittered(600.0, lambda: 0.5) == pytest.approx(600.0)
    assert heap.jittered(600.0, lambda: 0.999999) == pytest.approx(720.0, abs=0.01)


@pytest.mark.unit
async def test_each_collection_waits_for_before_and_a_long_one_is_a_warning(monkeypatch, caplog) -> None:
    """With shards, `before` is the wait for a fresh Lease renewal: no collection starts until it returned."""
    order: list[str] = []
    gate = asyncio.Event()

    async def before() -> None:
        order.append("before")
        await gate.wait()
        gate.clear()

    def refreeze() -> tuple[int, float]:
        order.append("collect")
        return 7, 2.5  # CPU seconds: over long_pause_s

    monkeypatch.setattr(heap, "refreeze", refreeze)
    task = asyncio.ensure_future(heap.refreeze_every(0.01, 0.0, before=before, long_pause_s=1.75))
    try:
        for _ in range(2):
            while order.count("before") <= order.count("collect"):
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)
            assert order[-1] == "before", f"no collection before `before` returned: {order}"
            gate.set()
            while order[-1] != "collect":
                await asyncio.sleep(0.005)
        assert order[:4] == ["before", "collect", "before", "collect"]
        assert any("full garbage collection took 2.5 s" in r.getMessage() and r.levelname == "WARNING"
                   for r in caplog.records)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.unit
async def test_a_full_collection_predicted_over_the_budget_is_left_out(monkeypatch, caplog) -> None:
    """The first full collection of 1 s froze 1,000 objects; the heap then grows by 1,000 objects a period: a
    full collection is predicted at 2 s, then 3 s: with a budget of 2.5 s the third period only freezes the
    young objects."""
    import logging

    caplog.set_level(logging.INFO, logger="agentbox.heap")
    now = [0.0]
    heap_size = [1000]
    fulls: list[int] = []
    young: list[int] = []

    def refreeze() -> tuple[int, float]:
        fulls.append(heap_size[0])
        now[0] += heap_size[0] / 1000  # 1 s of wall time per 1,000 objects
        return heap_size[0], 0.1

    def freeze_young() -> int:
        heap_size[0] += 1000
        young.append(heap_size[0])
        return heap_size[0]

    monkeypatch.setattr(heap, "refreeze", refreeze)
    monkeypatch.setattr(heap, "freeze_young", freeze_young)
    task = asyncio.ensure_future(heap.refreeze_every(0.001, 0.0, full_budget_s=2.5, clock=lambda: now[0]))
    try:
        while len(young) < 4:
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert fulls == [1000, 2000], "the first, then one predicted at 2 s; none predicted at 3 s or more"
    infos = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(infos) == 1 and "about 3.0 s (3000 objects)" in infos[0], infos


@pytest.mark.component
async def test_the_operator_tunes_the_collector_and_puts_it_back(tmp_path) -> None:
    from harness.world_fixtures import FAST

    from agentbox_sim.world import World, eventually

    before = gc.get_threshold()
    async with World(tmp_path / "world", FAST.model_copy(update={"gc_gen0_threshold": 4321})) as world:
        world.start_operator()
        await eventually(lambda: gc.get_threshold()[0] == 4321, 10, what="threshold set at startup")
        await world.stop_operator()
        assert gc.get_threshold() == before
