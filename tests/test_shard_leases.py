"""Shard Leases (controller/kube/shardleases.py) against the emulated API server: replicas split the shards,
a replica that stops renewing has its shards taken once their Leases expire (by the taker's clock), two
replicas racing for the same version get one winner (409), a shard given back is stopped first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import kubernetes.client
import pytest
import pytest_asyncio

from agentbox_sim.kube import KubeEmulator
from controller.kube.election import ElectionTimings
from controller.kube.rest import Rest
from controller.kube.shardleases import ShardLeases, lease_names, shard_lease_name

pytestmark = pytest.mark.component

NS = "default"
TIMINGS = ElectionTimings()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest_asyncio.fixture
async def rest(kube: KubeEmulator) -> AsyncIterator[Rest]:
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.url
    transport = Rest(cfg)
    try:
        yield transport
    finally:
        await transport.aclose()


def replica(rest: Rest, identity: str, clock: Clock, stopped: list[tuple[str, set[int]]],
            exits: list[str]) -> ShardLeases:
    async def stop_serving(shards: set[int]) -> bool:
        stopped.append((identity, set(shards)))
        return True

    return ShardLeases(rest, NS, "ctl", 4, identity, TIMINGS, clock=clock, stop_serving=stop_serving,
                       exit=lambda code, why: exits.append(f"{identity}: {why}"))


def holders(kube: KubeEmulator) -> list[str | None]:
    return [((kube.get("coordination.k8s.io/v1/leases", NS, shard_lease_name("ctl", i)) or {}).get("spec") or {})
            .get("holderIdentity") for i in range(4)]


async def test_replicas_split_the_shards_and_a_silent_one_is_taken_over_after_expiry(kube: KubeEmulator, rest: Rest):
    clock, stopped, exits = Clock(), [], []
    a, b = replica(rest, "a", clock, stopped, exits), replica(rest, "b", clock, stopped, exits)
    await a.look()
    assert holders(kube) == ["a"] * 4 and a.served == {0, 1, 2, 3}
    for _ in range(4):  # b's heartbeat makes a give back half; b takes it at its next look
        clock.advance(1)
        await b.look()
        await a.look()
    assert sorted(holders(kube), key=str) == ["a", "a", "b", "b"], holders(kube)
    assert stopped and stopped[0][0] == "a" and len(stopped[0][1]) == 2, "a stopped serving before giving back"
    assert a.served.isdisjoint(b.served) and a.served | b.served == {0, 1, 2, 3}

    mine = set(b.served)
    for _ in range(int(TIMINGS.lease_duration_s) - 1):  # a is silent: b waits until a's Leases expire
        clock.advance(1)
        await b.look()
        assert b.served == mine
    clock.advance(2)
    await b.look()
    assert holders(kube) == ["b"] * 4 and b.served == {0, 1, 2, 3}
    assert exits == []
    assert {n for n in lease_names("ctl", 4)} >= {f"ctl-shard-{i}" for i in range(4)}
    assert kube.get("coordination.k8s.io/v1/leases", NS, "ctl-shards") is not None


async def test_two_replicas_racing_for_the_same_versions_get_one_winner_per_shard(kube: KubeEmulator, rest: Rest):
    clock, stopped, exits = Clock(), [], []
    a, b = replica(rest, "a", clock, stopped, exits), replica(rest, "b", clock, stopped, exits)
    await asyncio.gather(a.look(), b.look())
    assert a.served.isdisjoint(b.served)
    assert all(h in ("a", "b") for h in holders(kube) if h)
    for shard, holder in enumerate(holders(kube)):
        assert (shard in a.served) == (holder == "a") and (shard in b.served) == (holder == "b")


async def test_a_replica_that_reads_another_holder_in_its_shard_ends(kube: KubeEmulator, rest: Rest):
    clock, stopped, exits = Clock(), [], []
    a = replica(rest, "a", clock, stopped, exits)
    await a.look()
    lease: dict[str, Any] = kube.get("coordination.k8s.io/v1/leases", NS, "ctl-shard-1") or {}
    lease["spec"]["holderIdentity"] = "intruder"
    await rest.request("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/ctl-shard-1", body=lease)
    await a.look()
    assert exits and "ctl-shard-1" in exits[0] and "intruder" in exits[0]


async def test_release_all_stops_serving_then_empties_the_holders(kube: KubeEmulator, rest: Rest):
    clock, stopped, exits = Clock(), [], []
    a = replica(rest, "a", clock, stopped, exits)
    await a.look()
    await a.release_all()
    assert stopped == [("a", {0, 1, 2, 3})] and holders(kube) == [None] * 4 and a.served == frozenset()


class SlowLeaseWrites:
    """A transport whose Lease writes each take `delay_s` (an API server under load)."""

    def __init__(self, rest: Rest, delay_s: float) -> None:
        self.rest, self.delay_s = rest, delay_s

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method in ("PUT", "POST"):
            await asyncio.sleep(self.delay_s)
        return await self.rest.request(method, path, **kwargs)


async def test_a_look_renews_every_held_shard_in_one_round_trip(kube: KubeEmulator, rest: Rest):
    """Four shards held and writes that take 0.4 s: one look renews them all within one write's time (one
    after the other, the first shard's renewals were a whole look apart and missed the renew deadline)."""
    clock, stopped, exits = Clock(), [], []
    a = replica(rest, "a", clock, stopped, exits)
    await a.look()
    assert a.served == {0, 1, 2, 3}
    a.rest = SlowLeaseWrites(rest, 0.4)  # type: ignore[assignment]
    clock.advance(1)
    before = dict(a.renewed_sent)
    started = asyncio.get_running_loop().time()
    await a.look()
    took = asyncio.get_running_loop().time() - started
    assert all(a.renewed_sent[s] > before[s] for s in range(4)), "every shard renewed"
    assert max(a.renewed_sent.values()) - min(a.renewed_sent.values()) < 0.2, "the renewals went out together"
    assert took < 4 * 0.4, f"one look took {took:.2f} s"
