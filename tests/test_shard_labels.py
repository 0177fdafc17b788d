"""Sharding by label (`settings.shardBy: label`, issue 20) across two replicas, in process: each replica has its
shard Leases on the emulated API server (`ShardLeases`, an injected clock: no real Lease wait), its `Sharding`
in label mode and, per box, the daemon loop the tab watcher runs in (`run_sharded` around `run_passes`, the
passes recorded instead of run). The box watch is played by calling the `box-event` handler with the body each
replica's watch would deliver.

* Each box is served (its passes run) by exactly the replica holding its label's shard; a box without a valid
  label by none.
* A relabel moves it: the old owner stops at once when its watch delivers the new label (its daemon's work is
  cancelled, as a kill would: a pass waiting for an armed instant does not go on), the new owner starts within
  the daemons' label recheck (1 s), and no pass of the old owner runs after the relabel.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
import kubernetes.client
import pytest

from agentbox_sim.kube import KubeEmulator
from controller import constants as C
from controller.handlers.boxes import box_event
from controller.handlers.daemons import run_passes, run_sharded
from controller.kube.election import ElectionTimings
from controller.kube.rest import Rest
from controller.kube.shardleases import ShardLeases
from controller.runtime import Runtime
from controller.service.sharding import Sharding
from controller.settings import Settings

pytestmark = pytest.mark.component

NS = "default"
SHARDS = 4
LABEL = "agentbox.dev/shard"
log = logging.getLogger("test.shard_labels")


@pytest.fixture
def crd_paths() -> list[Any]:
    return []


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Stopped:
    """kopf's DaemonStopped as the loops use it: falsy until set, awaitable."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


class Replica:
    """One replica: its Leases, its label-mode `Sharding`, its runtime, and one daemon per box whose passes are
    recorded (`passes`: box -> loop instants of its passes here; `running`: boxes whose work runs here now)."""

    def __init__(self, rest: Rest, identity: str, clock: Clock) -> None:
        self.identity = identity
        self.sharding = Sharding(SHARDS, by="label", label=LABEL)
        self.leases = ShardLeases(rest, NS, "ctl", SHARDS, identity, ElectionTimings(), clock=clock,
                                  stop_serving=self.sharding.stop_serving, on_change=self.sharding.changed,
                                  exit=lambda code, why: None)
        self.sharding.served = lambda: self.leases.served
        self.rt = Runtime(settings=Settings(metrics_port=0), kube=None, usage=None)  # type: ignore[arg-type]
        self.rt.sharding = self.sharding
        self.memo = kopf.Memo(runtime=self.rt)
        self.bodies: dict[str, kopf.Body] = {}
        self.raws: dict[str, dict[str, Any]] = {}  # each body's source (kopf's body is a live view of it)
        self.passes: dict[str, list[float]] = {}
        self.running: set[str] = set()
        self.stopped = Stopped()
        self.tasks: list[asyncio.Task[Any]] = []

    def start(self, box: str, raw: dict[str, Any]) -> None:
        self.raws[box] = copy.deepcopy(raw)
        body = self.bodies[box] = kopf.Body(self.raws[box])
        loop = asyncio.get_running_loop()

        async def tick() -> float:
            self.passes.setdefault(box, []).append(loop.time())
            return 3600.0

        async def work(gained: bool) -> bool:
            self.running.add(box)
            try:
                return await run_passes(tick, self.rt.wakeup(NS, box), self.stopped, 0.1, log, "Tab watch",
                                        serving=lambda: self.sharding.serves(C.AGENTBOX_PLURAL, NS, box,
                                                                             body.metadata.labels))
            finally:
                self.running.discard(box)

        self.tasks.append(asyncio.ensure_future(run_sharded(self.rt, C.AGENTBOX_PLURAL, body, self.stopped,  # type: ignore[arg-type]
                                                            log, "Tab watch", work)))

    async def deliver(self, box: str, labels: dict[str, str]) -> None:
        """Its watch delivers the box with `labels`: kopf updates the daemon's body in place, then calls the
        `box-event` handler."""
        raw = self.raws[box]
        raw["metadata"]["labels"] = dict(labels)
        await box_event(event={"type": "MODIFIED", "object": raw}, body=self.bodies[box], memo=self.memo)

    async def stop(self) -> None:
        self.stopped.event.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def box(name: str, shard: str | None) -> dict[str, Any]:
    labels = {LABEL: shard} if shard is not None else {}
    return {"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": "AgentBox",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels}}


async def until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_each_box_is_served_by_its_labels_shard_holder_and_a_relabel_moves_it(kube: KubeEmulator):
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.url
    rest = Rest(cfg)
    clock = Clock()
    a, b = Replica(rest, "a", clock), Replica(rest, "b", clock)
    try:
        await a.leases.look()
        for _ in range(4):  # b's heartbeat: a gives half back, b takes it (the clock is injected: no wait)
            clock.advance(1)
            await b.leases.look()
            await a.leases.look()
        assert len(a.leases.served) == 2 and len(b.leases.served) == 2
        assert a.leases.served.isdisjoint(b.leases.served)
        owner = {shard: (a if shard in a.leases.served else b) for shard in range(SHARDS)}

        boxes = {f"box-{shard}": str(shard) for shard in range(SHARDS)}
        boxes.update({"box-unlabelled": None, "box-bad": "7"})  # no valid label: served by nobody
        for name, shard in boxes.items():
            for replica in (a, b):
                replica.start(name, box(name, shard))
        labelled = [n for n, s in boxes.items() if s is not None and s.isdigit() and int(s) < SHARDS]
        await until(lambda: all(name in owner[int(boxes[name])].passes for name in labelled), 2,
                    "every labelled box's first pass at its shard's holder")
        for name, shard in boxes.items():
            where = {r.identity for r in (a, b) if name in r.passes}
            if name in labelled:
                assert where == {owner[int(shard)].identity}, f"{name} (shard {shard}) passed in {where}"
            else:
                assert where == set(), f"{name} with label {shard!r} passed in {where}"

        # Relabel box-0 into a shard the other replica holds; both watches deliver it.
        old = owner[0]
        new = b if old is a else a
        target = next(s for s in range(SHARDS) if owner[s] is new)
        assert "box-0" in old.running and "box-0" not in new.running
        await new.deliver("box-0", {LABEL: str(target)})  # the new owner's watch first: the worst order
        await old.deliver("box-0", {LABEL: str(target)})
        relabelled = asyncio.get_running_loop().time()
        assert "box-0" not in old.running or await _ended(old, "box-0"), "the old owner stopped at once"
        await until(lambda: "box-0" in new.running and new.passes.get("box-0"), 2, "box-0 served by its new owner")
        assert new.passes["box-0"][0] - relabelled <= 1.5, "within the daemons' label recheck"
        assert [t for t in old.passes["box-0"] if t >= relabelled] == [], "no pass of the old owner after it"
        assert "box-0" not in old.running
        for name in labelled[1:]:  # the others stay where they were
            assert name in owner[int(boxes[name])].running
    finally:
        await a.stop()
        await b.stop()
        await rest.aclose()


async def _ended(replica: Replica, name: str) -> bool:
    """The box's work in `replica` ended within a few loop turns (its cancellation delivered)."""
    for _ in range(20):
        if name not in replica.running:
            return True
        await asyncio.sleep(0)
    return False
