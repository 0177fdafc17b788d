"""The operator's garbage collector, tuned for a process that holds many long-lived objects (every box's
watcher, stream, kopf memory and bodies) and allocates in bursts (a reset wakes every box at once).

CPython's cyclic collector runs by allocation counts: at a reset the operator allocates fast (JSON bodies,
screens, decisions), so collections come in the middle of the burst, and a full (generation 2) collection
walks every object the process holds, which grows with the number of boxes. Two settings act on it:

* `gc_gen0_threshold` (CPython default 700): fewer young collections; objects that live only for one pass
  die before a collection ever walks them instead of being promoted to older generations.
* `gc_freeze_period_s`: every so often, at a time unrelated to resets, one full collection, then
  `gc.freeze()` moves every survivor out of the collector's reach, so the automatic collections of a burst
  walk only what was allocated since; the next period unfreezes first, so garbage cycles among frozen
  objects (a deleted box's watcher) are collected then.

Measured with bench/scale.py (200 boxes, two resets of 100 tabs each, bench/README.md): with CPython's
defaults the operator ran 66-69 collections (generations 0 and 1) in each reset's window, 0.12-0.13 s or 9 %
of its CPU there, and one run a full collection of 0.15 s (12 %); with a threshold of 50,000 and the freeze,
none; operator CPU per resumed tab 13.0 / 13.7 ms -> 8.9 / 9.6 ms (load 4.4 vs 2.0: not all of that
difference is the collector); RSS 99 -> 101 MiB. At 400 boxes (200 tabs per reset) a full collection of
0.28-0.33 s fell in each reset's window without the tuning (32-33 % of the operator's CPU there); with it one
young collection of 0.09 s (9-10 %); CPU per tab 6.5 / 5.15 -> 3.35 / 5.0 ms.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from typing import Awaitable, Callable

log = logging.getLogger("agentbox.heap")


NO_AUTOMATIC_FULL = 1_000_000
"""Generation 2's threshold while the periodic refreeze owns the full collections (`tune`): a full
collection after a million generation-1 collections, i.e. never in practice."""


def tune(gen0_threshold: int, periodic_full: bool = False) -> tuple[int, int, int]:
    """Set the young generation's threshold (allocations minus deallocations of container objects between
    two generation-0 collections); generation 1's is kept. 0 keeps CPython's.

    `periodic_full` (`refreeze_every` runs): generation 2's threshold is set to `NO_AUTOMATIC_FULL`, so
    every full collection is the periodic one, at a time it chooses (with shards: right after a Lease
    renewal). CPython otherwise starts a full collection by itself once the objects promoted since the last
    one exceed a quarter of those it kept; frozen objects are not counted in that quarter, so while the heap
    grew (10,000 boxes being created) it ran full collections of every object allocated since the last
    freeze, at any moment. One stopped a replica's threads for 7 s in bench/shards.py; it missed its Lease
    renew deadline and ended.

    Returns:
        The thresholds before (for `gc.set_threshold` at shutdown).
    """
    before = gc.get_threshold()
    gen0 = gen0_threshold if gen0_threshold > 0 else before[0]
    gc.set_threshold(gen0, before[1], NO_AUTOMATIC_FULL if periodic_full else before[2])
    return before


class PauseWatch:
    """Logs every garbage collection longer than `long_s` seconds (wall clock) as a warning, with its
    generation: no other thread of the process runs during one (the interpreter lock is held). `longest`
    holds the longest so far, per generation. `start()` registers it in `gc.callbacks`, `stop()` removes it."""

    def __init__(self, long_s: float) -> None:
        self.long_s = long_s
        self.longest: dict[int, float] = {}
        self._started = 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = int(info.get("generation", -1))
        if took > self.longest.get(generation, 0.0):
            self.longest[generation] = took
        if took > self.long_s:
            log.warning("A generation-%d garbage collection took %.1f s (%d objects collected); no other thread "
                        "ran meanwhile", generation, took, info.get("collected", 0))

    def start(self) -> "PauseWatch":
        gc.callbacks.append(self._on_gc)
        return self

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)


def refreeze() -> tuple[int, float]:
    """Unfreeze, collect everything, freeze the survivors.

    Returns:
        (objects frozen, CPU seconds the collection took).
    """
    started = time.process_time()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count(), time.process_time() - started


def freeze_young() -> int:
    """Collect the young generations (0 and 1: what was allocated since the last freeze, not the frozen
    objects), then freeze the survivors. Its cost grows with what was allocated since, not with the heap.

    Returns:
        Objects frozen in all.
    """
    gc.collect(1)
    gc.freeze()
    return gc.get_freeze_count()


async def wait_fresh(ages: Callable[[], list[float]], fresh_s: float, max_wait_s: float) -> None:
    """Return once every age `ages()` gives (seconds; with shards `ShardLeases.renewal_ages`: since each held
    shard's last renewal) is under `fresh_s`, or after `max_wait_s` seconds, or at once when there is none.
    Polls every 20 ms. Awaited before a full collection (`refreeze_every`'s `before`), the pause then has
    the whole renew deadline ahead of it."""
    deadline = time.monotonic() + max_wait_s
    while True:
        now_ages = ages()
        if not now_ages or max(now_ages) < fresh_s or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.02)


def jittered(period_s: float, rand: Callable[[], float] = random.random) -> float:
    """`period_s` spread uniformly over [0.8, 1.2] x `period_s` (`rand()` in [0, 1)), so replicas started
    together do not collect together."""
    return period_s * (0.8 + 0.4 * rand())


async def refreeze_every(period_s: float, first_after_s: float,
                         before: Callable[[], Awaitable[None]] | None = None,
                         long_pause_s: float | None = None,
                         full_budget_s: float | None = None,
                         rand: Callable[[], float] = random.random,
                         clock: Callable[[], float] = time.perf_counter) -> None:
    """Run `refreeze` about `first_after_s` seconds from now (after the initial listing and the first passes),
    then about every `period_s` seconds (each wait jittered by +-20 %, `jittered`), until cancelled.
    Unfreezes on the way out.

    A full collection holds the interpreter lock for all of its time, so no other thread of the process runs
    meanwhile: with shards, not the Lease thread either. At 10,000 boxes on 3 replicas started together
    (bench/shards.py) the three collected at the same moment, 660 s after their start, and sent no Lease
    renewal for 5.4-6.0 s; with the renew deadline of 7 s, one ended. So, with shards, `before` is awaited
    first (`wait_fresh` on `ShardLeases.renewal_ages`: the collection starts right after a renewal, with the
    whole renew deadline ahead of it), and the jitter keeps replicas started together from collecting together.

    A full collection's pause grows with the heap (bench/shards.py, about 3,300 boxes a replica: 1.86
    million objects, 3.6 s of CPU, 6.2 s of wall time on the loaded 2-core machine, and it found 7,168
    garbage objects). With `full_budget_s`, each period first freezes the young objects (`freeze_young`),
    then runs the full collection only when its pause, predicted from the last one's wall time scaled by
    the objects frozen now, fits the budget; otherwise it is left out (logged once at INFO): cyclic garbage
    among the frozen objects is then kept (the measured rate above: about 7,000 objects a period).

    Args:
        period_s, first_after_s: seconds.
        before: awaited before each full collection (None: none).
        long_pause_s: a collection longer than this (CPU seconds) is logged as a warning (None: never).
        full_budget_s: the longest predicted pause (wall seconds) a full collection may take (None: any).
        rand: the jitter's random source; clock: the wall clock (tests).
    """
    last: tuple[float, int] | None = None  # (wall seconds, objects frozen) of the last full collection
    deferred = False
    try:
        await asyncio.sleep(jittered(first_after_s, rand))
        while True:
            if full_budget_s is not None and last is not None:
                frozen_now = freeze_young()
                predicted = last[0] * frozen_now / max(1, last[1])
                if predicted > full_budget_s:
                    if not deferred:
                        log.info("Full garbage collections left out: one would pause every thread for about "
                                 "%.1f s (%d objects), over the budget of %.1f s", predicted, frozen_now,
                                 full_budget_s)
                    deferred = True
                    await asyncio.sleep(jittered(period_s, rand))
                    continue
            if before is not None:
                await before()
            started = clock()
            frozen, took = refreeze()
            last = (clock() - started, frozen)
            if long_pause_s is not None and took > long_pause_s:
                log.warning("A full garbage collection took %.1f s (%d objects frozen after it); no other thread "
                            "ran meanwhile", took, frozen)
            else:
                log.debug("Froze %d objects after a full collection of %.3f s", frozen, took)
            await asyncio.sleep(jittered(period_s, rand))
    finally:
        gc.unfreeze()
