"""Scale: N boxes on S subscriptions on one controller, idle, then bursts of limits.

Every box runs one light Claude-Code-like tab (a bash script, not a real agent: the point is the
controller): it shows a prompt, waits on a FIFO, and when the bench writes a reset clock into it prints the
real Claude Code limit line (`You've hit your 5-hour limit · resets 5:13pm (UTC)`), then reads one line
(what the controller types) and logs when it arrived.

Phases:
1. setup: S subscriptions (provider emulator logins at 50 %), N AgentBoxes, pods with their tmux tab;
   the operator starts; the bench waits until every box reports its tab.
2. idle (`--idle` seconds): nothing changes on any screen. Measured over exactly this window: exec calls
   (one-shot) and exec streams opened per box per hour, API requests per minute (every request the
   controller made, exec included), controller CPU in cores, RSS. On the live stream an idle box is passed
   only every `stream_rescan_s` (300 s), so the default window is that plus 30 s (every box's rescan pass
   falls in it: `idle_covers_rescan`); a shorter window can fall between two rescans and report 0 whatever
   a rescan costs. `idle_exec_by_argv` names the agents' structured file reads `structured:<source>`.
3. bursts: the subscriptions are split into `--bursts` groups; group g's boxes print their limit line at
   the same moment, with a reset on the minute boundary g+1 minutes later (Claude prints minute-rounded
   resets; the provider's window resets at that instant). Resume lag = (continue received - reset) -
   `resume_margin_s` (`--margin`, default the product default, 10 s), per box; also reported per burst
   (`resume_lag_by_burst`: tabs of that reset instant, lag p50, p99, max; `window_s` from 0.5 s before its
   deadline until its last tab resumed, and the CPU seconds spent in that window by the operator
   (`cpu_s`) and by this process (`emulator_cpu_s`: the emulated API server, kubelet and provider, one
   Python thread, unlike a real API server): a burst whose operator CPU is far below its window waits on
   something else than the controller's CPU); per tab: `cpu_ms_per_tab`, `requests_per_tab`,
   `status_writes_per_tab` and `passes_per_tab` (the controller's `agentbox_watcher_passes_total`, read
   from the operator's metrics port). On the stream, `enter_sent_lag_p50_s`/`_p99_s`/`_max_s` (per burst
   `enter_sent_p99_s`): the Enter line's arrival at the emulated API server - (reset + margin), the
   controller's part of the lag (`EnterTap`); the rest is the emulated kubelet, tmux and the tab's process.

The operator runs as its own OS process (`python -m controller run`, as in a cluster, PR_SET_PDEATHSIG),
so it does not share a GIL with the API server and provider emulators (this process): `cpu_idle_cores` is
that process's CPU time over the idle window, `rss_mib` its RSS. `--in-process` runs kopf in a thread of
this process instead (as the component tests do; the former default): CPU is then every thread but the
main one, and `rss_mib` this process's RSS minus its RSS before the operator started (an upper bound).

Final line: JSON with `boxes`, `subscriptions`, `tmux_stream`, `idle_s`, `idle_exec_per_box_hour`,
`idle_stream_opens_per_box_hour`, `idle_exec_per_box_min`, `api_requests_per_min`, `rss_mib`,
`cpu_idle_cores`, `resume_lag_p99_s` and more.

Usage: .venv/bin/python bench/scale.py [--boxes 1000] [--subscriptions 100] [--idle 330] [--bursts 2]
       [--margin 10] [--stream | --polling]
"""

from __future__ import annotations

import argparse
import asyncio
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
from collections import Counter
from datetime import datetime, timezone

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentbox_sim.bench_settings import bench_settings  # noqa: E402
from agentbox_sim.procstat import pdeathsig_kill, proc_cpu_s, proc_rss_mib  # noqa: E402
from agentbox_sim.fake_agent import claude_clock  # noqa: E402
from agentbox_sim.world import TabSpec, World, claude_login  # noqa: E402

SETTINGS = bench_settings(usage_interval_s=300.0)

