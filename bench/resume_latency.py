"""Resume latency at scale: how long after a usage reset does each tab get its `continue`?

    .venv/bin/python bench/resume_latency.py [--tabs 200] [--boxes 20] [--subscriptions 5] [--spread 60]

Builds a `agentbox_sim.world.World` in a temp dir (Kubernetes API emulator, provider usage
emulator, the real kopf operator in a thread, one tmux server per box pod), creates `--boxes`
Claude Code boxes holding `--tabs` tabs in all, each tab running the scripted Claude Code TUI
(`agentbox_sim.fake_agent`) that stops on its 5-hour limit, and measures, for every tab, the time
from the reset instant to the moment the agent received `continue` (the `submit` event the fake
agent logs with a timestamp when Enter arrives). The pane is checked to show `> continue` too.

Design: who resets when (why tabs share reset instants)
-------------------------------------------------------
A provider's 5-hour window belongs to an account, and every session logged into that account
shows the same reset. Claude Code prints it rounded down to the minute (`resets 5:13pm`), so the
controller wakes at that minute (+ margin), re-reads the usage API and learns the exact instant
(`ResetNotYet`), then fires at exact reset + `resume_margin_s`. Giving tabs of one account
different resets would be dishonest: the usage API would answer "reset" for the early instant
and the late tabs' agents would hit the limit again.

So: one account (Secret + Subscription) per subscription; box `i` uses subscription `i % S`; all
tabs of a subscription share that account's reset instant `R_s`. The `S` instants are spread
uniformly over `--spread` seconds: `R_s = ceil(T0 + lead + s * spread / S)` (whole seconds: the
providers' epochs have one-second resolution), where `T0` is when the agents are launched (after
all pods and shells are up) and `lead` (`--lead`, default 20 s) leaves time for detection. Each
account's `five_hour` window is at 100 % until `R_s` (the emulator rolls it to 0 % afterwards),
`seven_day` at 40 %. With the defaults that is 5 bursts of 40 tabs (4 boxes x 10 tabs) 12 s apart,
which is the realistic worst case: a whole team's tabs on one plan wake at the same second. Use
`--subscriptions` equal to `--boxes` for one reset instant per box (10 tabs at once per burst).

Settings are the component tests' FAST ones with a realistic scan (`scan_interval_s=5`,
`resume_margin_s=1`): resumes must fire at deadlines, not at scans. "latency" is measured from
the reset instant (so it includes the 1 s margin); "lag" is latency minus the margin (what the
controller adds on top of its own schedule). The controller's deadline is the SCREEN's reset
(minute-rounded) + margin, confirmed by the usage API; when the real reset falls within the first
`margin` seconds of its minute that deadline is already past the reset, so such a burst shows a
latency below the margin (e.g. 0.6 s with a reset at :01). That is the controller's behaviour,
not a measuring error; `latency_max_by_reset_s` shows each reset's second of the minute.

Output: progress lines, a summary, then ONE final JSON line with every figure. Exit status 1 when
the number of `continue` submits differs from the number of tabs, a tab got two, or one came
before its reset. Every tmux server (and so every agent) is killed on exit (World.stop).

The operator follows tmux over the live stream (`tmux_stream`, the default); `--polling` polls instead.
(The former `--prototype` path patched `BoxWatcher` methods that no longer exist and silently measured
the unpatched controller; it was removed.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import pathlib
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from controller import constants as C  # noqa: E402
from agentbox_sim.bench_settings import bench_settings  # noqa: E402
from agentbox_sim.world import TabSpec, World, claude_login, fake_agent_argv  # noqa: E402

SETTINGS = bench_settings()


class _PoolFullCounter(logging.Filter):
    """Counts (and hides) urllib3's "Connection pool is full" warnings: the kubernetes client's pool
    (10 connections by default) is smaller than the operator's thread pool, so connections are dropped."""

    count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "Connection pool is full" in record.getMessage():
            self.count += 1
            return False
        return True


_POOL_FULL = _PoolFullCounter()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


# ---------------------------------------------------------------------------------------------- RSS
def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def world_rss_mb(sock_dir: str) -> float:
    """RSS of this process + every tmux server of the world (found by socket dir) and their descendants."""
    roots = [os.getpid()]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if sock_dir.encode() in fh.read():
                        roots.append(int(entry))
            except OSError:
                pass
    kids = _children_map()
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(kids.get(pid, []))
    return sum(_rss_kb(p) for p in seen) / 1024


