"""Shard Leases (controller/kube/shardleases.py) against the emulated API server: replicas split the shards,
a replica that stops renewing has its shards taken once their Leases expire (by the taker's clock), two
replicas racing for the same version get one winner (409), a shard given back is stopped first."""

from __future__ import annotations

import asyncio
import contextlib
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

    mine, silent_at = set(b.served), clock.now
    for _ in range(int(TIMINGS.lease_duration_s) - 1):  # a is silent: b waits until a's Leases expire
        clock.advance(1)
        await b.look()
        assert b.served == mine
    scan = TIMINGS.lease_duration_s / 4  # b reads the Leases it does not hold every scan period
    while b.served != {0, 1, 2, 3} and (clock.now - silent_at).total_seconds() < 60:
        clock.advance(1)
        await b.look()
    waited = (clock.now - silent_at).total_seconds()
    assert holders(kube) == ["b"] * 4 and b.served == {0, 1, 2, 3}
    assert TIMINGS.lease_duration_s <= waited <= TIMINGS.lease_duration_s + scan + 1, waited
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


class SlowLeaseRequests:
    """A transport whose Lease requests of `methods` each take `delay_s` (an API server under load)."""

    def __init__(self, rest: Rest, delay_s: float, methods: tuple[str, ...]) -> None:
        self.rest, self.delay_s, self.methods = rest, delay_s, methods

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method in self.methods:
            await asyncio.sleep(self.delay_s)
        return await self.rest.request(method, path, **kwargs)


async def test_a_look_renews_every_held_shard_in_one_round_trip(kube: KubeEmulator, rest: Rest):
    """Four shards held and writes that take 0.4 s: one look renews them all within one write's time (one
    after the other, the first shard's renewals were a whole look apart and missed the renew deadline)."""
    clock, stopped, exits = Clock(), [], []
    a = replica(rest, "a", clock, stopped, exits)
    await a.look()
    assert a.served == {0, 1, 2, 3}
    a.rest = SlowLeaseRequests(rest, 0.4, ("PUT", "POST"))  # type: ignore[assignment]
    clock.advance(1)
    before = dict(a.renewed_sent)
    started = asyncio.get_running_loop().time()
    await a.look()
    took = asyncio.get_running_loop().time() - started
    assert all(a.renewed_sent[s] > before[s] for s in range(4)), "every shard renewed"
    assert max(a.renewed_sent.values()) - min(a.renewed_sent.values()) < 0.2, "the renewals went out together"
    assert took < 4 * 0.4, f"one look took {took:.2f} s"


class CountingTransport:
    """A transport that records (method, Lease name) of every request."""

    def __init__(self, rest: Rest) -> None:
        self.rest, self.sent = rest, []

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.sent.append((method, path.rsplit("/", 1)[-1]))
        return await self.rest.request(method, path, **kwargs)

    async def aclose(self) -> None:
        await self.rest.aclose()


async def test_between_scans_a_look_only_renews_the_held_shards_without_reading_them(kube: KubeEmulator, rest: Rest):
    """12 shards, 3 replicas: a look between scans is one PUT per held shard; the other shards and the
    heartbeats are read once a scan period. A minute of looks costs a replica well under half the requests
    of reading every Lease at every look."""
    import math

    clock, exits = Clock(), []
    transports = [CountingTransport(rest) for _ in range(3)]
    reps = [ShardLeases(t, NS, "ctl", 12, name, TIMINGS, clock=clock, exit=lambda c, w: exits.append(w))  # type: ignore[arg-type]
            for t, name in zip(transports, ("a", "b", "c"))]

    async def second() -> None:
        clock.advance(1)
        for r in reps:
            await r.look()

    for _ in range(15):  # settle: every replica holds its share
        await second()
    assert sorted(len(r.served) for r in reps) == [4, 4, 4] and exits == []
    a, counting = reps[0], transports[0]
    mine = {shard_lease_name("ctl", s) for s in a.served}
    counting.sent.clear()
    a.requests = 0
    for _ in range(60):
        await second()
    assert {shard_lease_name("ctl", s) for s in a.served} == mine and exits == []
    reads_of_held = [name for method, name in counting.sent if method == "GET" and name in mine]
    assert reads_of_held == [], "a held shard is not read before its renewal"
    puts = [name for method, name in counting.sent if method == "PUT" and name in mine]
    assert len(puts) == 60 * 4, "every held shard renewed at every look"
    every = math.ceil(TIMINGS.lease_duration_s / 4 / TIMINGS.retry_period_s)  # looks per scan
    scans = sum(1 for method, name in counting.sent if method == "GET" and name == "ctl-shards")
    assert 60 // every - 1 <= scans <= 60 // every + 1, scans
    others = [name for method, name in counting.sent if method == "GET" and name.startswith("ctl-shard-")]
    assert len(others) == scans * 8, "a scan reads the 8 shards not held"
    # every Lease read at every look was 60 x (1 + 12) reads + 60 x 4 renewals
    assert a.requests == len(counting.sent) < 0.5 * 60 * (13 + 4), a.requests