AGENT = r"""#!/bin/bash
# A light Claude-Code-like tab: $1 the FIFO that brings the reset clock, $2 the log of what was typed.
printf '> '
IFS= read -r clock < "$1"
printf '\n  \xe2\x8e\xbf  You'\''ve hit your 5-hour limit \xc2\xb7 resets %s (UTC)\n> ' "$clock"
IFS= read -r line
# bash's own clock (no fork of date(1): 200 tabs entered at one instant would otherwise time 200 process starts)
printf '%s %s\n' "${EPOCHREALTIME:-$(date +%s.%N)}" "$line" >> "$2"
printf 'working\n'
exec sleep 1000000
"""


class EnterTap:
    """Records when each pod's first Enter-only tmux line (the continue's Enter) reaches the emulated API server
    on the pod's control stream: ``at[pod]`` epoch seconds. It never applies (returns False), so it changes
    nothing but its own bookkeeping; the emulator asks it as it asks its stream faults (``applies(pod, argv)``).
    The Enter's arrival minus the deadline is the controller's part of the lag; the rest is the emulated kubelet,
    tmux and the tab's process on the same cores."""

    when = "before"

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.typed: dict[str, float] = {}  # the continue's text line (`send-keys -l`), first per pod

    def applies(self, pod: str, argv: list[str]) -> bool:
        if "send-keys" in argv and "Enter" in argv and "-l" not in argv:
            self.at.setdefault(pod, time.time())
        elif "send-keys" in argv and "-l" in argv:
            self.typed.setdefault(pod, time.time())
        return False


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without values."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def _r(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def operator_cpu_s() -> float:
    """CPU seconds (user + system) of every thread of this process but the main one (the operator's
    kopf thread and its worker threads; the emulators run on the main thread)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    main = os.getpid()
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == main:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn_operator(world: World, logfile: pathlib.Path, metrics_port: int = 0) -> subprocess.Popen:
    """`python -m controller run` against the world's API server, with the world's settings as
    AGENTBOX_* variables (as bench/faults.py); its metrics on `metrics_port` (0: none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
    env.update({"KUBECONFIG": str(world.kubeconfig), "PYTHONPATH": str(ROOT)})
    for key, value in world.settings.model_copy(update={"metrics_port": metrics_port}).model_dump(mode="json").items():
        if value is not None:
            env["AGENTBOX_" + key.upper()] = json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
    return subprocess.Popen([sys.executable, "-m", "controller", "run", "--namespace", world.namespace,
                             "--liveness", ""], env=env, stdout=open(logfile, "ab"), stderr=subprocess.STDOUT,
                            preexec_fn=pdeathsig_kill, cwd=str(ROOT))


def exec_label(argv: list[str] | tuple[str, ...]) -> str:
    """What a one-shot exec was, for `idle_exec_by_argv`: `structured:<source>` for an agent's structured usage
    file read (the adapters' `structured_sources`; their argv is `sh -c <script>`, which says nothing), else its
    first two words (`tmux capture-pane`, `sh -c`)."""
    from controller.agents.registry import ADAPTERS

    for adapter in ADAPTERS.values():
        for source in adapter.structured_sources:
            if tuple(argv) == tuple(source.argv):
                return f"structured:{source.name}"
    return " ".join(argv[:2])


def controller_requests(world: World, start: int, end: int) -> int:
    """Requests the controller made (the bench's own client is aiohttp's default `Python/...` agent)."""
    return sum(1 for e in world.kube.journal[start:end] if not e.user_agent.startswith("Python/"))


def scraped_passes(port: int | None) -> float:
    """Tab watcher passes so far, all boxes (`agentbox_watcher_passes_total`): from the operator's metrics
    endpoint on `port`, or (None: `--in-process`) from this process's registry."""
    if port is None:
        from controller import metrics

        return sum(s.value for fam in metrics.REGISTRY.collect() if fam.name == "agentbox_watcher_passes"
                   for s in fam.samples if s.name.endswith("_total"))
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("agentbox_watcher_passes_total{"))