# ---------------------------------------------------------------------------------------------- the run
async def bench(args: argparse.Namespace, workdir: pathlib.Path) -> dict[str, Any]:
    t_start = time.time()
    n_tabs, n_boxes, n_subs = args.tabs, args.boxes, args.subscriptions
    per_box = [n_tabs // n_boxes + (1 if i < n_tabs % n_boxes else 0) for i in range(n_boxes)]
    boxes = [f"box-{i:02d}" for i in range(n_boxes)]
    sub_of = {box: i % n_subs for i, box in enumerate(boxes)}
    tabs = [(box, f"t{j:02d}") for box, n in zip(boxes, per_box) for j in range(n)]

    world = World(workdir / "world", SETTINGS.model_copy(update={"tmux_stream": args.stream}))
    await world.start()
    rss_peak = 0.0
    sampler: asyncio.Task | None = None
    try:
        world.start_operator()
        far = at(time.time() + 3600)
        for s in range(n_subs):
            world.provider.add_login(f"tok-{s}", f"acct-{s}")
            world.provider.set_windows(f"acct-{s}", five_hour=(100.0, far), weekly=(40.0, at(time.time() + 86400)))
            await world.add_secret(f"claude-login-{s}", "credentials.json", claude_login(f"tok-{s}"))
            await world.add_subscription(f"claude-{s}", "anthropic", f"claude-login-{s}", "credentials.json")
        for box in boxes:
            await world.add_box(box, "claude-code", f"claude-{sub_of[box]}")
        # Shells first (the agents are launched later, once every pod is up, so the resets can be
        # placed relative to the end of setup).
        await asyncio.gather(*(world.run_pod(box, [TabSpec(f"t{j:02d}", [":"]) for j in range(n)], timeout=60)
                               for box, n in zip(boxes, per_box)))
        t_pods = time.time()
        log(f"{n_boxes} pods with {n_tabs} shells up in {t_pods - t_start:.1f}s")

        async def sample() -> None:
            nonlocal rss_peak
            while True:
                rss_peak = max(rss_peak, await asyncio.to_thread(world_rss_mb, str(world.sockets.dir)))
                await asyncio.sleep(3)
        sampler = asyncio.create_task(sample())

        t0 = time.time()
        resets = {s: float(math.ceil(t0 + args.lead + s * args.spread / n_subs)) for s in range(n_subs)}
        for s, r in resets.items():
            world.provider.set_windows(f"acct-{s}", five_hour=(100.0, at(r)), weekly=(40.0, at(time.time() + 86400)))
        # Launch every agent: one tmux call per pod typing the command + Enter into each tab.
        for box, n in zip(boxes, per_box):
            argv = fake_agent_argv("claude-code", resets[sub_of[box]], "--work-seconds", "600")
            tmux_args: list[str] = []
            for j in range(n):
                target = f"={C.TMUX_SESSION}:t{j:02d}"
                tmux_args += ["send-keys", "-t", target, "-l", shlex.join(argv), ";",
                              "send-keys", "-t", target, "Enter", ";"]
            proc = await asyncio.create_subprocess_exec(
                "tmux", "-S", str(world.sockets(world.namespace, box)), *tmux_args[:-1],
                env={k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")})
            await proc.wait()
        t_launch = time.time()
        first_reset, last_reset = min(resets.values()), max(resets.values())
        log(f"agents launched in {t_launch - t0:.1f}s; resets at +{first_reset - t_launch:.1f}s .. "
            f"+{last_reset - t_launch:.1f}s ({n_subs} instants)")

        def tab_states() -> dict[tuple[str, str], str]:
            out = {}
            for box in boxes:
                for t in ((world.box(box) or {}).get("status") or {}).get("tabs") or []:
                    out[(box, t["name"])] = t.get("state", "")
            return out

        def continue_submits(box: str, tab: str) -> list[float]:
            return [e["t"] for e in world.agent_log(box, tab) if e["event"] == "submit" and e.get("text") == "continue"]

        # Detection before each reset.
        detected_before: dict[tuple[str, str], bool] = {}
        exec_at_first_reset: int | None = None
        deadline = last_reset + args.timeout
        done_at: float | None = None
        while time.time() < deadline:
            now = time.time()
            if exec_at_first_reset is None and now >= first_reset:
                exec_at_first_reset = len(world.kube.exec_journal)
            states = tab_states()
            for box, tab in tabs:
                r = resets[sub_of[box]]
                if (box, tab) not in detected_before and now < r and states.get((box, tab)) == "RateLimited":
                    detected_before[(box, tab)] = True
            if now > last_reset and all(await asyncio.to_thread(lambda: [continue_submits(b, t) for b, t in tabs])):
                done_at = now
                break
            await asyncio.sleep(1.0)
        if done_at is None:
            log(f"timeout: not every tab got continue within {args.timeout:.0f}s of the last reset")
        else:
            log(f"every tab got continue {done_at - last_reset:.1f}s after the last reset; "
                f"watching {args.settle:.0f}s for duplicates")
            await asyncio.sleep(args.settle)
        exec_total = len(world.kube.exec_journal)
        exec_burst = exec_total - (exec_at_first_reset or exec_total)
        journal = list(world.kube.exec_journal)

        # Figures.
        per_tab = []
        for box, tab in tabs:
            r = resets[sub_of[box]]
            sends = continue_submits(box, tab)
            other = [e for e in world.agent_log(box, tab) if e["event"] == "submit" and e.get("text") != "continue"]
            screen = await asyncio.to_thread(world.screen, box, tab)
            per_tab.append({
                "box": box, "tab": tab, "reset": r, "sends": len(sends), "other_submits": len(other),
                "latency": (sends[0] - r) if sends else None, "early": bool(sends and sends[0] < r),
                "pane_shows": "> continue" in screen, "detected_before_reset": detected_before.get((box, tab), False),
            })
        lat = [p["latency"] for p in per_tab if p["latency"] is not None]
        margin = SETTINGS.resume_margin_s
        sends_total = sum(p["sends"] for p in per_tab)
        usage_by_account = Counter(r.account or "?" for r in world.provider.requests)
        verbs = Counter((rec.argv[1] if len(rec.argv) > 1 else rec.argv[0]) for rec in journal)
        by_burst: dict[int, list[float]] = {}
        for p in per_tab:
            if p["latency"] is not None:
                by_burst.setdefault(int(p["reset"]), []).append(p["latency"])
        # Latency by position inside a box (1st, 2nd... tab of the box to get continue): sequential acting.
        rank_lat: dict[int, list[float]] = {}
        for box in boxes:
            lats = sorted(p["latency"] for p in per_tab if p["box"] == box and p["latency"] is not None)
            for i, v in enumerate(lats):
                rank_lat.setdefault(i + 1, []).append(v)
        rss_peak = max(rss_peak, await asyncio.to_thread(world_rss_mb, str(world.sockets.dir)))
        result = {
            "tabs": n_tabs, "boxes": n_boxes, "subscriptions": n_subs, "spread_s": args.spread,
            "tmux_stream": args.stream,
            "scan_interval_s": SETTINGS.scan_interval_s, "resume_margin_s": margin,
            "latency_p50_s": round(pct(lat, 50), 3), "latency_p95_s": round(pct(lat, 95), 3),
            "latency_p99_s": round(pct(lat, 99), 3), "latency_max_s": round(max(lat), 3) if lat else None,
            "latency_min_s": round(min(lat), 3) if lat else None,
            "latency_mean_s": round(statistics.fmean(lat), 3) if lat else None,
            "lag_p50_s": round(pct(lat, 50) - margin, 3), "lag_p99_s": round(pct(lat, 99) - margin, 3),
            "sends": sends_total, "tabs_resumed": len(lat),
            "tabs_with_two_or_more_sends": sum(1 for p in per_tab if p["sends"] > 1),
            "tabs_without_send": sum(1 for p in per_tab if p["sends"] == 0),
            "early_sends": sum(1 for p in per_tab if p["early"]),
            "other_submits": sum(p["other_submits"] for p in per_tab),
            "pane_shows_continue": sum(1 for p in per_tab if p["pane_shows"]),
            "detected_before_reset": sum(1 for p in per_tab if p["detected_before_reset"]),
            "exec_calls": exec_total, "exec_calls_from_first_reset": exec_burst,
            "exec_calls_by_verb": dict(verbs.most_common()),
            "usage_reads_by_account": dict(sorted(usage_by_account.items())),
            "usage_reads": len(world.provider.requests),
            # key: reset offset from the agents' launch and its second of the minute (see the docstring)
            "latency_max_by_reset_s": {f"+{int(k - t_launch)}s(:{int(k) % 60:02d})": round(max(v), 3)
                                       for k, v in sorted(by_burst.items())},
            "latency_p50_by_rank_in_box_s": {str(k): round(pct(v, 50), 3) for k, v in sorted(rank_lat.items())},
            "setup_s": round(t_launch - t_start, 1), "wall_s": round(time.time() - t_start, 1),
            "peak_rss_self_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "peak_rss_world_mb": round(rss_peak, 1),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "urllib3_pool_full_warnings": _POOL_FULL.count,
        }
        if args.details:
            events = [{"box": (e.get("involvedObject") or {}).get("name"), "reason": e.get("reason"),
                       "message": e.get("message"), "time": e.get("lastTimestamp") or e.get("eventTime")}
                      for e in world.events()]
            pathlib.Path(args.details).write_text(json.dumps({"tabs": per_tab, "events": events}, indent=1))
        return result
    finally:
        if sampler:
            sampler.cancel()
        await world.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tabs", type=int, default=200, help="tabs in all (default 200)")
    p.add_argument("--boxes", type=int, default=20, help="AgentBoxes (pods) the tabs are spread over (default 20)")
    p.add_argument("--subscriptions", type=int, default=5, help="Claude subscriptions = distinct reset instants (default 5)")
    p.add_argument("--spread", type=float, default=60.0, help="the reset instants span this many seconds (default 60)")
    p.add_argument("--lead", type=float, default=20.0, help="first reset this long after the agents start (default 20)")
    p.add_argument("--timeout", type=float, default=90.0, help="give up this long after the last reset (default 90)")
    p.add_argument("--settle", type=float, default=12.0, help="watch for duplicate sends this long after the last (default 12)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--stream", dest="stream", action="store_true", default=True,
                      help="the operator follows tmux over the live stream (settings.tmux_stream; default)")
    mode.add_argument("--polling", dest="stream", action="store_false", help="poll every scan interval instead")
    p.add_argument("--details", metavar="FILE", help="write per-tab figures and the boxes' Events to FILE (JSON)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (agent logs) for inspection")
    p.add_argument("--verbose", action="store_true", help="operator logs at INFO")
    args = p.parse_args(argv)
    if args.boxes < 1 or args.tabs < args.boxes or not 1 <= args.subscriptions <= args.boxes:
        p.error("need tabs >= boxes >= subscriptions >= 1")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.verbose:  # kopf warns about its own daemons being cancelled at shutdown: noise here
        logging.getLogger("kopf").setLevel(logging.ERROR)
    logging.getLogger("urllib3.connectionpool").addFilter(_POOL_FULL)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="abx-bench-"))
    try:
        result = asyncio.run(bench(args, workdir))
    finally:
        if args.keep:
            log(f"kept {workdir}")
        else:
            # Shells killed with their tmux server may still write (bash history) for a moment.
            for _ in range(10):
                shutil.rmtree(workdir, ignore_errors=True)
                time.sleep(0.3)
                if not workdir.exists():
                    break
    log(f"latency reset -> continue submitted (s): p50 {result['latency_p50_s']}  p95 {result['latency_p95_s']}  "
        f"p99 {result['latency_p99_s']}  max {result['latency_max_s']}  (margin {result['resume_margin_s']}s included)")
    log(f"sends {result['sends']}/{result['tabs']}  two+ {result['tabs_with_two_or_more_sends']}  "
        f"none {result['tabs_without_send']}  early {result['early_sends']}  pane shows {result['pane_shows_continue']}")
    log(f"exec calls {result['exec_calls']} ({result['exec_calls_from_first_reset']} from the first reset)  "
        f"usage reads {result['usage_reads_by_account']}  wall {result['wall_s']}s  "
        f"peak RSS self {result['peak_rss_self_mb']} MB, world {result['peak_rss_world_mb']} MB")
    print(json.dumps(result), flush=True)
    ok = (result["sends"] == result["tabs"] and result["tabs_with_two_or_more_sends"] == 0
          and result["tabs_without_send"] == 0 and result["early_sends"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