async def test_a_renewal_answered_409_reads_the_lease_and_renews_on_the_new_version(kube: KubeEmulator, rest: Rest):
    """Someone edits a held Lease's metadata: the renewal on the old version gets a 409; the Lease still
    names this replica, so it is renewed on the version read, in the same look, and nothing ends."""
    clock, stopped, exits = Clock(), [], []
    a = replica(rest, "a", clock, stopped, exits)
    await a.look()
    lease: dict[str, Any] = kube.get("coordination.k8s.io/v1/leases", NS, "ctl-shard-2") or {}
    lease["metadata"].setdefault("annotations", {})["edited"] = "by hand"
    await rest.request("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/ctl-shard-2", body=lease)
    before = dict(a.renewed_sent)
    clock.advance(1)
    await a.look()
    assert exits == []
    assert a.renewed_sent[2] > before[2] and a.served == {0, 1, 2, 3}
    after = kube.get("coordination.k8s.io/v1/leases", NS, "ctl-shard-2") or {}
    assert after["spec"]["holderIdentity"] == "a" and after["metadata"]["annotations"]["edited"] == "by hand"


@contextlib.asynccontextmanager
async def api_server_on_its_own_thread() -> AsyncIterator[KubeEmulator]:
    """An emulated API server on a thread and event loop of its own: a test may block its own loop."""
    import threading

    loop = asyncio.new_event_loop()
    emulator = KubeEmulator()
    threading.Thread(target=loop.run_forever, name="api-server", daemon=True).start()

    def on_server(coro: Any) -> Any:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    await on_server(emulator.start())
    try:
        yield emulator
    finally:
        await on_server(emulator.stop())
        loop.call_soon_threadsafe(loop.stop)


async def test_the_lease_thread_renews_while_the_main_loop_is_blocked():
    """The main loop blocked for twice the renew deadline (a replica busy starting streams): the Lease
    thread renews meanwhile, so the shards stay served and the watchdog does not end the process; the
    callbacks run on the main loop's thread. The API server runs on a thread of its own here (on the test's
    loop it would be blocked too). About 2 s of wall time: real threads and a real clock."""
    import threading
    import time

    from controller.kube.shardleases import LeaseThread, on_loop, stop_on_loop

    async with api_server_on_its_own_thread() as emulator:
        cfg = kubernetes.client.Configuration()
        cfg.host = emulator.url
        timings = ElectionTimings(lease_duration_s=3, renew_deadline_s=0.6, retry_period_s=0.2)
        main = asyncio.get_running_loop()
        threads: list[str] = []
        exits: list[str] = []

        async def stop_serving(shards: set[int]) -> bool:
            threads.append(threading.current_thread().name)
            return True

        leases = ShardLeases(Rest(cfg, max_requests=0, timeout_s=1.0), NS, "ctl", 4, "a", timings,
                             stop_serving=stop_on_loop(main, stop_serving, 2.0),
                             on_change=on_loop(main, lambda: threads.append(threading.current_thread().name)),
                             exit=lambda code, why: exits.append(why))
        runner = LeaseThread(leases)
        await runner.start()
        watchdog = leases.start_watchdog()
        assert leases.served == {0, 1, 2, 3}
        renewed = dict(leases.renewed_sent)
        time.sleep(2 * timings.renew_deadline_s)  # the main loop does nothing else meanwhile
        assert leases.served == {0, 1, 2, 3}, "renewed by the Lease thread"
        assert all(leases.renewed_sent[s] > renewed[s] for s in range(4))
        await asyncio.sleep(0.3)
        assert exits == [] and watchdog.is_alive()
        await runner.stop()
        held = [((emulator.get("coordination.k8s.io/v1/leases", NS, shard_lease_name("ctl", i)) or {})
                 .get("spec") or {}).get("holderIdentity") for i in range(4)]
        assert held == [None] * 4, "every shard given back at stop"
        assert threads and set(threads) == {threading.current_thread().name}, threads


