"""The shard rules (controller/domain/shards.py): a stable hash, the label mode, and the Lease-claim rule
(a dead replica's shards are taken after expiry, two replicas never hold the same shard, the share converges)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.shards import (FREE, BadShardLabel, LeaseRecord, fair_share, live_replicas, plan_shards,
                                      shard_of, shard_of_labels)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
D = 10.0


def held(by: str, at: datetime = T0) -> LeaseRecord:
    return LeaseRecord(by, at, D)


# ------------------------------------------------------------------------------------------------- hash
def test_shard_of_is_stable_across_processes_and_spreads():
    here = [shard_of("team-a", f"box-{i}", 4) for i in range(200)]
    code = "from controller.domain.shards import shard_of; print([shard_of('team-a', f'box-{i}', 4) for i in range(200)])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert eval(there.stdout) == here  # noqa: S307 -- our own list literal
    counts = [here.count(s) for s in range(4)]
    assert min(counts) >= 30, counts
    assert shard_of("a", "b", 1) == 0 and shard_of("a", "b", 0) == 0


def test_shard_of_is_sha256_of_namespace_slash_name():
    import hashlib

    expected = int.from_bytes(hashlib.sha256(b"ns/box").digest()[:8], "big") % 7
    assert shard_of("ns", "box", 7) == expected
    assert shard_of("ns/b", "ox", 7) == shard_of("ns", "b/ox", 7)  # documented: the joined string decides


@pytest.mark.parametrize("labels, expected", [
    ({"agentbox.dev/shard": "2"}, 2),
    ({"agentbox.dev/shard": "0"}, 0),
    ({"agentbox.dev/shard": " 3 "}, 3),
    ({"agentbox.dev/shard": "4"}, "out of range"),
    ({"agentbox.dev/shard": "-1"}, "not a shard number"),
    ({"agentbox.dev/shard": "two"}, "not a shard number"),
    ({"agentbox.dev/shard": "²"}, "not a shard number"),
    ({}, "missing"),
    (None, "missing"),
])
def test_shard_of_labels(labels, expected):
    got = shard_of_labels(labels, "agentbox.dev/shard", 4)
    if isinstance(expected, int):
        assert got == expected
    else:
        assert isinstance(got, BadShardLabel) and expected in got.message and "agentbox.dev/shard" in got.message


# ------------------------------------------------------------------------------------------------- share
@pytest.mark.parametrize("total, replicas, shares", [
    (4, ["a", "b"], [2, 2]),
    (5, ["a", "b"], [3, 2]),
    (5, ["b", "a", "c"], [2, 2, 1]),
    (2, ["a", "b", "c"], [1, 1, 0]),
    (1, ["a"], [1]),
])
def test_fair_share_adds_up(total, replicas, shares):
    ordered = sorted(replicas)
    assert [fair_share(r, replicas, total) for r in ordered] == shares
    assert sum(shares) == total


def test_live_replicas_counts_holders_and_fresh_members_only():
    leases = [held("a"), held("dead", T0 - timedelta(seconds=11)), FREE]
    members = {"b": T0 - timedelta(seconds=3), "gone": T0 - timedelta(seconds=30)}
    assert live_replicas(leases, "me", T0, members, member_ttl_s=D) == ["a", "b", "me"]


# ------------------------------------------------------------------------------------------------- claim rule
@pytest.mark.parametrize("name, leases, identity, members, acquire, renew, release", [
    ("alone takes every free shard", [FREE] * 4, "a", {}, (0, 1, 2, 3), (), ()),
    ("renews what it holds", [held("a")] * 2 + [FREE] * 0, "a", {}, (), (0, 1), ()),
    ("never takes a live shard of another", [held("b")] * 4, "a", {}, (), (), ()),
    ("a newcomer makes the holder give back half", [held("a")] * 4, "a", {"b": T0}, (), (0, 1), (2, 3)),
    ("with an odd total the first identity keeps one more", [held("a")] * 3, "a", {"b": T0}, (), (0, 1), (2,)),
    ("takes its share of free shards", [held("a"), held("a"), FREE, FREE], "b", {}, (2, 3), (), ()),
    ("takes a shard whose Lease expired", [held("a"), held("dead", T0 - timedelta(seconds=D))], "a", {},
     (1,), (0,), ()),
    ("its own expired Lease is taken again, not renewed", [held("a", T0 - timedelta(seconds=D + 1))], "a", {},
     (0,), (), ()),
])
def test_plan_shards(name, leases, identity, members, acquire, renew, release):
    plan = plan_shards(leases, identity, T0, members, member_ttl_s=D)
    assert (plan.acquire, plan.renew, plan.release) == (acquire, renew, release), name


def test_a_dead_replica_is_waited_for_until_its_lease_expires():
    members = {"dead": T0}
    for after in (0.0, 5.0, D - 0.1, D):
        now = T0 + timedelta(seconds=after)
        leases = [held("a", now), held("a", now), held("dead"), held("dead")]  # "a" renewed at each look
        plan = plan_shards(leases, "a", now, members, member_ttl_s=D)
        assert plan.renew == (0, 1), after
        assert plan.acquire == ((2, 3) if after >= D else ()), after


class Cluster:
    """Shard Leases with compare-and-set writes, as the API server's resourceVersion gives them."""

    def __init__(self, total: int) -> None:
        self.holders: list[str | None] = [None] * total
        self.renewed: list[datetime | None] = [None] * total
        self.beats: dict[str, datetime] = {}

    def records(self) -> list[LeaseRecord]:
        return [LeaseRecord(h, r, D) if h else FREE for h, r in zip(self.holders, self.renewed)]

    def look(self, identity: str, now: datetime, seen: list[LeaseRecord] | None = None) -> None:
        """One look of `identity`: plan on the records it read (`seen`, default: now's), then write, each
        write applied only if the Lease is still as read (a 409 otherwise)."""
        self.beats[identity] = now
        seen = seen if seen is not None else self.records()
        plan = plan_shards(seen, identity, now, {m: t for m, t in self.beats.items() if m != identity}, D)
        for shard in plan.release:
            if self.holders[shard] == identity:
                self.holders[shard], self.renewed[shard] = None, None
        for shard in plan.renew + plan.acquire:
            if (self.holders[shard], self.renewed[shard]) == (seen[shard].holder, seen[shard].renewed_at):
                self.holders[shard], self.renewed[shard] = identity, now


