"""Exactly once, whatever dies: the operator as a separate process, SIGKILLed and restarted.

    .venv/bin/python bench/faults.py [--random 50] [--per-step 5] [--lead 15] [--max-restart-delay 10]
                                     [--stream] [--concurrency 3] [--failover 2]

Each run builds a fresh emulated world (`agentbox_sim.world.World`: Kubernetes API emulator with pod exec
into per-pod tmux servers, provider usage emulator) in this process, and runs the operator as its own OS
process (`agentbox-controller run`, PR_SET_PDEATHSIG) against it. Two boxes: a Claude Code box with two tabs
and a Codex box with two tabs (scripted agents, `agentbox_sim.fake_agent`), all stopped on a 5-hour limit
whose reset is `--lead` seconds ahead. The operator is killed with SIGKILL

* `random` runs: at a uniformly random instant in [detection (every tab RateLimited in status), reset + 10 s];
* `step:<name>` runs: at a named step of a multi-step action — the emulator's pods/exec sees the call of that
  step and SIGKILLs the operator before running it (the step never reached the box) or right after running it
  (the step happened, the reply is lost); with `--stream` (setting `tmux_stream`: keys travel as command lines
  of one live `tmux -C` exec stream per box) the same steps are matched on the stream's command lines: killed
  before the line reaches tmux, or once tmux ran it and before its `%end` reaches the operator;

and restarted after a uniformly random 0-`--max-restart-delay` s. Per tab: the `continue` submits the
scripted agent logged. exactly once = one submit at or after the reset; lost = none by reset + 60 s (or 30 s
after the restarted operator was ready, when that is later: a loaded machine can take a minute to start it); double =
more than one; early = one before the reset. `restart_to_resume_s`: for tabs whose deadline (reset + margin)
had passed when the restarted operator was ready (its first AgentBox watch), submit time minus that instant.

Output: one JSON line per run, then ONE final JSON line with runs, tabs, exactly_once_pct, lost, double,
early, failover_s (the worst `--failover` two-replica run; null without them) and failover_p50_s,
restart_to_resume_p50_s/p99_s/max_s and due_resume_within_3s_pct (issue 10's target: a resume already due
fires <= 3 s after the restarted controller is ready), mode (poll|stream), per-point figures. Exit status 1
when any tab was not resumed exactly once. `--concurrency N` runs N worlds at once (faster; the latencies then
include the load of the other runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pathlib
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any, Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from controller import constants as C  # noqa: E402
from agentbox_sim.bench_settings import bench_settings  # noqa: E402
from agentbox_sim.procstat import pdeathsig_kill  # noqa: E402
from agentbox_sim.kube import ExecFault  # noqa: E402
from agentbox_sim.world import (  # noqa: E402
    TabSpec, World, claude_login, codex_login, fake_agent_argv, utc_in,
)

SETTINGS = bench_settings(scan_interval_s=2.0)
CLAUDE_TABS = ("c1", "c2")
CODEX_TABS = ("x1", "x2")


def typed(text: str) -> Callable[[list[str]], bool]:
    return lambda argv: "send-keys" in argv and "-l" in argv and text in argv


def enter(argv: list[str]) -> bool:
    return "send-keys" in argv and "Enter" in argv and "-l" not in argv


def ctrl_c(argv: list[str]) -> bool:
    return "send-keys" in argv and "C-c" in argv


# name: (pod, match, when, mode, skip)
STEPS: dict[str, tuple[str, Callable[[list[str]], bool], str, str, int]] = {
    "claude:before-type": ("box-c", typed("continue"), "before", "drop", 0),
    "claude:after-type-before-enter": ("box-c", enter, "before", "drop", 0),
    "claude:right-after-enter": ("box-c", enter, "after", "pass", 0),
    "codex:between-ctrl-c": ("box-x", ctrl_c, "before", "drop", 1),
    "codex:after-ctrl-c-before-relaunch": ("box-x", typed("codex resume --last"), "before", "drop", 0),
    "codex:after-relaunch": ("box-x", typed("codex resume --last"), "after", "pass", 0),
    "codex:before-continue": ("box-x", typed("continue"), "before", "drop", 0),
    "codex:after-type-before-enter": ("box-x", enter, "before", "drop", 0),
    "codex:right-after-enter": ("box-x", enter, "after", "pass", 0),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))], 3)


def start_operator(world: World, logfile: pathlib.Path, *extra: str,
                   kubeconfig: pathlib.Path | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
    env.update({"KUBECONFIG": str(kubeconfig or world.kubeconfig), "PYTHONPATH": str(ROOT)})
    for key, value in world.settings.model_dump(mode="json").items():
        if value is not None:
            env["AGENTBOX_" + key.upper()] = json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
    out = open(logfile, "ab")
    return subprocess.Popen([sys.executable, "-m", "controller", "run", "--namespace", world.namespace,
                             "--liveness", "", *extra], env=env, stdout=out, stderr=subprocess.STDOUT,
                            preexec_fn=pdeathsig_kill, cwd=str(ROOT))


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


def submits(world: World, pod: str, tab: str) -> list[float]:
    return [e["t"] for e in world.agent_log(pod, tab) if e["event"] == "submit" and e.get("text") == "continue"]


def tab_states(world: World) -> dict[tuple[str, str], str]:
    out = {}
    for box in ("box-c", "box-x"):
        for t in ((world.box(box) or {}).get("status") or {}).get("tabs") or []:
            out[(box, t["name"])] = t.get("state")
    return out


async def wait(probe: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(every)
    return None


def watch_requests(world: World, since: int) -> int | None:
    """Index of the first AgentBox watch request at or after `since` (the operator is ready then)."""
    for i in range(since, len(world.kube.journal)):
        e = world.kube.journal[i]
        if e.method == "GET" and e.path.endswith(f"/{C.AGENTBOX_PLURAL}") and "watch=" in e.query:
            return i
    return None


async def one_run(n: int, point: str, args: argparse.Namespace, rng: random.Random, base: pathlib.Path) -> dict:
    workdir = base / f"run{n:03d}"
    logfile = workdir / "operator.log"
    settings = SETTINGS.model_copy(update={"tmux_stream": bool(args.stream)})
    async with World(workdir, settings) as world:
        proc = start_operator(world, logfile)
        procs = [proc]
        killed: dict[str, float] = {}

        def kill() -> None:
            if "t" not in killed:
                killed["t"] = time.time()
                os.kill(procs[-1].pid, signal.SIGKILL)

        reset = float(math.ceil(time.time() + args.lead))
        for acct, tok in (("acct-c", "tok-c"), ("acct-x", "tok-x")):
            world.provider.add_login(tok, acct)
            world.provider.set_windows(acct, five_hour=(100.0, at(reset)), weekly=(40.0, utc_in(86400)))
        await world.add_secret("claude-login", "credentials.json", claude_login("tok-c"))
        await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
        await world.add_secret("codex-login", "auth.json", codex_login("tok-x", "acct-x"))
        await world.add_subscription("codex-a", "openai", "codex-login", "auth.json")
        await world.add_box("box-c", "claude-code", "claude-a")
        await world.add_box("box-x", "codex", "codex-a")
        fault = None
        if point != "random":
            pod, match, when, mode, skip = STEPS[point]
            fault = ExecFault(mode=mode, pod=pod, match=match, when=when, skip=skip, on_match=kill)
            world.kube.exec_faults.append(fault)
            if args.stream:  # the keys travel on the control-mode stream (one-shot exec while it is down)
                world.kube.stream_faults.append(fault)
        await world.run_pod("box-c", [TabSpec(t, fake_agent_argv("claude-code", reset)) for t in CLAUDE_TABS],
                            timeout=60)
        await world.run_pod("box-x", [TabSpec(t, ["codex"]) for t in CODEX_TABS],
                            shims={"codex": fake_agent_argv("codex", reset)}, timeout=60)
        tabs = [("box-c", t) for t in CLAUDE_TABS] + [("box-x", t) for t in CODEX_TABS]
        detected = await wait(lambda: len([s for s in tab_states(world).values() if s == "RateLimited"]) == len(tabs)
                              and time.time(), args.lead + 20)
        detected_at = detected or time.time()
        if point == "random":
            kill_at = rng.uniform(detected_at, reset + 10)
            await asyncio.sleep(max(0.0, kill_at - time.time()))
            kill()
        else:
            await wait(lambda: killed, reset + 40 - time.time())
        delay = rng.uniform(0, args.max_restart_delay)
        if killed:
            await asyncio.sleep(delay)
            since = len(world.kube.journal)
            restart_at = time.time()
            procs.append(start_operator(world, logfile))
            ready_at = None
            # Under a heavy machine load the new process may take a minute to import and start: waited for
            # (up to 180 s); the tabs are then judged from its readiness, not from the reset alone.
            found = await wait(lambda: watch_requests(world, since) is not None, 180, every=0.02)
            ready_at = time.time() if found else None
        else:
            restart_at = ready_at = None
        until = max(reset + 60, (ready_at or 0) + 30)
        await wait(lambda: all(submits(world, p, t) for p, t in tabs), max(5.0, until - time.time()))
        await asyncio.sleep(SETTINGS.settle_s + 3)
        per_tab = []
        for p, t in tabs:
            s = submits(world, p, t)
            due = reset + SETTINGS.resume_margin_s
            after_restart = (s[0] - ready_at) if (s and ready_at and due <= ready_at and s[0] >= ready_at) else None
            # the resume "fires" at its first key after the restart (Codex: the first Ctrl-C of its restart)
            keys = [e["t"] for e in world.agent_log(p, t) if e["event"] == "key" and ready_at and e["t"] >= ready_at]
            first_key = (keys[0] - ready_at) if (after_restart is not None and keys) else None
            per_tab.append({"tab": f"{p}/{t}", "submits": len(s), "early": any(x < reset for x in s),
                            "latency_s": round(s[0] - reset, 3) if s else None,
                            "restart_to_resume_s": round(after_restart, 3) if after_restart is not None else None,
                            "restart_to_first_key_s": round(first_key, 3) if first_key is not None else None})
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
            pr.wait()
        result = {
            "run": n, "point": point, "killed": bool(killed),
            "kill_after_reset_s": round(killed["t"] - reset, 3) if killed else None,
            "restart_delay_s": round(delay, 3) if killed else None,
            "ready_after_restart_s": round(ready_at - restart_at, 3) if ready_at and restart_at else None,
            "tabs": per_tab,
        }
    if not args.keep and all(t["submits"] == 1 and not t["early"] for t in per_tab):
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _peering_crd(kind: str, plural: str, scope: str) -> dict:
    """kopf's peering CRD (as charts/agentbox-controller/templates/peering.yaml renders it)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kopf.dev"},
            "spec": {"scope": scope, "group": "kopf.dev",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"status": {
                             "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


async def failover_run(n: int, args: argparse.Namespace, base: pathlib.Path, mode: str = "lease") -> dict:
    """Two replicas, each with its own listener on the emulator (its requests are told apart); the active
    one is SIGKILLed `--failover-before` s before the reset (not restarted). mode "lease": --leader-elect
    with the given timings; "peering": kopf peering (--peering, priorities 200 and 100).
    failover_s: the kill -> the standby's operator running (its first AgentBox watch; with peering the
    standby watches from the start, so null). first_action_s: the kill -> the standby's first exec or status
    write (it acts from then on)."""
    workdir = base / f"failover-{mode}{n:03d}"
    async with World(workdir, SETTINGS) as world:
        urls, kubeconfigs = [], []
        for i in range(2):
            urls.append(await world.kube.add_port())
            kubeconfigs.append(world.kube.write_kubeconfig(workdir / f"kubeconfig{i}", namespace=world.namespace,
                                                           server=urls[-1]))
        ports = [int(u.rsplit(":", 1)[1]) for u in urls]
        if mode == "lease":
            elect = [("--leader-elect", "agentbox-controller", "--lease-namespace", world.namespace,
                      "--lease-duration", str(args.lease_duration), "--renew-deadline", str(args.renew_deadline),
                      "--retry-period", str(args.retry_period))] * 2
        else:
            world.kube.add_crd(_peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"))
            world.kube.add_crd(_peering_crd("KopfPeering", "kopfpeerings", "Namespaced"))
            elect = [("--peering", "agentbox-controller", "--priority", str(p)) for p in (200, 100)]
        procs = [start_operator(world, workdir / f"operator{i}.log", *elect[i], kubeconfig=kubeconfigs[i])
                 for i in range(2)]
        reset = float(math.ceil(time.time() + args.lead + 10))
        for acct, tok in (("acct-c", "tok-c"),):
            world.provider.add_login(tok, acct)
            world.provider.set_windows(acct, five_hour=(100.0, at(reset)), weekly=(40.0, utc_in(86400)))
        await world.add_secret("claude-login", "credentials.json", claude_login("tok-c"))
        await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
        await world.add_box("box-c", "claude-code", "claude-a")
        await world.run_pod("box-c", [TabSpec(t, fake_agent_argv("claude-code", reset)) for t in CLAUDE_TABS],
                            timeout=40)
        tabs = [("box-c", t) for t in CLAUDE_TABS]

        def holder() -> str:
            lease = world.kube.get("coordination.k8s.io/v1/leases", world.namespace, "agentbox-controller") or {}
            return (lease.get("spec") or {}).get("holderIdentity") or ""

        def acts(i: int, since: float) -> float | None:
            """When replica i first exec'd or wrote status at or after `since`."""
            return next((e.at for e in world.kube.journal if e.port == ports[i] and e.at >= since and (
                e.path.endswith("/exec") or (e.method in ("PATCH", "PUT") and e.path.endswith("/status")))), None)

        await wait(lambda: len([s for s in tab_states(world).values() if s == "RateLimited"]) == len(tabs), 40)
        await asyncio.sleep(max(0.0, reset - args.failover_before - time.time()))
        if mode == "lease":
            leader_pid = int(holder().split("_")[-2])  # identity: <hostname>_<pid>_<random>
            active = next(i for i, pr in enumerate(procs) if pr.pid == leader_pid)
        else:
            active = 0  # the higher priority
        standby = 1 - active
        both_acted = acts(standby, 0.0) is not None
        since = len(world.kube.journal)
        killed_at = time.time()
        os.kill(procs[active].pid, signal.SIGKILL)
        failover = None
        if mode == "lease":
            found = await wait(lambda: watch_requests(world, since) is not None, 60, every=0.05)
            failover = time.time() - killed_at if found else None
        first = await wait(lambda: acts(standby, killed_at), 150, every=0.05)
        await wait(lambda: all(submits(world, p, t) for p, t in tabs), max(5.0, reset + 90 - time.time()))
        await asyncio.sleep(SETTINGS.settle_s + 3)
        per_tab = [{"tab": f"{p}/{t}", "submits": len(submits(world, p, t)),
                    "early": any(x < reset for x in submits(world, p, t)),
                    "latency_s": round(submits(world, p, t)[0] - reset, 3) if submits(world, p, t) else None,
                    "restart_to_resume_s": None} for p, t in tabs]
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
            pr.wait()
    return {"run": n, "point": f"failover-{mode}", "failover_s": round(failover, 3) if failover else None,
            "first_action_s": round(first - killed_at, 3) if first else None,
            "standby_acted_before_kill": both_acted, "tabs": per_tab, "ready_after_restart_s": None}


async def main_async(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    base = pathlib.Path(tempfile.mkdtemp(prefix="faults-", dir=args.workdir))
    points = [s for s in STEPS for _ in range(args.per_step)] + ["random"] * args.random
    if args.only:
        points = [args.only] * args.per_step
    for extra in args.extra:
        name, _, count = extra.rpartition("=")
        if name != "random" and name not in STEPS:
            raise SystemExit(f"--extra: unknown point {name!r}")
        points += [name] * int(count)
    if args.shuffle:
        rng.shuffle(points)
    results: list[dict] = []
    failovers: list[float] = []
    first_actions: dict[str, list[float]] = {"lease": [], "peering": []}
    for mode, count in (("lease", args.failover), ("peering", args.failover_peering)):
        for n in range(count):
            res = await failover_run(n, args, base, mode)
            results.append(res)
            if res["failover_s"] is not None:
                failovers.append(res["failover_s"])
            if res["first_action_s"] is not None:
                first_actions[mode].append(res["first_action_s"])
            ok = sum(t["submits"] == 1 and not t["early"] for t in res["tabs"])
            log(f"failover ({mode}) run {n}: {ok}/{len(res['tabs'])} exactly once, failover {res['failover_s']} s, "
                f"standby's first action {res['first_action_s']} s after the kill"
                f"{'; THE STANDBY ACTED BEFORE THE KILL' if res['standby_acted_before_kill'] else ''}")
            print(json.dumps(res), flush=True)
    gate = asyncio.Semaphore(max(1, args.concurrency))
    errors: list[dict] = []

    async def run(n: int, point: str) -> None:
        async with gate:
            started = time.time()
            # one generator per run: the same seed gives the same kill instants whatever the concurrency
            try:
                res = await one_run(n, point, args, random.Random(args.seed * 100003 + n), base)
            except Exception as exc:  # a harness failure (e.g. a pod not created in time under load): reported
                res = {"run": n, "point": point, "error": f"{type(exc).__name__}: {exc}"[:300], "tabs": [],
                       "ready_after_restart_s": None}
                errors.append(res)
            results.append(res)
            ok = sum(t["submits"] == 1 and not t["early"] for t in res["tabs"])
            log(f"run {n} {point}: {ok}/{len(res['tabs'])} exactly once in {time.time() - started:.0f}s")
            print(json.dumps(res), flush=True)
    await asyncio.gather(*(run(n, point) for n, point in enumerate(points)))
    return summarize(results, args, str(base))


def summarize(results: list[dict], args: argparse.Namespace, workdir: str) -> int:
    """Print the final JSON line of `results` (the per-run dicts, from this invocation or read back from the
    JSON lines of several: `--summarize`); returns the exit status (1 unless every tab was resumed exactly
    once and no run failed in the harness)."""
    failovers = [r["failover_s"] for r in results if str(r["point"]).startswith("failover")
                 and r.get("failover_s") is not None]
    first_actions: dict[str, list[float]] = {"lease": [], "peering": []}
    for r in results:
        if str(r["point"]).startswith("failover") and r.get("first_action_s") is not None:
            first_actions["peering" if r["point"] == "failover-peering" else "lease"].append(r["first_action_s"])
    errors = [r for r in results if r.get("error")]
    tabs = [t for r in results for t in r["tabs"]]
    once = [t for t in tabs if t["submits"] == 1 and not t["early"]]
    r2r = [t["restart_to_resume_s"] for t in tabs if t["restart_to_resume_s"] is not None]
    r2k = [t["restart_to_first_key_s"] for t in tabs if t.get("restart_to_first_key_s") is not None]
    lat = [t["latency_s"] for t in tabs if t["latency_s"] is not None]
    by_point: dict[str, dict[str, int]] = {}
    for r in results:
        d = by_point.setdefault(r["point"], {"runs": 0, "tabs": 0, "exactly_once": 0})
        if r.get("failover_s") is not None:
            d["failover_s_max"] = max(d.get("failover_s_max", 0.0), r["failover_s"])
        d["runs"] += 1
        d["tabs"] += len(r["tabs"])
        d["exactly_once"] += sum(t["submits"] == 1 and not t["early"] for t in r["tabs"])
    summary = {
        "runs": len(results), "tabs": len(tabs),
        "exactly_once_pct": round(100.0 * len(once) / len(tabs), 2) if tabs else None,
        "lost": sum(t["submits"] == 0 for t in tabs), "double": sum(t["submits"] > 1 for t in tabs),
        "early": sum(t["early"] for t in tabs),
        "failover_s": max(failovers) if failovers else None,
        "failover_p50_s": pct(failovers, 50), "failover_runs": len(failovers),
        "failover_timings": f"{args.lease_duration}/{args.renew_deadline:g}/{args.retry_period:g}",
        "first_action_lease_p50_s": pct(first_actions["lease"], 50),
        "first_action_lease_max_s": max(first_actions["lease"]) if first_actions["lease"] else None,
        "first_action_peering_p50_s": pct(first_actions["peering"], 50),
        "first_action_peering_max_s": max(first_actions["peering"]) if first_actions["peering"] else None,
        "standby_acted_before_kill": sum(bool(r.get("standby_acted_before_kill")) for r in results),
        "restart_to_resume_p50_s": pct(r2r, 50), "restart_to_resume_p99_s": pct(r2r, 99),
        "restart_to_resume_n": len(r2r),
        "restart_to_resume_max_s": max(r2r) if r2r else None,
        # issue 10's target: a resume already due fires <= 3 s after the restarted controller is ready
        "due_resume_within_3s_pct": round(100.0 * sum(x <= 3.0 for x in r2r) / len(r2r), 2) if r2r else None,
        "restart_to_first_key_p99_s": pct(r2k, 99), "restart_to_first_key_max_s": max(r2k) if r2k else None,
        "due_first_key_within_3s_pct": round(100.0 * sum(x <= 3.0 for x in r2k) / len(r2k), 2) if r2k else None,
        "mode": "stream" if args.stream else "poll", "concurrency": args.concurrency,
        "latency_after_reset_p50_s": pct(lat, 50), "latency_after_reset_p99_s": pct(lat, 99),
        "ready_after_restart_p50_s": pct([r["ready_after_restart_s"] for r in results
                                          if r["ready_after_restart_s"] is not None], 50),
        "ready_after_restart_max_s": max((r["ready_after_restart_s"] for r in results
                                          if r["ready_after_restart_s"] is not None), default=None),
        "harness_errors": len(errors), "by_point": by_point, "workdir": workdir,
    }
    print(json.dumps(summary), flush=True)
    return 0 if len(once) == len(tabs) and not errors else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--random", type=int, default=50, help="runs killed at a random instant (default 50)")
    p.add_argument("--per-step", type=int, default=5, help="runs per named step (default 5)")
    p.add_argument("--lead", type=float, default=15.0, help="seconds from the start to the reset (default 15)")
    p.add_argument("--max-restart-delay", type=float, default=10.0, help="restart after 0..this many s")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--failover", type=int, default=0, help="two-replica runs (--leader-elect), leader killed")
    p.add_argument("--failover-peering", type=int, default=0,
                   help="two-replica runs with kopf peering (--peering) instead of the Lease, for comparison")
    p.add_argument("--failover-before", type=float, default=14.0, help="kill the leader this many s before the reset")
    p.add_argument("--lease-duration", type=int, default=10, help="--lease-duration of the replicas (default 10)")
    p.add_argument("--renew-deadline", type=float, default=7.0, help="--renew-deadline of the replicas (default 7)")
    p.add_argument("--retry-period", type=float, default=1.0, help="--retry-period of the replicas (default 1)")
    p.add_argument("--only", help="run only this named step (e.g. codex:after-relaunch) --per-step times")
    p.add_argument("--shuffle", action="store_true", help="interleave random and named-step runs")
    p.add_argument("--concurrency", type=int, default=1, help="runs at the same time (each its own world and "
                   "operator process; latencies grow with the load)")
    p.add_argument("--stream", action="store_true", help="the operator follows the boxes over the live tmux stream "
                   "(setting tmux_stream); named steps are then killed on the stream's command lines")
    p.add_argument("--extra", action="append", default=[], metavar="POINT=N",
                   help="N more runs of POINT (a named step or 'random'), repeatable (to complete a series)")
    p.add_argument("--summarize", nargs="+", metavar="JSONL",
                   help="print the final JSON line of the runs in these files (this script's output) and exit")
    p.add_argument("--keep", action="store_true", help="keep every run's directory (failed runs are kept)")
    p.add_argument("--workdir", default=str(ROOT / "tmp"), help="where run directories go")
    args = p.parse_args(argv)
    if args.summarize:
        results = [json.loads(line) for f in args.summarize for line in open(f) if line.strip()]
        return summarize([r for r in results if "point" in r], args, ",".join(args.summarize))
    pathlib.Path(args.workdir).mkdir(parents=True, exist_ok=True)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