async def test_a_main_loop_that_hangs_ends_the_process_though_the_lease_thread_renews():
    """The Lease thread renews for the main loop; a main loop that does not run at all for `main_stall_s`
    (hung) must not hold its shards forever: the process ends. About 1.5 s of wall time (real threads)."""
    import threading
    import time

    from controller.kube.shardleases import LeaseThread

    async with api_server_on_its_own_thread() as emulator:
        cfg = kubernetes.client.Configuration()
        cfg.host = emulator.url
        exits: list[str] = []
        leases = ShardLeases(Rest(cfg, max_requests=0, timeout_s=1.0), NS, "ctl", 2, "a",
                             ElectionTimings(lease_duration_s=3, renew_deadline_s=0.6, retry_period_s=0.2),
                             exit=lambda code, why: exits.append(why))
        runner = LeaseThread(leases, main_stall_s=0.8)
        await runner.start()
        time.sleep(0.5)
        assert exits == [], "a main loop busy for less than the bound is waited for"
        await asyncio.sleep(0.1)
        time.sleep(1.5)
        assert exits and "event loop did not run" in exits[0], exits
        await runner.stop()


async def test_a_scan_with_slow_reads_renews_the_held_shards_first(kube: KubeEmulator, rest: Rest):
    """A scan reads the heartbeats, then the shards not held; on a loaded API server each read may take
    seconds. The held shards' renewals go out at the look's start, not after the reads (a replica at 3,300
    boxes missed its renew deadline behind them)."""
    import time

    clock, exits = Clock(), []
    a = ShardLeases(rest, NS, "ctl", 4, "a", TIMINGS, clock=clock, stop_serving=None,
                    exit=lambda code, why: exits.append(why))
    await a.look()
    assert a.served == {0, 1, 2, 3}
    a.rest = SlowLeaseRequests(rest, 0.3, ("GET",))  # type: ignore[assignment]
    clock.advance(TIMINGS.lease_duration_s)  # a scan is due
    started = time.monotonic()
    await a.look()
    took = time.monotonic() - started
    assert took >= 0.3, "the scan read the heartbeats (slowly)"
    assert all(0 <= a.renewed_sent[s] - started < 0.1 for s in range(4)), "renewed before the reads ended"
    assert exits == [] and a.served == {0, 1, 2, 3}


@pytest.mark.unit
async def test_the_collector_waits_until_every_held_shard_was_just_renewed() -> None:
    """`controller.heap.wait_fresh` on `renewal_ages` (the full collection's `before`): none held, return at
    once; a shard renewed long ago, wait for its renewal (or the bound)."""
    import time as _time

    from controller.heap import wait_fresh

    leases = ShardLeases(None, NS, "ctl", 4, "a", TIMINGS, clock=lambda: datetime.now(timezone.utc))  # type: ignore[arg-type]
    t0 = _time.monotonic()
    await wait_fresh(leases.renewal_ages, 0.2, 5.0)
    assert _time.monotonic() - t0 < 0.5, "nothing held: no wait"
    leases._sent(0, _time.monotonic() - 3.0)
    leases._sent(1, _time.monotonic())

    async def renew_later() -> None:
        await asyncio.sleep(0.3)
        for shard in (0, 1):  # one renewal round renews every held shard at once
            leases._sent(shard, _time.monotonic())

    renewer = asyncio.ensure_future(renew_later())
    t0 = _time.monotonic()
    await wait_fresh(leases.renewal_ages, 0.2, 5.0)
    waited = _time.monotonic() - t0
    await renewer
    assert 0.25 <= waited < 2.0, f"returned after shard 0's renewal, not before: {waited:.2f} s"
    leases._sent(2, _time.monotonic() - 60.0)  # never renewed again: the bound
    t0 = _time.monotonic()
    await wait_fresh(leases.renewal_ages, 0.2, 0.3)
    assert 0.28 <= _time.monotonic() - t0 < 1.5