def burst_requests(world: World, span: tuple[int, int] | None, tabs: int, passes: float | None) -> dict:
    """API requests the controller made in a burst's window, per tab, status writes per tab, and watcher
    passes per tab (`passes`: the pass counter's increase over the window)."""
    if span is None or not tabs:
        return {}
    mine = [e for e in world.kube.journal[span[0]:span[1]] if not e.user_agent.startswith("Python/")]
    writes = sum(1 for e in mine
                 if e.method == "PATCH" and "/agentboxes/" in e.path and e.path.endswith("/status"))
    return {"requests_per_tab": round(len(mine) / tabs, 2),
            "passes_per_tab": round(passes / tabs, 2) if passes is not None else None,
            "status_writes_per_tab": round(writes / tabs, 2)}


def enter_writes(world: World, tap: EnterTap, reset_of: dict[str, float], margin: float) -> dict[float, list[float]]:
    """Per reset instant: each box's last status PATCH that reached the API server after its text's line and
    before its Enter's (the Enter step's write-ahead), its arrival - (reset + margin), seconds."""
    last: dict[str, float] = {}
    for e in world.kube.journal:
        if e.method != "PATCH" or not e.path.endswith("/status") or "/agentboxes/" not in e.path:
            continue
        box = e.path.rsplit("/", 2)[-2]
        if box in tap.typed and box in tap.at and tap.typed[box] <= e.at <= tap.at[box]:
            last[box] = e.at
    out: dict[float, list[float]] = {}
    for box, at in last.items():
        out.setdefault(reset_of[box], []).append(at - reset_of[box] - margin)
    return out


def start_profiler(path: str | None, pid: int) -> subprocess.Popen | None:
    """py-spy sampling process `pid` (the operator; every thread, GIL holders only) from the first limit
    line to the last resume, or (`--profile-deadline`) from the first burst's deadline (reset + margin)
    until its last tab resumed; collapsed stacks go to `path` (flamegraph.pl or speedscope read them).
    None without `path`."""
    if not path:
        return None
    spy = shutil.which("py-spy") or str(pathlib.Path(sys.executable).with_name("py-spy"))
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "100", "--threads", "--gil",
                             "--nonblocking", "--format", "raw", "--output", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profiler(proc: subprocess.Popen | None) -> None:
    """Stop py-spy (SIGINT writes its output) and wait for it."""
    if proc is None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