def test_two_replicas_never_both_claim_a_shard_at_the_same_now():
    for total in (1, 2, 3, 4, 8):
        for leases in ([FREE] * total, [held("a")] * total, [held("dead", T0 - timedelta(seconds=20))] * total):
            plan_a = plan_shards(leases, "a", T0, {"b": T0}, D)
            plan_b = plan_shards(leases, "b", T0, {"a": T0}, D)
            # what each keeps is never what the other takes; what both try to take is decided by the CAS write
            assert not set(plan_a.renew) & set(plan_b.serving) and not set(plan_b.renew) & set(plan_a.serving)
            cluster = Cluster(total)
            cluster.holders = [r.holder for r in leases]
            cluster.renewed = [r.renewed_at for r in leases]
            seen = cluster.records()
            cluster.look("a", T0, seen)
            cluster.look("b", T0, seen)  # planned on the same records as "a"
            for shard in range(total):
                claimed = [who for who, plan in (("a", plan_a), ("b", plan_b)) if shard in plan.serving
                           and cluster.holders[shard] == who]
                assert len(claimed) <= 1


@pytest.mark.parametrize("total, names", [(4, ["a", "b"]), (7, ["a", "b", "c"]), (2, ["x", "y", "z"]),
                                          (16, ["r1", "r2", "r3", "r4", "r5"])])
