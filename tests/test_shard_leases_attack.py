# ruff: noqa: F811 -- the `rest` fixture imported from test_shard_leases is the tests' parameter name
"""Attacks on controller/kube/shardleases.py (the look that renews first, scans, and the Lease thread).

Each test states the property it checks; a failing test is a defect of the code under test. The docstrings
tell how the code failed when the test was written (a review of stop 25's Lease changes): six tests failed
then; the look now keeps renewing (the held shards and those being given back) while a scan or a stop runs,
a stop that raises ends the process, a kept shard whose take's answer was lost is renewed, and a retried
startup stops the first Lease thread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentbox_sim.kube import KubeEmulator
from controller.kube.election import ElectionTimings
from controller.kube.rest import KubeApiError, Rest
from controller.kube.shardleases import ShardLeases, shard_lease_name
from tests.test_shard_leases import NS, TIMINGS, Clock, SlowLeaseRequests, holders, rest  # noqa: F401 -- the `rest` fixture

pytestmark = pytest.mark.component


class LostAnswer:
    """A transport that applies the first write of `name` on the server, then reports no answer (a timeout on
    the way back, or a connection cut after the server applied it: `Rest` then retries and gets a 409)."""

    def __init__(self, rest: Rest, name: str) -> None:
        self.rest, self.name, self.lost = rest, name, False

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = await self.rest.request(method, path, **kwargs)
        body = kwargs.get("body") or {}
        if (method in ("PUT", "POST") and not self.lost
                and (body.get("metadata") or {}).get("name") == self.name):
            self.lost = True
            raise KubeApiError(method, path, 0, "Timeout")
        return answer


async def test_a_take_whose_answer_was_lost_is_served_within_a_scan_period(kube: KubeEmulator, rest: Rest):
    """The API server applied the take of shard 2 but its answer was lost. The Lease names this replica, so
    the next scan's plan counts shard 2 as held (`plan.renew`) -- but a look renews only `renewed_sent`, never
    `plan.renew`: nobody serves shard 2 until its Lease expires a whole lease duration later (the previous look
    renewed what the plan kept, and served it one look later)."""
    clock, exits = Clock(), []
    a = ShardLeases(LostAnswer(rest, "ctl-shard-2"), NS, "ctl", 4, "a", TIMINGS, clock=clock,  # type: ignore[arg-type]
                    exit=lambda code, why: exits.append(why))
    await a.look()
    assert holders(kube)[2] == "a" and a.served == {0, 1, 3}, (holders(kube), a.served)
    waited = 0
    while 2 not in a.served and waited < 30:
        clock.advance(1)
        waited += 1
        await a.look()
    scan = TIMINGS.lease_duration_s / 4
    assert waited <= scan + TIMINGS.retry_period_s, f"shard 2 (held by a) served by nobody for {waited} s"
    assert exits == []


async def test_a_scan_with_slow_reads_does_not_starve_the_next_renewal(kube: KubeEmulator, rest: Rest):
    """A scan's requests run one after the other (heartbeat read, heartbeat write, shard reads, give-backs),
    each within the request timeout; the held shards are renewed at the look's start only, so the next
    renewal waits for the whole scan. Reads under the timeout (0.7 s of 1 s here; 2.3 s of 2.33 s with the
    defaults, three in a row = 7 s = the renew deadline) leave the held shards unrenewed past the renew
    deadline: the shards stop being served and the watchdog ends the process."""
    timings = ElectionTimings(lease_duration_s=4, renew_deadline_s=1.3, retry_period_s=1.0)
    assert timings.problem() is None
    clock, exits = Clock(), []
    a = ShardLeases(rest, NS, "ctl", 4, "a", timings, clock=clock, exit=lambda code, why: exits.append(why))
    b = ShardLeases(rest, NS, "ctl", 4, "b", timings, clock=clock, exit=lambda code, why: exits.append(why))
    for _ in range(8):  # settle: two shards each
        clock.advance(1)
        await a.look()
        await b.look()
    assert len(a.served) == 2 and len(b.served) == 2 and exits == []
    mine = set(a.served)
    a.rest = SlowLeaseRequests(rest, 0.7, ("GET",))  # type: ignore[assignment]
    clock.advance(timings.lease_duration_s)  # a scan is due: the heartbeats, then b's two shards
    await a.look()
    ages = {s: round(time.monotonic() - t, 2) for s, t in a.renewed_sent.items()}
    assert a.served == mine, f"unrenewed past the renew deadline after one scan: {ages}"


async def test_a_slow_stop_serving_does_not_starve_the_renewals_of_the_kept_shards(kube: KubeEmulator, rest: Rest):
    """A gives two of its four shards back to b; stopping them takes longer than the renew deadline (the
    wiring allows STOP_TIMEOUT_S + 5 = 10 s, the renew deadline is 7 s). The look awaits stop_serving before
    anything else, so the two shards A keeps are not renewed meanwhile: they stop being served and the
    watchdog ends the process, because of a rebalance."""
    timings = ElectionTimings(lease_duration_s=3, renew_deadline_s=1.3, retry_period_s=1.0)
    assert timings.problem() is None
    clock, exits, seen = Clock(), [], []

    async def stop_serving(shards: set[int]) -> bool:
        await asyncio.sleep(1.4)
        seen.append((set(shards), a.served))
        return True

    a = ShardLeases(rest, NS, "ctl", 4, "a", timings, clock=clock, stop_serving=stop_serving,
                    exit=lambda code, why: exits.append(why))
    b = ShardLeases(rest, NS, "ctl", 4, "b", timings, clock=clock, exit=lambda code, why: exits.append(why))
    await a.look()
    assert a.served == {0, 1, 2, 3}
    await b.look()  # b's heartbeat
    clock.advance(timings.lease_duration_s)
    await a.look()  # a scan: a sees b and gives two shards back
    assert seen, "a gave shards back"
    stopping, served = seen[0]
    kept = {0, 1, 2, 3} - stopping
    assert len(kept) == 2
    assert kept <= served, f"while {sorted(stopping)} stopped, the kept {sorted(kept)} went unrenewed: served {served}"


async def test_a_shard_given_back_is_not_taken_while_its_old_holder_still_stops_it(kube: KubeEmulator, rest: Rest):
    """Three replicas, two shards: c (last in order) holds both, its share is 0, it gives both back. Its
    stop_serving runs longer than the lease duration (a busy main loop). The shards are no longer served by
    c, but c goes on renewing their Leases until the stop returned and it emptied them, so a and b, looking
    all the while (the injected clock moving with real time), never take them while what ran for them in c
    still runs; c does not end. About 2.5 s of wall time: the renewals are real-time."""
    timings = ElectionTimings(lease_duration_s=2, renew_deadline_s=0.6, retry_period_s=0.2)
    clock, exits = Clock(), []
    overlap: list[tuple[str, int]] = []
    a = ShardLeases(rest, NS, "ctl", 2, "a", timings, clock=clock, exit=lambda code, why: exits.append(why))
    b = ShardLeases(rest, NS, "ctl", 2, "b", timings, clock=clock, exit=lambda code, why: exits.append(why))

    async def stop_serving(shards: set[int]) -> bool:
        assert not (shards & c.served), "not served while being stopped"
        for _ in range(12):  # 2.4 s, past the lease duration: time passes for a and b as for c
            await asyncio.sleep(timings.retry_period_s)
            clock.advance(timings.retry_period_s)
            await a.look()
            await b.look()
            for name, other in (("a", a), ("b", b)):
                overlap.extend((name, s) for s in shards & other.served)
        return True

    c = ShardLeases(rest, NS, "ctl", 2, "c", timings, clock=clock, stop_serving=stop_serving,
                    exit=lambda code, why: exits.append(f"c: {why}"))
    await c.look()
    assert c.served == {0, 1}
    await a.look()
    await b.look()
    clock.advance(timings.lease_duration_s / 4)
    await c.look()  # a scan: c sees a and b, its share is 0
    assert overlap == [], f"taken while c still stopped them: {overlap}"
    assert exits == [] and c.served == frozenset()
    assert holders(kube)[:2] == [None, None], "given back once stopped"


async def test_a_stop_serving_that_raises_ends_the_process(kube: KubeEmulator, rest: Rest):
    """stop_serving raising (the main loop closed: `call_soon_threadsafe` raises; a cancellation) says nothing
    about whether what ran for the shards stopped. The look has already taken them out of `renewed_sent`
    (no renewal, no watchdog), gives nothing back and logs "look failed": the process goes on while the
    Leases expire and another replica takes them. Unable to prove they stopped, it must end."""
    clock, exits = Clock(), []

    async def stop_serving(shards: set[int]) -> bool:
        raise RuntimeError("Event loop is closed")

    a = ShardLeases(rest, NS, "ctl", 4, "a", TIMINGS, clock=clock, stop_serving=stop_serving,
                    exit=lambda code, why: exits.append(why))
    b = ShardLeases(rest, NS, "ctl", 4, "b", TIMINGS, clock=clock, exit=lambda code, why: exits.append(why))
    await a.look()
    await b.look()
    clock.advance(TIMINGS.lease_duration_s)
    try:
        await a.look()
    except RuntimeError:
        pass  # `run` logs "look failed" and goes on
    assert len(a.served) == 2 and holders(kube).count("a") == 4
    assert exits, "the process goes on though it cannot tell whether the shards given back stopped"


async def test_a_startup_retried_by_kopf_does_not_leave_held_shards_unserved(kube: KubeEmulator, rest: Rest):
    """kopf retries a startup handler that raised (any exception is temporary by default): `startup` failing
    after `_start_sharding` (the metrics port in use, say) runs `_start_sharding` again. The first
    LeaseThread is never stopped and goes on renewing the shards under the same identity; the second one
    reads them held by its identity but not in its own `renewed_sent`, so it neither renews nor serves them,
    and `memo.runtime.sharding` (the second's) serves nothing while the Leases say this replica holds them:
    no replica serves those shards, for as long as the first thread renews them (for ever). (With the
    plan.renew fix the second renews them too: two Lease threads of one identity fight over every Lease.)"""
    import logging
    from types import SimpleNamespace

    import kopf

    from controller.handlers.startup import _start_sharding

    timings = ElectionTimings(lease_duration_s=3, renew_deadline_s=1.3, retry_period_s=1.0)
    exits: list[str] = []
    memo = kopf.Memo()
    memo.shard_leases = ("ctl", NS, timings, "replica-1")
    memo.shard_exit = lambda code, why: exits.append(why)
    memo.runtime = SimpleNamespace(sharding=None)
    ops = SimpleNamespace(shards=4, shard_by="hash", shard_label="agentbox.dev/shard", kube_keepalive_s=30.0)
    log = logging.getLogger("test")
    threads = []
    try:
        await _start_sharding(kopf.OperatorSettings(), memo, ops, rest, log)  # type: ignore[arg-type]
        threads.append(memo.shard_thread)
        assert memo.runtime.sharding.served() == {0, 1, 2, 3}
        # ... startup raised after this; kopf calls it again
        await _start_sharding(kopf.OperatorSettings(), memo, ops, rest, log)  # type: ignore[arg-type]
        threads.append(memo.shard_thread)
        await asyncio.sleep(1.5)
        held = {i for i, h in enumerate(holders(kube)) if h == "replica-1"}
        assert held == {0, 1, 2, 3}
        assert memo.runtime.sharding.served() == held, \
            f"the Leases name this replica for {sorted(held)}, it serves {sorted(memo.runtime.sharding.served())}"
        first = threads[0]
        assert not first.leases.renewed_sent, "the first Lease thread still renews the same Leases (never stopped)"
    finally:
        for thread in reversed(threads):
            await thread.stop(5.0)


# ------------------------------------------------------------------------------------------ what holds
async def test_a_renewal_applied_but_unanswered_is_renewed_again_at_the_next_look(kube: KubeEmulator, rest: Rest):
    """A renewal the server applied but whose answer was lost: the next renewal on the old version gets a 409,
    the Lease (still this replica's) is read and renewed on it, in that look; nothing ends."""
    clock, exits = Clock(), []
    a = ShardLeases(rest, NS, "ctl", 4, "a", TIMINGS, clock=clock, exit=lambda code, why: exits.append(why))
    await a.look()
    a.rest = LostAnswer(rest, "ctl-shard-1")  # type: ignore[assignment]
    clock.advance(1)
    before = dict(a.renewed_sent)
    await a.look()
    assert a.renewed_sent[1] == before[1] and a.renewed_sent[0] > before[0]
    clock.advance(1)
    await a.look()
    assert a.renewed_sent[1] > before[1] and a.served == {0, 1, 2, 3} and exits == []


class FailingReads:
    def __init__(self, rest: Rest) -> None:
        self.rest = rest

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "GET":
            raise KubeApiError(method, path, 503, "ServiceUnavailable")
        return await self.rest.request(method, path, **kwargs)


async def test_a_scan_whose_reads_fail_still_renews_and_scans_again_at_the_next_look(kube: KubeEmulator, rest: Rest):
    clock, exits = Clock(), []
    a = ShardLeases(rest, NS, "ctl", 4, "a", TIMINGS, clock=clock, exit=lambda code, why: exits.append(why))
    await a.look()
    a.rest = FailingReads(rest)  # type: ignore[assignment]
    clock.advance(TIMINGS.lease_duration_s)
    before, scan_at = dict(a.renewed_sent), a._next_scan
    await a.look()
    assert all(a.renewed_sent[s] > before[s] for s in range(4)) and a._next_scan == scan_at
    a.rest = rest
    clock.advance(1)
    await a.look()
    assert a._next_scan is not None and a._next_scan > clock.now and exits == []