async def bench(args: argparse.Namespace, workdir: pathlib.Path) -> dict:
    t_start = time.time()
    update: dict = {"tmux_stream": args.stream, "resume_margin_s": args.margin}
    if args.prepare is not None:
        update["resume_prepare_s"] = args.prepare
    if args.write_budget is not None:
        update["resume_write_budget_s"] = args.write_budget
    settings = SETTINGS.model_copy(update=update)
    world = World(workdir / "world", settings)
    await world.start()
    world.local_exec.nice = args.box_nice  # before any pod: every process of the boxes runs niced
    proc: subprocess.Popen | None = None
    try:
        boxes = [f"box-{i:04d}" for i in range(args.boxes)]
        sub_of = {box: i % args.subscriptions for i, box in enumerate(boxes)}
        far = datetime.fromtimestamp(time.time() + 3 * 3600, timezone.utc)
        week = datetime.fromtimestamp(time.time() + 5 * 86400, timezone.utc)
        for s in range(args.subscriptions):
            world.provider.add_login(f"tok-{s}", f"acct-{s}")
            world.provider.set_windows(f"acct-{s}", five_hour=(50.0, far), weekly=(20.0, week))
            await world.add_secret(f"login-{s}", "credentials.json", claude_login(f"tok-{s}"))
            await world.add_subscription(f"sub-{s}", "anthropic", f"login-{s}", "credentials.json")
        agent = workdir / "agent.sh"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        fifos = {}
        for box in boxes:
            await world.add_box(box, "claude-code", f"sub-{sub_of[box]}")
            fifos[box] = workdir / f"{box}.fifo"
            os.mkfifo(fifos[box])
        rss_before = rss_mib()
        metrics_port: int | None = None
        if args.in_process:
            world.start_operator()

            def cpu_s() -> float:
                return operator_cpu_s()

            def rss() -> float:
                return rss_mib() - rss_before
        else:
            metrics_port = free_port()
            proc = spawn_operator(world, workdir / "operator.log", metrics_port)

            def cpu_s() -> float:
                return proc_cpu_s(proc.pid)

            def rss() -> float:
                return proc_rss_mib(proc.pid)
        sem = asyncio.Semaphore(16)

        async def start_pod(box: str) -> None:
            async with sem:
                await world.run_pod(box, [TabSpec("main", [str(agent), str(fifos[box]), str(workdir / f"{box}.log")])],
                                    timeout=300)
        await asyncio.gather(*(start_pod(b) for b in boxes))
        log(f"{args.boxes} pods up in {time.time() - t_start:.1f}s")

        def watched() -> int:
            return sum(1 for b in boxes if ((world.box(b) or {}).get("status") or {}).get("tabs"))
        deadline = time.time() + max(120.0, args.boxes * 0.5)
        while watched() < args.boxes and time.time() < deadline:
            await asyncio.sleep(1)
        if args.stream:
            while time.time() < deadline and sum(
                    1 for b in boxes for c in ((world.box(b) or {}).get("status") or {}).get("conditions") or []
                    if c["type"] == "TerminalStream" and c["status"] == "True") < args.boxes:
                await asyncio.sleep(1)
        await asyncio.sleep(settings.scan_interval_s * 2)  # first passes and structured reads settle
        if args.idle is None:  # the default: one stream rescan period and a margin (see --idle)
            args.idle = settings.stream_rescan_s + 30.0
        if args.stream and args.idle < settings.stream_rescan_s:
            log(f"warning: the idle window ({args.idle:.0f}s) is shorter than the stream rescan "
                f"({settings.stream_rescan_s:.0f}s): boxes whose rescan pass falls outside it are not measured")
        log(f"{watched()}/{args.boxes} boxes watched; idle for {args.idle:.0f}s")

        # ---------------------------------------------------------------- idle
        j0, e0, s0 = len(world.kube.journal), len(world.kube.exec_journal), len(world.kube.exec_streams)
        streams_open0 = sum(1 for _ in world.kube.exec_streams)
        c0, t0 = cpu_s(), time.monotonic()
        await asyncio.sleep(args.idle)
        j1, e1, s1 = len(world.kube.journal), len(world.kube.exec_journal), len(world.kube.exec_streams)
        c1, t1 = cpu_s(), time.monotonic()
        idle_s = t1 - t0
        # one-shot execs end in exec_journal; streams also end there when they close (count them apart)
        stream_ends = sum(1 for r in world.kube.exec_journal[e0:e1] if "attach-session" in r.argv)
        execs = (e1 - e0) - stream_ends
        opens = s1 - s0
        rss_idle, rss_process = rss(), rss_mib()
        requests = controller_requests(world, j0, j1)
        exec_verbs = Counter(exec_label(r.argv) for r in world.kube.exec_journal[e0:e1]
                             if "attach-session" not in r.argv)
        request_kinds = Counter(
            f"{e.method} {'/'.join(x for x in e.path.split('/')[-2:] if x not in boxes)}"
            for e in world.kube.journal[j0:j1] if not e.user_agent.startswith("Python/"))
        per_hour = 3600 / idle_s / args.boxes
        log(f"idle: {execs} exec calls, {opens} stream opens, {requests} API requests, "
            f"CPU {(c1 - c0) / idle_s:.3f} cores, RSS +{rss_idle:.0f} MiB")

        # ---------------------------------------------------------------- bursts
        pid = proc.pid if proc is not None else os.getpid()
        profiler = None if args.profile_deadline else start_profiler(args.profile, pid)
        groups = max(1, min(args.bursts, args.subscriptions))
        now = time.time()
        resets = {}
        first = math.ceil((now + 30) / 60) * 60.0  # a minute boundary at least 30 s ahead
        for g in range(groups):
            resets[g] = first + 60.0 * g
        reset_of = {box: resets[sub_of[box] % groups] for box in boxes}
        for s in range(args.subscriptions):
            r = datetime.fromtimestamp(resets[s % groups], timezone.utc)
            world.provider.set_windows(f"acct-{s}", five_hour=(100.0, r), weekly=(20.0, week))
        tap = EnterTap()
        if args.stream:
            world.kube.stream_faults.append(tap)  # type: ignore[arg-type]  # duck-typed: applies() only
        for box in boxes:
            clock = claude_clock(datetime.fromtimestamp(reset_of[box], timezone.utc), "UTC")
            fd = os.open(fifos[box], os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, (clock + "\n").encode())
            os.close(fd)
        log(f"limits printed; resets at +{resets[0] - time.time():.0f}s .. +{resets[groups - 1] - time.time():.0f}s")

        def received(box: str) -> list[tuple[float, str]]:
            path = workdir / f"{box}.log"
            if not path.exists():
                return []
            out = []
            for line in path.read_text().splitlines():
                t, _, text = line.partition(" ")
                out.append((float(t), text))
            return out
        end = resets[groups - 1] + args.timeout
        # Per burst: the operator's CPU seconds from its deadline (reset + margin) until its last tab
        # resumed (what one burst costs at the deadline; divided by its tabs, the cost of one resume).
        members = {r: [b for b in boxes if reset_of[b] == r] for r in resets.values()}
        pending = {r: set(m) for r, m in members.items()}  # a box's log appears when its `continue` came

        def arrived(r: float) -> bool:
            pending[r] = {b for b in pending[r] if not (workdir / f"{b}.log").exists()}
            return not pending[r]
        waiting = set(resets.values())
        cpu_at: dict[float, float] = {}
        cpu_used: dict[float, float] = {}
        emu_at: dict[float, float] = {}
        emu_used: dict[float, float] = {}  # this process: the emulated API server, kubelet and provider
        wall_at: dict[float, float] = {}
        wall_used: dict[float, float] = {}
        journal_at: dict[float, int] = {}
        journal_span: dict[float, tuple[int, int]] = {}  # API journal indexes of the window
        passes_at: dict[float, float] = {}
        passes_used: dict[float, float] = {}
        profiled = False
        emu_profiler = None
        while time.time() < end and waiting:
            for r in sorted(waiting):
                # The passes are counted from 2 s before the deadline: a scrape of the operator's metrics holds
                # its GIL for tens of milliseconds at 500 boxes, and one in the window delayed the Enters.
                if r not in passes_at and time.time() >= r + settings.resume_margin_s - 2.0:
                    passes_at[r] = await asyncio.to_thread(scraped_passes, metrics_port)
                if r not in cpu_at and time.time() >= r + settings.resume_margin_s - 0.5:
                    cpu_at[r], emu_at[r], wall_at[r] = cpu_s(), time.process_time(), time.time()
                    journal_at[r] = len(world.kube.journal)
                if args.profile_deadline and r == resets[0] and profiler is None and not profiled and \
                        time.time() >= r + settings.resume_margin_s - args.profile_lead:
                    profiler, profiled = start_profiler(args.profile, pid), True
                    emu_profiler = start_profiler(args.profile_emulator, os.getpid())
                if r in cpu_at and arrived(r):
                    cpu_used[r] = cpu_s() - cpu_at[r]
                    emu_used[r] = time.process_time() - emu_at[r]
                    wall_used[r] = time.time() - wall_at[r]
                    journal_span[r] = (journal_at[r], len(world.kube.journal))
                    passes_used[r] = await asyncio.to_thread(scraped_passes, metrics_port) - passes_at[r]
                    waiting.discard(r)
                    if args.profile_deadline and r == resets[0]:
                        stop_profiler(profiler)
                        stop_profiler(emu_profiler)
                        profiler = emu_profiler = None
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)
        lags, early, missing, wrong = [], 0, 0, 0
        lags_of: dict[float, list[float]] = {r: [] for r in resets.values()}
        for box in boxes:
            got = received(box)
            if not got:
                missing += 1
                continue
            t, text = got[0]
            wrong += text != "continue"
            early += t < reset_of[box]
            lags.append(t - reset_of[box] - settings.resume_margin_s)
            lags_of[reset_of[box]].append(lags[-1])
        sent = {r: [tap.at[b] - r - settings.resume_margin_s for b in m if b in tap.at] for r, m in members.items()}
        typed = {r: [tap.typed[b] - r - settings.resume_margin_s for b in m if b in tap.typed]
                 for r, m in members.items()}
        written = enter_writes(world, tap, reset_of, settings.resume_margin_s)
        sent_all = [x for v in sent.values() for x in v]
        c2 = cpu_s()
        stop_profiler(profiler)
        p99 = pct(lags, 99)
        p50 = pct(lags, 50)
        return {
            "boxes": args.boxes, "subscriptions": args.subscriptions, "tabs": args.boxes,
            "tmux_stream": args.stream, "operator": "in-process" if args.in_process else "process",
            "scan_interval_s": settings.scan_interval_s, "idle_s": round(idle_s, 1),
            "stream_rescan_s": settings.stream_rescan_s,
            # every box's rescan pass (the idle stream's only periodic pass) fell in the window
            "idle_covers_rescan": (not args.stream) or idle_s >= settings.stream_rescan_s,
            "idle_exec_calls": execs, "idle_stream_opens": opens,
            "idle_exec_per_box_hour": round(execs * per_hour, 2),
            "idle_exec_per_box_min": round(execs * per_hour / 60, 3),
            "idle_stream_opens_per_box_hour": round(opens * per_hour, 2),
            "api_requests_per_min": round(requests * 60 / idle_s, 1),
            "rss_mib": round(rss_idle, 1), "rss_bench_process_mib": round(rss_process, 1),
            "cpu_idle_cores": round((c1 - c0) / idle_s, 4),
            "cpu_total_s": round(c2, 1),
            "bursts": groups, "resumed": len(lags), "missing": missing, "early": early, "wrong_text": wrong,
            "before_deadline": sum(1 for lag in lags if lag < 0),  # Enter before reset + margin (armed sends: never)
            "resume_lag_p50_s": round(p50, 3) if p50 is not None else None,
            "resume_lag_p99_s": round(p99, 3) if p99 is not None else None,
            "resume_lag_max_s": round(max(lags), 3) if lags else None,
            # the controller's part: the Enter line at the API server (stream only) - (reset + margin)
            "enter_sent_lag_p50_s": _r(pct(sent_all, 50)), "enter_sent_lag_p99_s": _r(pct(sent_all, 99)),
            "enter_sent_lag_max_s": _r(max(sent_all) if sent_all else None),
            "resume_margin_s": settings.resume_margin_s,
            "resume_prepare_s": settings.resume_prepare_s,
            "resume_write_budget_s": settings.resume_write_budget_s,
            "resume_lag_by_burst": [
                {"tabs": len(members[r]), "resumed": len(v),
                 "p50_s": _r(pct(v, 50)), "p99_s": _r(pct(v, 99)), "max_s": _r(max(v) if v else None),
                 "enter_sent_p99_s": _r(pct(sent[r], 99)),
                 # the text's line and the Enter step's write-ahead (the box's last status PATCH before its
                 # Enter) at the API server, - the deadline (negative: before it)
                 "typed_p50_s": _r(pct(typed[r], 50)), "typed_max_s": _r(max(typed[r]) if typed[r] else None),
                 "enter_write_p50_s": _r(pct(written.get(r, []), 50)),
                 "enter_write_p99_s": _r(pct(written.get(r, []), 99)),
                 "window_s": _r(wall_used.get(r)), "cpu_s": _r(cpu_used.get(r)),
                 "cpu_ms_per_tab": _r(cpu_used[r] * 1000 / len(members[r])) if r in cpu_used else None,
                 **burst_requests(world, journal_span.get(r), len(members[r]), passes_used.get(r)),
                 "emulator_cpu_s": _r(emu_used.get(r))}
                for r, v in sorted(lags_of.items())],
            "load_avg_1m": round(os.getloadavg()[0], 2), "box_nice": args.box_nice, "wall_s": round(time.time() - t_start, 1),
            "streams_open_at_start_of_idle": streams_open0,
            "idle_exec_by_argv": dict(exec_verbs.most_common(8)),
            "idle_requests_by_kind": dict(request_kinds.most_common(10)),
        }
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            for _ in range(100):
                if proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
        await world.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--boxes", type=int, default=1000)
    p.add_argument("--subscriptions", type=int, default=100)
    p.add_argument("--idle", type=float, default=None,
                   help="seconds of the idle window (default: settings.stream_rescan_s + 30 = 330, so that every "
                        "box's rescan pass on the stream falls in it; a shorter window can miss them all and report 0)")
    p.add_argument("--bursts", type=int, default=2, help="groups of subscriptions limited together (default 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="give up this long after the last reset")
    p.add_argument("--margin", type=float, default=bench_settings("default").resume_margin_s,
                   help="settings.resume_margin_s: seconds after a reset before `continue` is sent "
                        "(default: the product default, %(default)s)")
    p.add_argument("--prepare", type=float, default=None,
                   help="settings.resume_prepare_s: seconds before the resume instant the usage is re-read and the "
                        "continue armed (default: the product default; 0: read and send at the resume instant)")
    p.add_argument("--write-budget", type=float, default=None,
                   help="settings.resume_write_budget_s: the armed text is typed send pause + this before the "
                        "resume instant (default: the product default)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--stream", dest="stream", action="store_true", default=True,
                      help="the live tmux stream per box (settings.tmux_stream; default)")
    mode.add_argument("--polling", dest="stream", action="store_false", help="poll every scan_interval_s")
    p.add_argument("--in-process", action="store_true",
                   help="run kopf in a thread of this process (shares the GIL with the emulators)")
    p.add_argument("--profile", metavar="FILE",
                   help="py-spy (pip install py-spy) samples the bursts; collapsed stacks to FILE")
    p.add_argument("--profile-deadline", action="store_true",
                   help="profile only the first burst, from its deadline (reset + margin) to its last resume")
    p.add_argument("--profile-emulator", metavar="FILE",
                   help="with --profile-deadline: also sample this process (the emulators) in the same window")
    p.add_argument("--profile-lead", type=float, default=0.5,
                   help="with --profile-deadline: start this many seconds before the first burst's deadline "
                        "(default 0.5; the armed text is typed send pause + write budget before it)")
    p.add_argument("--box-nice", type=int, default=10,
                   help="niceness of the boxes' processes (tmux servers, tabs, exec'd commands; default 10): in a "
                        "cluster they run on other nodes than the controller and the API server, here on the same "
                        "2 cores; 0 lets a burst's 500 tmux servers and agents take the cores from both")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if not 1 <= args.subscriptions <= args.boxes:
        p.error("need boxes >= subscriptions >= 1")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.verbose:
        logging.getLogger("kopf").setLevel(logging.ERROR)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="abx-scale-"))
    try:
        result = asyncio.run(bench(args, workdir))
    finally:
        for _ in range(10):
            shutil.rmtree(workdir, ignore_errors=True)
            if not workdir.exists():
                break
            time.sleep(0.3)
    log(f"idle exec/box/hour {result['idle_exec_per_box_hour']}  stream opens/box/hour "
        f"{result['idle_stream_opens_per_box_hour']}  API req/min {result['api_requests_per_min']}  "
        f"CPU {result['cpu_idle_cores']} cores  RSS {result['rss_mib']} MiB  resume lag p99 {result['resume_lag_p99_s']}s "
        f"({result['resumed']}/{result['boxes']} resumed, {result['missing']} missing)")
    print(json.dumps(result), flush=True)
    return 0 if result["missing"] == 0 and result["early"] == 0 and result["wrong_text"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