def test_fair_share_converges_and_a_dead_replica_is_taken_over(total, names):
    cluster = Cluster(total)
    now = T0
    for step in range(40):  # every replica looks once a second, in turn; the first one was alone at first
        now += timedelta(seconds=1)
        for name in names[: 1 + step // 3]:
            cluster.look(name, now)
    counts = {n: cluster.holders.count(n) for n in names}
    assert None not in cluster.holders and sorted(counts.values()) == sorted(
        fair_share(n, names, total) for n in names), counts

    dead, survivors = names[0], names[1:]
    killed = now
    while now - killed < timedelta(seconds=D + 5):
        now += timedelta(seconds=1)
        for name in survivors:
            cluster.look(name, now)
        if now - killed < timedelta(seconds=D - 1):
            assert cluster.holders.count(dead) == counts[dead], "taken before the dead replica's Lease expired"
    assert dead not in cluster.holders and None not in cluster.holders
    assert sorted(cluster.holders.count(n) for n in survivors) == sorted(
        fair_share(n, survivors, total) for n in survivors)


def test_sharding_without_a_lease_name_is_refused(monkeypatch):
    """AGENTBOX_SHARDS > 1 needs `--leader-elect LEASE` (the shard Leases are LEASE-shard-<i>): exit 2 before
    any request."""
    from controller.__main__ import main

    monkeypatch.setenv("AGENTBOX_SHARDS", "2")
    assert main(["run"]) == 2
    monkeypatch.setenv("AGENTBOX_SHARDS", "0")
    assert main(["run", "--leader-elect", "ctl"]) == 2  # a bad setting


async def test_serving_stops_what_runs_for_a_shard_given_back_and_waits_for_a_shard_gained():
    """controller/service/sharding.py: `serve` runs a daemon's work while its shard is held, `stop_serving`
    cancels it and returns once it ended; `wait_served` returns when the shard comes, or False once the
    object is gone."""
    import asyncio

    from controller import constants as C
    from controller.service.sharding import Sharding

    held: set[int] = set()
    sharding = Sharding(4, served=lambda: held)
    box = next(f"box-{i}" for i in range(100) if shard_of("ns", f"box-{i}", 4) == 2)
    assert not sharding.serves(C.AGENTBOX_PLURAL, "ns", box)

    class Flag:
        def __bool__(self) -> bool:
            return False

    waiting = asyncio.ensure_future(sharding.wait_served(C.AGENTBOX_PLURAL, "ns", box, lambda: None, Flag()))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    held.add(2)
    sharding.changed()
    assert await asyncio.wait_for(waiting, 1) is True

    ended = asyncio.Event()

    async def work() -> bool:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.set()
        return True

    serving = asyncio.ensure_future(sharding.serve(C.AGENTBOX_PLURAL, "ns", box, 2, work()))
    await asyncio.sleep(0.05)
    assert await sharding.stop_serving({1, 3}) is True and not ended.is_set(), "other shards: left running"
    held.discard(2)
    assert await sharding.stop_serving({2}) is True and ended.is_set()
    assert await serving is None, "stopped because its shard was given back"

    gone = asyncio.ensure_future(sharding.wait_served(C.AGENTBOX_PLURAL, "ns", box, lambda: None, Flag(),
                                                      gone=lambda: True))
    assert await asyncio.wait_for(gone, 1) is False

    async def done_work() -> bool:
        return True

    held.add(2)
    assert await sharding.serve(C.AGENTBOX_PLURAL, "ns", box, 2, done_work()) is True


async def test_a_daemon_waiting_for_a_hash_shard_sleeps_until_the_shards_change_or_it_is_stopped():
    """Each replica runs a daemon for every box; with shards by hash the waiting ones look again only when the
    served shards change or the daemon is stopped (at 10,000 boxes, a look every second each was 35 % of a
    replica's CPU); with labels they read the labels again every `recheck_s`."""
    import asyncio

    from controller import constants as C
    from controller.service.sharding import Sharding

    class Stopped:  # as kopf's DaemonStopped: a flag, and `await stopped.wait()`
        def __init__(self) -> None:
            self.event = asyncio.Event()

        def __bool__(self) -> bool:
            return self.event.is_set()

        def wait(self):
            return self.event.wait()

    for by, most in (("hash", 2), ("label", None)):
        looks = [0]
        held: set[int] = set()

        def served() -> set[int]:
            looks[0] += 1
            return held

        sharding = Sharding(4, by, served=served)
        stopped = Stopped()
        waiting = asyncio.ensure_future(sharding.wait_served(
            C.AGENTBOX_PLURAL, "ns", "box-1", lambda: {"agentbox.dev/shard": "3"}, stopped, recheck_s=0.02,
            idle_recheck_s=30.0))
        await asyncio.sleep(0.5)
        if most is not None:
            assert looks[0] <= most, f"{by}: {looks[0]} looks in 0.5 s while nothing changed"
        else:
            assert looks[0] >= 10, f"{by}: the labels are read again every recheck_s ({looks[0]} looks)"
        stopped.event.set()
        assert await asyncio.wait_for(waiting, 1.0) is False, "stopped: the wait ends at once"
