"""High availability: two operator replicas as separate OS processes (`agentbox-controller run
--leader-elect`, the chart's default timings 10/7/1 s), each with its own listener on the emulated API
server, so the journal tells their requests apart and one of them can be cut off.

* Failover: exactly one replica acts (the standby only reads the Lease: no exec, no status write); the
  leader is SIGKILLed shortly before a reset; the standby takes the Lease and starts within the stated
  bound (docs/operations.md: 15 s), and every due tab gets exactly one `continue` (none lost, none doubled,
  none early), those due during the failover and those due after it.
* No split brain: a leader cut off from the API server (a partition that drops its packets) stops acting
  (its process exits) before the standby may take the Lease, and never acts again after the partition
  heals; the standby takes over and resumes the tab due meanwhile exactly once.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
import subprocess
import time
from typing import Any, Callable

import pytest

from controller import constants as C
from controller.kube.election import ElectionTimings
from agentbox_sim.kube import JournalEntry
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in
from tests.test_resume_scenarios import at, submits, tab_status

pytestmark = pytest.mark.component

LEASE = "agentbox-controller"
TIMINGS = ElectionTimings()          # the chart's defaults (tests/test_chart.py checks they are the same)
STATED_BOUND_S = 15.0                # docs/operations.md#high-availability
SETTLE_S = 6.0                       # after the last expected continue: time for a wrong second one to show


class Replica:
    """One operator process with its own listener (port) on the emulator."""

    def __init__(self, world: World, name: str, url: str, proc: subprocess.Popen[bytes]) -> None:
        self.world, self.name, self.url, self.proc = world, name, url, proc
        self.port = int(url.rsplit(":", 1)[1])

    def requests(self, until: float | None = None) -> list[JournalEntry]:
        return [e for e in self.world.kube.journal if e.port == self.port and (until is None or e.at < until)]

    def acting(self, until: float | None = None) -> list[JournalEntry]:
        """Requests other than the election's (reading/writing the Lease) and the start's /version check."""
        return [e for e in self.requests(until) if "/leases" not in e.path and e.path.rstrip("/") != "/version"]

    def execs(self, until: float | None = None) -> list[JournalEntry]:
        return [e for e in self.requests(until) if e.path.endswith("/exec")]

    def status_writes(self, until: float | None = None) -> list[JournalEntry]:
        return [e for e in self.requests(until) if e.method in ("PATCH", "PUT") and e.path.endswith("/status")]

    def first_box_watch(self) -> JournalEntry | None:
        """Its operator is running from its first AgentBox watch on."""
        return next((e for e in self.requests() if e.method == "GET" and e.path.endswith(f"/{C.AGENTBOX_PLURAL}")
                     and "watch=" in e.query), None)


def holder(world: World) -> str:
    lease = world.kube.get("coordination.k8s.io/v1/leases", world.namespace, LEASE) or {}
    return (lease.get("spec") or {}).get("holderIdentity") or ""


async def start_replicas(world: World, operator_process: Callable[..., Any],
                         tmp_path: pathlib.Path) -> list[Replica]:
    args = ("--leader-elect", LEASE, "--lease-namespace", world.namespace,
            "--lease-duration", str(TIMINGS.lease_duration_s), "--renew-deadline", str(TIMINGS.renew_deadline_s),
            "--retry-period", str(TIMINGS.retry_period_s))
    replicas = []
    for name in ("replica-a", "replica-b"):
        url = await world.kube.add_port()
        kubeconfig = world.kube.write_kubeconfig(tmp_path / f"{name}.kubeconfig", namespace=world.namespace,
                                                 server=url)
        replicas.append(Replica(world, name, url, operator_process(name, *args, kubeconfig=kubeconfig)))
    await eventually(lambda: holder(world), 30, what="one replica holds the Lease")
    return replicas


def leader_of(replicas: list[Replica], world: World) -> tuple[Replica, Replica]:
    pid = int(holder(world).split("_")[-2])  # identity: <hostname>_<pid>_<random>
    leader = next(r for r in replicas if r.proc.pid == pid)
    return leader, next(r for r in replicas if r is not leader)


async def limited_box(world: World, box: str, account: str, reset: float, tabs: tuple[str, ...]) -> None:
    token = f"tok-{box}"
    world.provider.add_login(token, account)
    world.provider.set_windows(account, five_hour=(100.0, at(reset)), weekly=(40.0, utc_in(86400)))
    await world.add_secret(f"{box}-login", "credentials.json", claude_login(token))
    await world.add_subscription(f"{box}-sub", "anthropic", f"{box}-login", "credentials.json")
    await world.add_box(box, "claude-code", f"{box}-sub")
    await world.run_pod(box, [TabSpec(t, fake_agent_argv("claude-code", reset)) for t in tabs], timeout=40)


def continues(world: World, box: str, tab: str) -> list[float]:
    """Instants (epoch s) the fake agent received a submitted `continue`."""
    return [e["t"] for e in world.agent_log(box, tab) if e["event"] == "submit" and e.get("text") == "continue"]


def all_limited(world: World, tabs: list[tuple[str, str]]) -> bool:
    return all(tab_status(world, box, tab).get("state") == "RateLimited" for box, tab in tabs)


async def until(instant: float) -> None:
    await eventually(lambda: time.time() >= instant, max(1.0, instant - time.time() + 5), every=0.05,
                     what=f"the clock at {instant}")


async def test_killed_leader_hands_over_within_the_bound_and_every_due_tab_resumes_once(
        world: World, operator_process, tmp_path: pathlib.Path):
    assert TIMINGS.failover_bound_s <= STATED_BOUND_S
    replicas = await start_replicas(world, operator_process, tmp_path)
    # box-a resets 3 s after the kill (due while nobody leads), box-b 20 s after it (after the takeover).
    reset_a = float(math.ceil(time.time() + 30))
    kill_at = reset_a - 3
    reset_b = kill_at + 20
    await limited_box(world, "box-a", "acct-a", reset_a, ("t1", "t2"))
    await limited_box(world, "box-b", "acct-b", reset_b, ("t1",))
    tabs = [("box-a", "t1"), ("box-a", "t2"), ("box-b", "t1")]
    await eventually(lambda: all_limited(world, tabs), kill_at - time.time() - 1,
                     what="every tab RateLimited before the kill")
    leader, standby = leader_of(replicas, world)

    await until(kill_at)
    leader.proc.kill()  # SIGKILL
    killed = time.time()
    assert leader.execs() and leader.status_writes(), "the leader acted before the kill"
    assert standby.acting(until=killed) == [], (
        f"the standby made requests other than reading the Lease: {standby.acting(until=killed)[:5]}")

    await eventually(standby.first_box_watch, STATED_BOUND_S + 10, what="the standby's operator running")
    failover = standby.first_box_watch().at - killed  # type: ignore[union-attr]
    assert failover <= STATED_BOUND_S, f"failover took {failover:.1f} s (stated: <= {STATED_BOUND_S} s)"
    assert int(holder(world).split("_")[-2]) == standby.proc.pid

    await eventually(lambda: all(continues(world, b, t) for b, t in tabs), reset_b + 40 - time.time(),
                     what="a continue in every tab")
    await until(max(c for b, t in tabs for c in continues(world, b, t)) + SETTLE_S)
    for box, tab, reset in (("box-a", "t1", reset_a), ("box-a", "t2", reset_a), ("box-b", "t1", reset_b)):
        sent = continues(world, box, tab)
        assert len(sent) == 1, f"{box}/{tab}: {len(sent)} continues"
        assert sent[0] >= reset, f"{box}/{tab}: continue {reset - sent[0]:.1f} s before the reset"
    assert submits(world, "box-a", "t1") == ["continue"]
    assert leader.proc.wait() == -9 and leader.requests(until=None) == leader.requests(until=killed + 0.5)


async def test_leader_cut_off_from_the_api_stops_acting_before_the_standby_takes_over(
        world: World, operator_process, tmp_path: pathlib.Path):
    replicas = await start_replicas(world, operator_process, tmp_path)
    reset = float(math.ceil(time.time() + 25))
    cut_at = reset - 4
    await limited_box(world, "box-a", "acct-a", reset, ("t1",))
    await eventually(lambda: all_limited(world, [("box-a", "t1")]), cut_at - time.time() - 1,
                     what="the tab RateLimited before the partition")
    leader, standby = leader_of(replicas, world)

    await until(cut_at)
    world.kube.partition(leader.port, "hang")  # its packets are dropped: requests get no answer
    cut = time.time()
    renewals = [e for e in leader.requests(until=cut) if e.method == "PUT" and "/leases/" in e.path
                and e.status == 200]
    last_renewal = renewals[-1].at

    await eventually(lambda: leader.proc.poll() is not None, TIMINGS.renew_deadline_s + 10,
                     what="the cut-off leader exits")
    exited = time.time()
    assert leader.proc.returncode == 1, "it exits with an error: the kubelet restarts it as a standby"
    assert exited - last_renewal <= TIMINGS.renew_deadline_s + 1.5, (
        f"exited {exited - last_renewal:.1f} s after its last renewal (renew deadline {TIMINGS.renew_deadline_s} s)")

    await eventually(standby.first_box_watch, TIMINGS.lease_duration_s + 15, what="the standby's operator running")
    takeover = next(e.at for e in standby.requests() if e.method == "PUT" and "/leases/" in e.path and e.status == 200)
    assert exited < takeover, "the old leader was gone before the standby took the Lease"
    assert takeover - last_renewal >= TIMINGS.lease_duration_s, "the standby waited a whole lease duration"
    world.kube.partition(leader.port, None)  # healed: nothing of the old leader may reach the API server now
    assert standby.acting(until=takeover) == [], "the standby acted before it held the Lease"

    await eventually(lambda: continues(world, "box-a", "t1"), 40, what="the continue sent by the new leader")
    await until(continues(world, "box-a", "t1")[0] + SETTLE_S)
    sent = continues(world, "box-a", "t1")
    assert len(sent) == 1 and sent[0] >= reset, sent
    served_after = [e for e in leader.requests() if e.at >= cut and e.status not in (0, None)]
    assert served_after == [], f"the cut-off leader acted after the partition: {served_after[:5]}"


async def test_sigterm_gives_the_lease_up_and_a_standby_serves_liveness(
        world: World, operator_process, tmp_path: pathlib.Path, unused_tcp_port_factory):
    """A rolling update (SIGTERM): the leader empties the Lease's holder and exits 0, so the standby takes
    over at its next look (retry period), not after a whole lease duration. Meanwhile the standby answers the
    liveness probe itself (kopf serves it only once it leads), so the kubelet does not restart it."""
    import aiohttp

    ports = {"replica-a": unused_tcp_port_factory(), "replica-b": unused_tcp_port_factory()}
    args = ("--leader-elect", LEASE, "--lease-namespace", world.namespace)
    replicas = []
    for name in ports:
        url = await world.kube.add_port()
        kubeconfig = world.kube.write_kubeconfig(tmp_path / f"{name}.kubeconfig", namespace=world.namespace,
                                                 server=url)
        proc = operator_process(name, *args, "--liveness", f"http://127.0.0.1:{ports[name]}/healthz",
                                kubeconfig=kubeconfig)
        replicas.append(Replica(world, name, url, proc))
    await eventually(lambda: holder(world), 30, what="one replica holds the Lease")
    leader, standby = leader_of(replicas, world)
    await eventually(leader.first_box_watch, 20, what="the leader's operator running")

    async def healthz(name: str) -> tuple[int, str]:
        try:
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{ports[name]}/healthz") as resp:
                return resp.status, await resp.text()
        except aiohttp.ClientError:
            return 0, ""

    async def poll_healthz(name: str, ok: Callable[[int, str], bool]) -> tuple[int, str]:
        deadline = time.time() + 20
        status, body = await healthz(name)
        while not ok(status, body) and time.time() < deadline:  # polls the endpoint until it answers so
            await asyncio.sleep(0.2)
            status, body = await healthz(name)
        return status, body

    status, body = await poll_healthz(standby.name, lambda s, b: s == 200)
    assert status == 200 and "standby" in body, "the standby answers the liveness probe itself"
    assert standby.acting() == []

    leader.proc.terminate()  # SIGTERM
    termed = time.time()
    await eventually(lambda: leader.proc.poll() is not None, 10, what="the leader exits on SIGTERM")
    assert leader.proc.returncode == 0
    released = [e for e in leader.requests() if e.method == "PUT" and "/leases/" in e.path and e.at >= termed]
    assert released and released[-1].status == 200, "the leader gave the Lease up"
    await eventually(standby.first_box_watch, 10, what="the standby's operator running")
    handover = standby.first_box_watch().at - termed  # type: ignore[union-attr]
    assert handover < TIMINGS.lease_duration_s, f"handover {handover:.1f} s: not one retry period, a lease expiry"
    status, body = await poll_healthz(standby.name, lambda s, b: s == 200 and "standby" not in b)
    assert status == 200 and "standby" not in body, "kopf serves the liveness endpoint on the same port now"
    assert standby.proc.poll() is None


async def test_a_leader_that_reads_another_holder_exits_at_once(world: World, operator_process, tmp_path: pathlib.Path):
    """Whoever else holds the Lease (a standby that took it while this leader was paused or cut off), the
    leader that sees it stops at its next look instead of acting until its renew deadline."""
    import aiohttp

    replicas = await start_replicas(world, operator_process, tmp_path)
    leader, standby = leader_of(replicas, world)
    path = f"/apis/coordination.k8s.io/v1/namespaces/{world.namespace}/leases/{LEASE}"
    lease = world.kube.get("coordination.k8s.io/v1/leases", world.namespace, LEASE) or {}
    lease["spec"]["holderIdentity"] = "intruder_1_abcdef"
    async with aiohttp.ClientSession(base_url=world.kube.url) as http, http.put(path, json=lease) as resp:
        assert resp.status in (200, 409)
        if resp.status == 409:  # the leader renewed in between: once more with the new version
            lease = world.kube.get("coordination.k8s.io/v1/leases", world.namespace, LEASE) or {}
            lease["spec"]["holderIdentity"] = "intruder_1_abcdef"
            async with http.put(path, json=lease) as again:
                assert again.status == 200
    taken = time.time()
    await eventually(lambda: leader.proc.poll() is not None, TIMINGS.renew_deadline_s, what="the leader exits")
    assert leader.proc.returncode == 1
    assert time.time() - taken <= 2 * TIMINGS.retry_period_s + 1.5, "at its next look, not at the renew deadline"
    assert standby.proc.poll() is None and standby.acting() == [], "the standby still waits (the intruder holds it)"


@pytest.mark.unit
@pytest.mark.parametrize("timings", [("5", "4.5", "1"), ("10", "1", "1"), ("10", "7", "0.5")])
def test_unsafe_timings_are_refused(timings: tuple[str, str, str]):
    from controller.__main__ import main

    lease, deadline, retry = timings
    assert main(["run", "--leader-elect", LEASE, "--lease-duration", lease, "--renew-deadline", deadline,
                 "--retry-period", retry]) == 2


async def test_a_paused_leader_exits_as_soon_as_it_runs_again(world: World, operator_process, tmp_path: pathlib.Path):
    """A leader frozen longer than the lease duration (SIGSTOP: a stalled node, a debugger) while a reset
    passes: the standby takes over and resumes the tab; when the old leader runs again its watchdog sees the
    renew deadline long gone and ends the process at once (within its 0.2 s period), so the tab still gets
    exactly one `continue`."""
    import os
    import signal

    replicas = await start_replicas(world, operator_process, tmp_path)
    reset = float(math.ceil(time.time() + 25))
    await limited_box(world, "box-a", "acct-a", reset, ("t1",))
    await eventually(lambda: all_limited(world, [("box-a", "t1")]), reset - 5 - time.time(), what="RateLimited")
    leader, standby = leader_of(replicas, world)
    await until(reset - 4)
    os.kill(leader.proc.pid, signal.SIGSTOP)
    stopped = time.time()
    await eventually(standby.first_box_watch, STATED_BOUND_S + 10, what="the standby's operator running")
    await eventually(lambda: continues(world, "box-a", "t1"), 40, what="the new leader's continue")
    assert standby.first_box_watch().at - stopped >= TIMINGS.lease_duration_s - TIMINGS.retry_period_s  # type: ignore[union-attr]
    os.kill(leader.proc.pid, signal.SIGCONT)
    resumed = time.time()
    await eventually(lambda: leader.proc.poll() is not None, 5, what="the old leader exits once it runs again")
    assert leader.proc.returncode == 1 and time.time() - resumed <= 1.5
    await until(max(resumed, continues(world, "box-a", "t1")[0]) + SETTLE_S)
    sent = continues(world, "box-a", "t1")
    assert len(sent) == 1 and sent[0] >= reset, sent


async def test_api_outage_longer_than_the_renew_deadline_hands_over_once_it_ends(
        world: World, operator_process, tmp_path: pathlib.Path):
    """The API server unreachable (connections reset) for longer than the lease duration across a reset:
    the leader exits at its renew deadline (it cannot know whether a standby took over); the standby's
    failed looks are only failed attempts (it keeps running: no crash loop); once the API is back the
    standby takes the Lease (after seeing it unchanged for a lease duration) and resumes the tab exactly once."""
    replicas = await start_replicas(world, operator_process, tmp_path)
    reset = float(math.ceil(time.time() + 25))
    await limited_box(world, "box-a", "acct-a", reset, ("t1",))
    await eventually(lambda: all_limited(world, [("box-a", "t1")]), reset - 5 - time.time(), what="RateLimited")
    leader, standby = leader_of(replicas, world)
    await until(reset - 3)
    world.kube.set_outage(True)
    out = time.time()
    await eventually(lambda: leader.proc.poll() is not None, TIMINGS.renew_deadline_s + 3, what="the leader exits")
    assert leader.proc.returncode == 1
    await until(out + TIMINGS.lease_duration_s + 2)
    assert standby.proc.poll() is None, "the standby survives the outage"
    world.kube.set_outage(False)
    back = time.time()
    await eventually(standby.first_box_watch, STATED_BOUND_S, what="the standby's operator running")
    # It must see the Lease unchanged for a whole lease duration by its own clock (it cannot tell when the
    # last renewal it had not seen happened): the failover bound, counted from the API's return.
    assert standby.first_box_watch().at - back <= TIMINGS.failover_bound_s  # type: ignore[union-attr]
    await eventually(lambda: continues(world, "box-a", "t1"), 40, what="the continue after the outage")
    await until(continues(world, "box-a", "t1")[0] + SETTLE_S)
    sent = continues(world, "box-a", "t1")
    assert len(sent) == 1 and sent[0] >= reset, sent
    assert standby.acting(until=back) == []
