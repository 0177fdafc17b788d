"""Shards: N boxes on S Subscriptions served by R sharded replicas (issue 20), with a burst of resets, a
rotation and one replica SIGKILLed.

What is real and what is emulated (also in the final JSON under `emulated`):

* real: every replica is the real controller, `python -m controller run --leader-elect ctl` in its own OS
  process with `AGENTBOX_SHARDS` shards (the same kopf handlers, sharding, shard Leases, heartbeats, usage
  readers, tab watchers, live control-mode streams, armed continues, rotation); its RSS and CPU are read from
  /proc. The Kubernetes API server is the emulated one (agentbox_sim.kube, this process, one Python thread),
  each replica on its own listener so the journal tells their requests apart; the provider usage API is the
  emulated one (agentbox_sim.provider, this process).
* emulated: the boxes. No kubelet, no tmux server, no agent process: a pod is set Running as soon as the
  controller creates it, and its `pods/exec` (one-shot and the `tmux -C attach` stream) is answered in this
  process by agentbox_sim.fake_tabs: one tab per box, a screen string that shows a prompt, the Claude Code
  limit line printed by the bench until the controller types `continue` + Enter, then `working`. What the
  controller sends is what it sends to real tmux; the keys' arrival instants are those at the emulated API
  server.

Phases:
1. the replicas start and split the shard Leases; then S Subscriptions (provider logins at 50 %) and N
   AgentBoxes (box i on subscription i % S; the boxes of the first `--rotation-subs` Subscriptions with
   rotation on) are created; the bench waits until every box's tab has its live stream open.
2. idle (`--idle` s): per replica CPU (cores), RSS, API requests a minute, watch and exec connections open at
   the emulated API server (sampled every second: mean and max).
3. burst: the boxes of `--burst-subs` Subscriptions print their limit line with the same reset (a minute
   boundary at least `--lead` s ahead; their usage says 100 % until then). Lag = the Enter's arrival at the
   emulated API server - the resume instant (reset + `resume_margin_s`); p50/p99 overall and per replica (the
   holder of the box's shard).
4. rotation: the `--rotation-subs` Subscriptions go to 100 % (a reset 2 h out) and their boxes print the
   limit line at the same instant; reaction = that instant -> the box's `status.subscription` changed (and
   -> its `continue` on the new one).
5. failover (R > 1): a second burst (other Subscriptions), and the replica holding the most shards is
   SIGKILLed 3 s before its resume instant. Measured: kill -> every shard it held is held by a survivor
   (Lease holder), kill -> every one of its boxes has a live stream again from a survivor, and the lag of
   its due boxes (resumed by the survivors).

Correctness counters over every due tab (bursts and rotation): `served` (boxes whose tab got a live stream),
`lost` (a due tab never resumed), `double` (more than one `continue`), `early` (a `continue` before its
reset), `wrong_text`. `usage_readers_max`: per Subscription, how many replicas wrote its status (its usage
reader's writes) between the split and the kill; 1 means one reader in exactly one place.

Final line: one JSON object. Exit 1 if lost, double, early or wrong_text is not 0.

Usage: .venv/bin/python bench/shards.py [--boxes 1000] [--subscriptions 100] [--replicas 3] [--shards 12]
       [--idle 60] [--burst-subs 20] [--rotation-subs 2] [--lead 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentbox_sim.bench_settings import bench_settings  # noqa: E402
from agentbox_sim.procstat import LoopStalls, pdeathsig_kill, proc_cpu_s, proc_rss_mib  # noqa: E402
from agentbox_sim.fake_agent import claude_clock  # noqa: E402
from agentbox_sim.fake_tabs import FakeTabs  # noqa: E402
from agentbox_sim.world import World, claude_login  # noqa: E402
from controller import constants as C  # noqa: E402
from controller.domain.shards import shard_of  # noqa: E402

PREFIX = "ctl"
LEASES = "coordination.k8s.io/v1/leases"
EMULATED = {
    "replicas": "real: `python -m controller run --leader-elect ctl` per replica, its own OS process "
                "(AGENTBOX_SHARDS shards: the real handlers, sharding, shard Leases, streams, armed continues)",
    "api_server": "emulated: agentbox_sim.kube in the bench process (one Python thread), a listener per replica; its heap frozen out of the garbage collector every --emulator-freeze s (JSON `emulator`: its loop stalls and GC pauses)",
    "provider": "emulated: agentbox_sim.provider in the bench process",
    "boxes": "emulated: no kubelet, tmux or agent; pods set Running at creation; pods/exec answered in-process "
             "by agentbox_sim.fake_tabs (tmux 3.3a's one-shot and control-mode answers, one tab per box whose "
             "screen is a string: prompt, the Claude Code limit line, typed text, `working` after Enter)",
    "lag": "the Enter's arrival at the emulated API server - (reset + resume_margin_s)",
}


def log(msg: str) -> None:
    """A progress line on stdout (the JSON line comes last)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without values."""
    if not values:
        return None
    s = sorted(values)
    return round(s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))], 3)


class Connections:
    """Watch and exec connections open at the emulated API server, per listening port (= per replica): the
    emulator's watch and exec handlers wrapped to count while they serve."""

    def __init__(self, world: World) -> None:
        self.watch: Counter[int] = Counter()
        self.exec: Counter[int] = Counter()
        kube = world.kube
        serve_watch, serve_exec = kube._serve_watch, kube._serve_exec

        async def watch(raw: Any, entry: Any, res: Any, p: Any) -> Any:
            self.watch[entry.port] += 1
            try:
                return await serve_watch(raw, entry, res, p)
            finally:
                self.watch[entry.port] -= 1

        async def exec_(raw: Any, namespace: str, name: str) -> Any:
            sock = raw.transport.get_extra_info("sockname") if raw.transport is not None else None
            port = int(sock[1]) if sock else 0
            self.exec[port] += 1
            try:
                return await serve_exec(raw, namespace, name)
            finally:
                self.exec[port] -= 1

        kube._serve_watch = watch  # type: ignore[method-assign]
        kube._serve_exec = exec_  # type: ignore[method-assign]


class Replica:
    """One operator process with its own listener on the emulated API server."""

    def __init__(self, name: str, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.name, self.port, self.proc = name, port, proc
        self.samples: list[tuple[int, int]] = []  # (watch, exec) connections, one per second of the idle window
        self._cpu = 0.0

    def cpu_s(self) -> float:
        """CPU seconds so far (the last value read once the process is gone)."""
        if self.alive():
            self._cpu = proc_cpu_s(self.proc.pid) or self._cpu
        return self._cpu

    @property
    def pid(self) -> int:
        """The process id (its identity is `<host>_<pid>_<hex>`)."""
        return self.proc.pid

    def alive(self) -> bool:
        """The process still runs."""
        return self.proc.poll() is None


class PeerMap:
    """Which replica a client port connected to the provider emulator belongs to: every `every_s` seconds the
    replicas' socket inodes (/proc/<pid>/fd) are matched with /proc/net/tcp's connections to the provider."""

    def __init__(self, provider_port: int, replicas: list[Replica]) -> None:
        self.provider_port, self.replicas = provider_port, replicas
        self.owner: dict[int, str] = {}

    def sample(self) -> None:
        """One look at /proc."""
        inodes: dict[str, str] = {}
        for x in self.replicas:
            try:
                fds = os.listdir(f"/proc/{x.pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{x.pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = x.name
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as fh:
                    rows = fh.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                parts = row.split()
                if len(parts) > 9 and int(parts[2].rsplit(":", 1)[1], 16) == self.provider_port and parts[9] in inodes:
                    self.owner[int(parts[1].rsplit(":", 1)[1], 16)] = inodes[parts[9]]

    async def run(self, every_s: float = 2.0) -> None:
        """Sample until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(every_s)


def holders(world: World, shards: int) -> list[int | None]:
    """The pid in each shard Lease's holder identity (None: free)."""
    out: list[int | None] = []
    for i in range(shards):
        spec = (world.kube.get(LEASES, world.namespace, f"{PREFIX}-shard-{i}") or {}).get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        parts = holder.split("_")
        out.append(int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None)
    return out


async def start_replica(world: World, workdir: pathlib.Path, name: str) -> Replica:
    """`python -m controller run --leader-elect ctl` on a listener of its own; output in workdir/<name>.log."""
    url = await world.kube.add_port()
    kubeconfig = world.kube.write_kubeconfig(workdir / f"{name}.kubeconfig", namespace=world.namespace, server=url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
    env.update({"KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT)})
    for key, value in world.settings.model_dump(mode="json").items():
        if value is not None:
            env["AGENTBOX_" + key.upper()] = json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
    out = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 -- the child holds it
    try:
        proc = subprocess.Popen([sys.executable, "-m", "controller", "run", "--namespace", world.namespace,
                                 "--liveness", "", "--leader-elect", PREFIX, "--lease-namespace", world.namespace],
                                env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=pdeathsig_kill, cwd=str(ROOT))
    finally:
        out.close()
    return Replica(name, int(url.rsplit(":", 1)[1]), proc)


class ReplicaExited(RuntimeError):
    """A replica ended by itself (not the one the bench killed)."""


def exit_reason(logfile: pathlib.Path) -> str:
    """The last WARNING/ERROR line of a replica's log (why it exited), without its timestamp."""
    try:
        lines = [ln for ln in logfile.read_text(errors="replace").splitlines() if "WARNING" in ln or "ERROR" in ln]
    except OSError:
        return ""
    return lines[-1].split("] ", 2)[-1][:200] if lines else ""


def gc_pauses(logfile: pathlib.Path) -> list[str]:
    """The long garbage collections a replica logged (`controller.heap.PauseWatch`, `refreeze_every`): their
    messages, without timestamps (at most 20)."""
    try:
        lines = [ln for ln in logfile.read_text(errors="replace").splitlines() if "garbage collection took" in ln]
    except OSError:
        return []
    return [ln.split("] ", 2)[-1][:160] for ln in lines[:20]]


async def api_latency(world: World) -> float:
    """Seconds one GET of a Lease list takes at the emulated API server now (its queue, as a replica sees it)."""
    started = time.monotonic()
    assert world._session is not None
    async with world._session.get(f"/apis/coordination.k8s.io/v1/namespaces/{world.namespace}/leases") as resp:
        await resp.read()
    return time.monotonic() - started


def limit_text(reset: float) -> str:
    """The Claude Code limit line for a reset at epoch `reset` (its clock computed now, in UTC)."""
    clock = claude_clock(datetime.fromtimestamp(reset, timezone.utc), "UTC")
    return f"  \u23bf  You've hit your 5-hour limit \u00b7 resets {clock} (UTC)"


async def wait_for(probe: Any, timeout: float, every: float = 0.5, what: str = "", progress: Any = None) -> bool:
    """Poll `probe()` until true (True) or `timeout` seconds pass (False); `progress()` logged every 10 s."""
    deadline, shown = time.monotonic() + timeout, time.monotonic()
    while not probe():
        if time.monotonic() > deadline:
            log(f"timed out waiting for {what}")
            return False
        if progress is not None and time.monotonic() - shown >= 10:
            shown = time.monotonic()
            log(f"waiting for {what}: {progress()}")
        await asyncio.sleep(every)
    return True


def due_outcome(fake: FakeTabs, boxes: list[str], since: float, reset: float, due: float) -> dict[str, Any]:
    """Per box of a burst: its `continue`s submitted after `since`; lag of the first one to `due`."""
    lags: dict[str, float] = {}
    lost, double, early, wrong = [], [], [], []
    for box in boxes:
        subs = [(t, text) for t, text in fake.tabs[box].submits if t >= since]
        if not subs:
            lost.append(box)
            continue
        conts = [t for t, text in subs if text == "continue"]
        wrong += [box] if any(text != "continue" for _, text in subs) else []
        double += [box] if len(conts) > 1 else []
        early += [box] if subs[0][0] < reset else []
        lags[box] = subs[0][0] - due
    return {"lags": lags, "lost": lost, "double": double, "early": early, "wrong": wrong}


STALLS = LoopStalls()  # the bench process's loop: the emulated API server's (figures in the JSON, error or not)


LEASE_ANSWERS: dict[str, Any] = {}  # filled at the end of a run, error or not (`lease_answer_figures`)
GC_PAUSES: dict[str, list[str]] = {}  # likewise: each replica's long garbage collections (`gc_pauses`)


def emulator_figures(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON's `emulator`: the bench process's loop stalls and GC pauses (`LoopStalls`), its freeze period,
    and how long it took to answer each replica's Lease requests (`lease_answer_s`)."""
    return {**STALLS.figures(), "freeze_period_s": args.emulator_freeze, "lease_answer_s": LEASE_ANSWERS,
            "replica_gc_pauses": GC_PAUSES}


def lease_answer_figures(journal: list[Any], names: dict[int, str]) -> dict[str, Any]:
    """Per replica (by its listener port, `names`): seconds from a Lease request's arrival at the emulated API
    server to its answer (p50, p99, max; `over_1s`: how many took longer than 1 s). Requests cut or never
    answered are not counted."""
    by: dict[str, list[float]] = {}
    for e in journal:
        if "/leases" in e.path and e.answered and e.port in names:
            by.setdefault(names[e.port], []).append(e.answered - e.at)
    return {name: {"n": len(v), "p50": round(pct(v, 50) or 0.0, 3), "p99": round(pct(v, 99) or 0.0, 3), "max": round(max(v), 3),
                   "over_1s": sum(1 for x in v if x > 1.0)} for name, v in by.items() if v}


async def freeze_every(period_s: float) -> None:
    """Move every object the bench process holds (the emulator's store, journals, event logs) out of the
    garbage collector's reach every `period_s` seconds, without a full collection first: at 10,000 boxes a
    full collection of the emulator's heap stalled its one thread for seconds, every replica's requests
    with it. Cycles frozen are leaked (a bench process)."""
    while True:
        await asyncio.sleep(period_s)
        gc.freeze()


async def bench(args: argparse.Namespace, workdir: pathlib.Path) -> dict[str, Any]:
    t_start = time.time()
    STALLS.start()
    freezer = asyncio.get_running_loop().create_task(freeze_every(args.emulator_freeze)) \
        if args.emulator_freeze > 0 else None
    settings = bench_settings(usage_interval_s=300.0, resume_margin_s=args.margin, shards=args.shards)
    world = World(workdir / "world", settings)
    await world.start()
    fake = FakeTabs()
    world.kube.exec_handler = fake
    conns = Connections(world)
    ns = world.namespace
    loop = asyncio.get_running_loop()
    running: set[str] = set()

    async def run_pod(pod: str) -> None:
        files = {}
        text = world.box_secret(pod).get("credentials.json")
        if text is not None:
            files[".claude/.credentials.json"] = text
        fake.add(pod, files)
        try:
            await world.kube.set_pod_phase(ns, pod, "Running")
        except Exception as exc:  # noqa: BLE001 -- deleted meanwhile
            log(f"pod {pod}: {exc!r}")

    def on_change(res: Any, etype: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "Pod" and etype == "ADDED":
            name = obj["metadata"]["name"]
            if name not in running:
                running.add(name)
                loop.call_soon(lambda: loop.create_task(run_pod(name)))
    world.kube.add_change_listener(on_change)
    switched_at: dict[str, tuple[float, str]] = {}
    watched_rotation: dict[str, str] = {}

    def on_box(res: Any, etype: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") != C.AGENTBOX_KIND:
            return
        name = obj["metadata"]["name"]
        origin = watched_rotation.get(name)
        now_on = (obj.get("status") or {}).get("subscription")
        if origin is not None and name not in switched_at and now_on and now_on != origin:
            switched_at[name] = (time.time(), now_on)
    world.kube.add_change_listener(on_box)

    replicas: list[Replica] = []
    expected_dead: set[str] = set()

    def check_alive() -> None:
        dead = [x for x in replicas if not x.alive() and x.name not in expected_dead]
        if dead:
            why = [exit_reason(workdir / f"{x.name}.log") for x in dead]
            raise ReplicaExited(f"{', '.join(x.name for x in dead)} exited: {why}")
    try:
        # ---------------------------------------------------------------- setup
        for r in range(args.replicas):
            replicas.append(await start_replica(world, workdir, f"replica-{r}"))

        def split() -> bool:
            held = holders(world, args.shards)
            counts = Counter(held)
            return None not in held and all(counts[x.pid] in (args.shards // args.replicas,
                                                              -(-args.shards // args.replicas)) for x in replicas)
        latency = [0.0]

        async def probe() -> None:
            while True:
                latency.append(await api_latency(world))
                await asyncio.sleep(1.0)
        prober = loop.create_task(probe())
        peers = PeerMap(int(world.provider.url.rsplit(":", 1)[1]), replicas)
        sampler = loop.create_task(peers.run())
        if not await wait_for(split, 90, what="the shard split"):
            raise RuntimeError(f"shards not split: {holders(world, args.shards)}")
        t_split = time.time()
        log(f"{args.replicas} replicas split {args.shards} shards: {Counter(holders(world, args.shards))}")
        boxes = [f"box-{i:05d}" for i in range(args.boxes)]
        sub_of = {box: i % args.subscriptions for i, box in enumerate(boxes)}
        far = datetime.fromtimestamp(time.time() + 3 * 3600, timezone.utc)
        week = datetime.fromtimestamp(time.time() + 5 * 86400, timezone.utc)
        rot_subs = set(range(args.rotation_subs))
        sem = asyncio.Semaphore(32)

        async def add_sub(s: int) -> None:
            async with sem:
                world.provider.add_login(f"tok-{s}", f"acct-{s}")
                world.provider.set_windows(f"acct-{s}", five_hour=(50.0, far), weekly=(20.0, week))
                await world.add_secret(f"login-{s}", "credentials.json", claude_login(f"tok-{s}"))
                await world.add_subscription(f"sub-{s}", "anthropic", f"login-{s}", "credentials.json")

        async def add_box(box: str) -> None:
            async with sem:
                spec: dict[str, Any] = {}
                if sub_of[box] in rot_subs:
                    # onto the last Subscription, which no burst limits (its usage stays at 50 %)
                    spec["whenAgentStops"] = {"resumeAfterReset": True, "rotation": {
                        "enabled": True, "group": "Selected",
                        "subscriptions": [f"sub-{sub_of[box]}", f"sub-{args.subscriptions - 1}"]}}
                await world.add_box(box, "claude-code", f"sub-{sub_of[box]}", **spec)
        await asyncio.gather(*(add_sub(s) for s in range(args.subscriptions)))
        t_create = time.monotonic()
        for k in range(0, len(boxes), 10):  # paced: `--create-rate` boxes a second
            await asyncio.gather(*(add_box(b) for b in boxes[k:k + 10]))
            await asyncio.sleep(max(0.0, t_create + (k + 10) / args.create_rate - time.monotonic()))
            check_alive()
            if k % 500 == 0:
                log(f"{k} boxes created; API latency {await api_latency(world):.2f}s, load {os.getloadavg()[0]:.1f}")
        log(f"{args.subscriptions} subscriptions, {args.boxes} boxes created in {time.time() - t_start:.0f}s")

        def streamed() -> int:
            return sum(1 for b in boxes if b in fake.tabs and fake.tabs[b].streams)
        def all_streamed() -> bool:
            check_alive()
            return streamed() >= args.boxes
        await wait_for(all_streamed, args.setup_timeout, every=1.0, what="every box streamed",
                       progress=lambda: f"{streamed()}/{args.boxes} streamed, {len(fake.tabs)} pods running, "
                                        f"API latency {latency[-1]:.2f}s, "
                                        f"load {os.getloadavg()[0]:.1f}")
        await asyncio.sleep(5)  # first passes settle
        setup_s = time.time() - t_start
        served = streamed()
        log(f"{served}/{args.boxes} boxes streamed after {setup_s:.0f}s")

        # ---------------------------------------------------------------- idle
        j0 = len(world.kube.journal)
        c0 = {x.name: x.cpu_s() for x in replicas}
        e0 = sum(fake.oneshot.values())
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.idle:
            check_alive()
            for x in replicas:
                x.samples.append((conns.watch[x.port], conns.exec[x.port]))
            await asyncio.sleep(1.0)
        idle_s = time.monotonic() - t0
        c1 = {x.name: x.cpu_s() for x in replicas}
        idle_journal = world.kube.journal[j0:]
        idle_oneshots = sum(fake.oneshot.values()) - e0
        idle = {x.name: {
            "cpu_idle_cores": round((c1[x.name] - c0[x.name]) / idle_s, 4),
            "rss_mib": round(proc_rss_mib(x.pid), 1),
            "api_requests_per_min": round(sum(1 for e in idle_journal if e.port == x.port) * 60 / idle_s, 1),
            # of which the shard Leases' and the heartbeat's (a look every retry period: every Lease read)
            "lease_requests_per_min": round(sum(1 for e in idle_journal if e.port == x.port and "/leases" in e.path)
                                            * 60 / idle_s, 1),
            "watch_connections": max((w for w, _ in x.samples), default=0),
            "exec_connections_mean": round(sum(e for _, e in x.samples) / max(1, len(x.samples)), 1),
            "exec_connections_max": max((e for _, e in x.samples), default=0),
        } for x in replicas}
        load_idle = os.getloadavg()[0]
        log(f"idle {idle_s:.0f}s: {json.dumps(idle)}")

        # ---------------------------------------------------------------- burst
        def minute_after(lead: float) -> float:
            return math.ceil((time.time() + lead) / 60) * 60.0

        async def burst(subs: list[int], kill: Replica | None = None, state: dict[str, Any] | None = None
                        ) -> dict[str, Any]:
            members = [b for b in boxes if sub_of[b] in subs]
            state = {} if state is None else state
            state.update(members=members)
            reset = minute_after(args.lead)
            due = reset + settings.resume_margin_s
            for s in subs:
                world.provider.set_windows(f"acct-{s}", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                                           weekly=(20.0, week))
            since = time.time()
            state.update(since=since, reset=reset, due=due)
            line = limit_text(reset)
            for b in members:
                fake.limit(b, line)
            owner_pid = holders(world, args.shards)
            owner = {b: owner_pid[shard_of(ns, b, args.shards)] for b in members}
            log(f"burst: {len(members)} tabs limited, resume instant in {due - time.time():.0f}s")
            cpu_before = {x.name: x.cpu_s() for x in replicas}
            failover: dict[str, Any] = {}
            if kill is not None:
                victim_shards = [i for i, p in enumerate(owner_pid) if p == kill.pid]
                victim_boxes = [b for b in members if owner[b] == kill.pid]
                all_victim_boxes = [b for b in boxes if owner_pid[shard_of(ns, b, args.shards)] == kill.pid]
                await asyncio.sleep(max(0.0, due - 3 - time.time()))
                kill.cpu_s()  # its last CPU figure
                expected_dead.add(kill.name)
                kill.proc.kill()
                killed = time.time()
                log(f"SIGKILLed {kill.name} (shards {victim_shards}, {len(all_victim_boxes)} boxes)")

                failover = {"killed": kill.name, "shards": victim_shards, "boxes": len(all_victim_boxes)}
                state["failover"] = failover

                def taken() -> bool:
                    check_alive()
                    held = holders(world, args.shards)
                    return all(held[i] not in (None, kill.pid) for i in victim_shards)
                await wait_for(taken, 60, every=0.1, what="the victim's shards taken")
                t_taken = time.time() - killed
                failover["leases_taken_s"] = round(t_taken, 2)

                def reattached() -> int:
                    check_alive()
                    return sum(1 for b in all_victim_boxes if any(t > killed for t in fake.tabs[b].opened))
                await wait_for(lambda: reattached() >= len(all_victim_boxes), 120, every=0.2,
                               what="the victim's boxes streamed again",
                               progress=lambda: f"{reattached()}/{len(all_victim_boxes)}")
                t_served = time.time() - killed
                firsts = sorted(min(t for t in fake.tabs[b].opened if t > killed) - killed
                                for b in all_victim_boxes if any(t > killed for t in fake.tabs[b].opened))
                failover.update({"boxes_served_again_s": round(t_served, 2),
                            "box_streamed_again_p50_s": pct(firsts, 50), "box_streamed_again_p99_s": pct(firsts, 99),
                            "due_boxes_of_victim": len(victim_boxes)})
            pending = set(members)
            end = due + args.timeout
            while pending and time.time() < end:
                check_alive()
                pending = {b for b in pending if not any(t >= since for t, _ in fake.tabs[b].submits)}
                await asyncio.sleep(0.2)
            cpu_used = {x.name: round(x.cpu_s() - cpu_before[x.name], 2) for x in replicas}
            await asyncio.sleep(args.settle)  # a second continue would show here
            out = due_outcome(fake, members, since, reset, due)
            lags = out["lags"]
            by_replica: dict[str, list[float]] = defaultdict(list)
            for b, lag in lags.items():
                name = next((x.name for x in replicas if x.pid == owner[b]), "?")
                by_replica[name].append(lag)
            result = {"tabs": len(members), "resumed": len(lags), "lag_p50_s": pct(list(lags.values()), 50),
                      "lag_p99_s": pct(list(lags.values()), 99),
                      "lag_max_s": round(max(lags.values()), 3) if lags else None,
                      "by_replica": {k: {"tabs": len(v), "p50_s": pct(v, 50), "p99_s": pct(v, 99)}
                                     for k, v in sorted(by_replica.items())},
                      "cpu_s": cpu_used, "load_avg_1m": round(os.getloadavg()[0], 2),
                      "lost": len(out["lost"]), "double": len(out["double"]), "early": len(out["early"]),
                      "wrong_text": len(out["wrong"])}
            if kill is not None:
                victim = [lags[b] for b in members if owner[b] == kill.pid and b in lags]
                failover.update({"victim_lag_p50_s": pct(victim, 50), "victim_lag_max_s": round(max(victim), 3)
                                 if victim else None})
                result["failover"] = failover
            log(f"burst: {json.dumps(result)}")
            return result

        # ---------------------------------------------------------------- rotation
        rot_boxes = [b for b in boxes if sub_of[b] in rot_subs]
        rotation: dict[str, Any] = {"boxes": len(rot_boxes)}
        if rot_boxes:
            later = time.time() + 7200
            for b in rot_boxes:
                watched_rotation[b] = f"sub-{sub_of[b]}"
            for s in rot_subs:
                world.provider.set_windows(f"acct-{s}", five_hour=(100.0, datetime.fromtimestamp(later, timezone.utc)),
                                           weekly=(20.0, week))
            t_rot = time.time()
            line = limit_text(later)
            for b in rot_boxes:
                fake.limit(b, line)
            await wait_for(lambda: len(switched_at) >= len(rot_boxes) and all(
                any(t >= t_rot and text == "continue" for t, text in fake.tabs[b].submits) for b in rot_boxes),
                args.timeout, every=0.2, what="every rotation box switched and continued")
            await asyncio.sleep(args.settle)
            stuck = [b for b in rot_boxes if not any(t >= t_rot and text == "continue" for t, text in fake.tabs[b].submits)]
            if stuck:  # what the controller said about the first one
                status = (world.box(stuck[0]) or {}).get("status") or {}
                log(f"rotation: {stuck[0]} got no continue; status {json.dumps(status)[:1500]}; keys "
                    f"{fake.tabs[stuck[0]].keys[-5:]}")
            reactions = [switched_at[b][0] - t_rot for b in rot_boxes if b in switched_at]
            continued = [min(t for t, text in fake.tabs[b].submits if t >= t_rot and text == "continue") - t_rot
                         for b in rot_boxes if any(t >= t_rot and text == "continue" for t, text in fake.tabs[b].submits)]
            conts = Counter(b for b in rot_boxes for t, text in fake.tabs[b].submits if t >= t_rot and text == "continue")
            rotation.update({"switched": len(reactions), "switch_p50_s": pct(reactions, 50),
                             "switch_max_s": round(max(reactions), 3) if reactions else None,
                             "continue_p50_s": pct(continued, 50),
                             "continue_max_s": round(max(continued), 3) if continued else None,
                             "lost": len(rot_boxes) - len(continued), "double": sum(1 for n in conts.values() if n > 1)})
            log(f"rotation: {json.dumps(rotation)}")

        others = [s for s in range(args.subscriptions) if s not in rot_subs]
        b1 = await burst(others[:args.burst_subs])

        # ---------------------------------------------------------------- failover
        t_kill_window = time.time()
        b2: dict[str, Any] | None = None
        if args.replicas > 1 and not args.no_failover:
            counts = Counter(holders(world, args.shards))
            victim = max(replicas, key=lambda x: (counts[x.pid], x.name))
            state: dict[str, Any] = {}
            try:
                b2 = await burst(others[args.burst_subs:2 * args.burst_subs], kill=victim, state=state)
            except ReplicaExited as exc:  # a survivor exited: what was measured, and the tabs it left
                log(str(exc))
                out = due_outcome(fake, state.get("members", []), state.get("since", 0.0), state.get("reset", 0.0),
                                  state.get("due", 0.0))
                b2 = {"error": str(exc), "tabs": len(state.get("members", [])), "resumed": len(out["lags"]),
                      "lost": len(out["lost"]), "double": len(out["double"]), "early": len(out["early"]),
                      "wrong_text": len(out["wrong"]), "failover": state.get("failover", {}),
                      "load_avg_1m": round(os.getloadavg()[0], 2)}

        # ---------------------------------------------------------------- figures
        readers: dict[str, set[int]] = defaultdict(set)
        ports = {x.port for x in replicas}
        for e in world.kube.journal:
            if t_split <= e.at < t_kill_window and e.method == "PATCH" and e.port in ports and \
                    f"/{C.SUBSCRIPTION_PLURAL}/" in e.path and e.path.endswith("/status"):
                readers[e.path.rsplit("/", 2)[-2]].add(e.port)
        sampler.cancel()
        prober.cancel()
        peers.sample()
        callers: dict[str, set[str]] = defaultdict(set)
        usage_reads: Counter[str] = Counter()
        for req in world.provider.requests:
            if t_split <= req.at < t_kill_window and req.path == "/api/oauth/usage" and req.account:
                callers[req.account].add(peers.owner.get(req.peer_port, "?"))
                usage_reads[peers.owner.get(req.peer_port, "?")] += 1
        held = Counter(holders(world, args.shards))
        per_replica = []
        final = holders(world, args.shards)
        for x in replicas:
            mine = [b for b in boxes if final[shard_of(ns, b, args.shards)] == x.pid] if x.alive() else []
            per_replica.append({"name": x.name, "pid": x.pid, "alive": x.alive(),
                                "shards_at_end": held[x.pid], "boxes_at_end": len(mine),
                                **idle[x.name], "cpu_total_s": round(x.cpu_s(), 1),
                                "burst_cpu_s": b1["cpu_s"].get(x.name)})
        bursts = [b for b in (b1, b2) if b is not None]
        exits = {x.name: exit_reason(workdir / f"{x.name}.log") for x in replicas
                 if not x.alive() and x.name not in expected_dead}
        return {
            "boxes": args.boxes, "subscriptions": args.subscriptions, "replicas": args.replicas,
            "shards": args.shards, "emulated": EMULATED, "setup_s": round(setup_s, 1), "idle_s": round(idle_s, 1),
            "served": served, "lost": sum(b["lost"] for b in bursts) + rotation.get("lost", 0),
            "double": sum(b["double"] for b in bursts) + rotation.get("double", 0),
            "early": sum(b["early"] for b in bursts), "wrong_text": sum(b["wrong_text"] for b in bursts),
            "usage_readers_max": max((len(v) for v in readers.values()), default=0),
            "subscriptions_with_a_reader_write": len(readers),
            # every replica that called the provider's usage API for one Subscription (the reader daemon, and the
            # box passes that re-read the usage of their box's Subscription in the box's own replica)
            "usage_api_callers_max": max((len(v) for v in callers.values()), default=0),
            "usage_api_callers_hist": dict(Counter(len(v) for v in callers.values())),
            "usage_api_reads_by_replica": dict(usage_reads),
            "replicas_exited": exits,
            "idle_oneshot_exec_per_box_hour": round(idle_oneshots * 3600 / idle_s / args.boxes, 3),
            "oneshot_exec_by_kind": dict(fake.oneshot.most_common(10)),
            "per_replica": per_replica,
            "burst": b1, "rotation": rotation, "failover_burst": b2,
            "failover_s": b2["failover"].get("boxes_served_again_s") if b2 else None,
            "resume_margin_s": settings.resume_margin_s, "resume_prepare_s": settings.resume_prepare_s,
            "load_avg_idle_1m": round(load_idle, 2), "load_avg_1m": round(os.getloadavg()[0], 2),
            "emulator_cpu_s": round(time.process_time(), 1), "emulator_rss_mib": round(proc_rss_mib(os.getpid()), 1),
            "server_errors": len(world.kube.server_errors),
            "api_latency_max_s": round(max(latency), 2),  # a Lease list GET by the bench, every second
            "emulator": emulator_figures(args),
            "wall_s": round(time.time() - t_start, 1),
        }
    finally:
        if freezer is not None:
            freezer.cancel()
        STALLS.stop()
        LEASE_ANSWERS.update(lease_answer_figures(world.kube.journal, {x.port: x.name for x in replicas}))
        GC_PAUSES.update({x.name: gc_pauses(workdir / f"{x.name}.log") for x in replicas})
        with open(workdir / "leases.journal", "w") as fh:  # every Lease request: when, which replica, status
            for e in world.kube.journal:
                if "/leases" in e.path:
                    took = f"{e.answered - e.at:.3f}" if e.answered else "-"
                    fh.write(f"{e.at:.3f} {e.port} {e.method} {e.path.rsplit('/', 1)[-1]} {e.status} {took}\n")
        for x in replicas:
            if x.alive():
                x.proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            if not any(x.alive() for x in replicas):
                break
            await asyncio.sleep(0.1)
        for x in replicas:
            if x.alive():
                x.proc.kill()
            x.proc.wait()
        await world.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the bench (see the module docstring); 0 when nothing was lost, doubled, early or wrong."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--boxes", type=int, default=1000)
    p.add_argument("--subscriptions", type=int, default=100)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--shards", type=int, default=12, help="settings.shards (default 12: 4 per replica of 3)")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of the idle window (default 60)")
    p.add_argument("--burst-subs", type=int, default=None,
                   help="Subscriptions whose boxes reset at the same instant, per burst (default: a tenth)")
    p.add_argument("--rotation-subs", type=int, default=2, help="Subscriptions whose boxes rotate (default 2)")
    p.add_argument("--lead", type=float, default=30.0, help="the burst's reset is the minute boundary at least "
                   "this many seconds after its limit lines (default 30; the continue is prepared 8 s before)")
    p.add_argument("--margin", type=float, default=bench_settings("default").resume_margin_s,
                   help="settings.resume_margin_s (default: the product default, %(default)s)")
    p.add_argument("--timeout", type=float, default=90.0, help="give up on a tab this long after its instant")
    p.add_argument("--settle", type=float, default=4.0, help="seconds after the last resume for a second one to show")
    p.add_argument("--setup-timeout", type=float, default=900.0, help="longest wait for every box streamed")
    p.add_argument("--create-rate", type=float, default=20.0,
                   help="AgentBoxes created a second at setup (default 20; see bench/README.md: a creation storm "
                        "starves the replicas' shard Lease renewals)")
    p.add_argument("--no-failover", action="store_true", help="no second burst with a replica killed")
    p.add_argument("--workdir", default=None, help="where logs go (default: a temporary directory, removed)")
    p.add_argument("--emulator-freeze", type=float, default=10.0,
                   help="seconds between gc.freeze() calls of the bench process, the emulated API server's "
                        "(default 10; 0: CPython's collector as is, whose full collections stall it at 10,000 boxes)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if not 1 <= args.subscriptions <= args.boxes or args.replicas < 1 or args.shards < 2:
        p.error("need boxes >= subscriptions >= 1, replicas >= 1, shards >= 2")
    if args.burst_subs is None:
        args.burst_subs = max(1, args.subscriptions // 10)
    if args.rotation_subs + 2 * args.burst_subs >= args.subscriptions:
        p.error("rotation-subs + 2 x burst-subs must be less than subscriptions (the last one is the rotation's)")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    keep = args.workdir is not None
    workdir = pathlib.Path(args.workdir).resolve() if keep else pathlib.Path(tempfile.mkdtemp(prefix="abx-shards-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(bench(args, workdir))
    except ReplicaExited as exc:
        log(str(exc))
        result = {"error": str(exc), "boxes": args.boxes, "replicas": args.replicas, "shards": args.shards,
                  "load_avg_1m": round(os.getloadavg()[0], 2),
                  "emulator": emulator_figures(args)}
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), flush=True)
    bad = "error" in result or result["lost"] or result["double"] or result["early"] or result["wrong_text"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
