"""Rotation reaction time: a limit line appears in a working tab -> the box runs on the next
subscription and that tab got `continue`.

N boxes (default 10) each start on their own subscription, with rotation `All`. Each tab's
scripted Claude Code works, then prints its 5-hour limit line at a planned instant (spread over
`--spread` seconds); its subscription's usage says 100 % from that instant on. Spare
subscriptions with headroom are in the group. The controller must notice the line (at its next
scan: `scan_interval_s`), switch the box (login written into the box Secret and the live file)
and send `continue`, which the fake agent accepts only on another account's login.

Printed: per-box reaction (limit line -> `continue` submitted on the new account), p50/p99/max,
switches, and a final JSON line. Exit 1 if a box did not switch or got `continue` twice.

Usage: .venv/bin/python bench/rotation_reaction.py [--boxes 10] [--spares 3] [--spread 30] [--scan 5] [--stream | --polling]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in  # noqa: E402
from tests.harness.world_fixtures import FAST  # noqa: E402


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


async def run(ns: argparse.Namespace) -> dict:
    settings = FAST.model_copy(update={"scan_interval_s": ns.scan, "usage_interval_s": 60.0,
                                       "tmux_stream": ns.stream})
    with tempfile.TemporaryDirectory(prefix="abx-rot-", ignore_cleanup_errors=True) as tmp:
        async with World(Path(tmp), settings) as w:
            w.start_operator()
            for i in range(ns.spares):
                w.provider.add_login(f"tok-s{i}", f"acct-s{i}")
                w.provider.set_windows(f"acct-s{i}", five_hour=(10.0 + i, utc_in(7200)), weekly=(5.0, utc_in(86400)))
                await w.add_secret(f"login-s{i}", "credentials.json", claude_login(f"tok-s{i}"))
                await w.add_subscription(f"s{i}", "anthropic", f"login-s{i}", "credentials.json")
            start = time.time() + 10 + ns.boxes * 0.6
            plan = {}
            for b in range(ns.boxes):
                w.provider.add_login(f"tok-b{b}", f"acct-b{b}")
                w.provider.set_windows(f"acct-b{b}", five_hour=(60.0, utc_in(7200)), weekly=(5.0, utc_in(86400)))
                await w.add_secret(f"login-b{b}", "credentials.json", claude_login(f"tok-b{b}"))
                await w.add_subscription(f"b{b}", "anthropic", f"login-b{b}", "credentials.json")
                limit_at = start + ns.spread * b / max(1, ns.boxes - 1)
                plan[f"box{b}"] = (f"b{b}", limit_at)
                await w.add_box(f"box{b}", "claude-code", f"b{b}",
                                whenAgentStops={"resumeAfterReset": True, "rotation": {"enabled": True}})
                await w.run_pod(f"box{b}", [TabSpec("main", fake_agent_argv(
                    "claude-code", time.time() + 7200, "--start-working", "--work-seconds", "3600",
                    "--limited-token", f"tok-b{b}", "--limit-at", f"{limit_at:.3f}"))])

            async def exhaust_on_time() -> None:
                for box, (sub, at) in sorted(plan.items(), key=lambda kv: kv[1][1]):
                    await asyncio.sleep(max(0.0, at - time.time()))
                    w.provider.set_windows(f"acct-{sub}", five_hour=(100.0, utc_in(7200)), weekly=(5.0, utc_in(86400)))
            exhauster = asyncio.create_task(exhaust_on_time())

            def done() -> bool:
                return all(any(e["event"] == "submit" for e in w.agent_log(b, "main")) for b in plan)
            try:
                await eventually(done, ns.spread + 60 + ns.scan * 3, every=0.5, what="every box resumed")
            except TimeoutError:
                pass
            await asyncio.sleep(2)
            exhauster.cancel()
            reactions, failures, switches = [], [], 0
            for box, (sub, at) in plan.items():
                log = w.agent_log(box, "main")
                limit = next((e["t"] for e in log if e["event"] == "limit"), None)
                subs = [e for e in log if e["event"] == "submit"]
                switched = [e for e in w.events(box) if e["reason"] == "Switched"]
                switches += len(switched)
                if limit is None or len(subs) != 1 or not switched or subs[0].get("token") == f"tok-{sub}":
                    failures.append(box)
                    continue
                reactions.append(subs[0]["t"] - limit)
    result = {
        "boxes": ns.boxes, "tmux_stream": ns.stream, "scan_interval_s": ns.scan, "spread_s": ns.spread, "switches": switches,
        "failures": failures, "reaction_p50_s": round(pct(reactions, 50), 3) if reactions else None,
        "reaction_p99_s": round(pct(reactions, 99), 3) if reactions else None,
        "reaction_max_s": round(max(reactions), 3) if reactions else None,
        "reaction_mean_s": round(statistics.mean(reactions), 3) if reactions else None,
    }
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--boxes", type=int, default=10)
    p.add_argument("--spares", type=int, default=3)
    p.add_argument("--spread", type=float, default=30.0)
    p.add_argument("--scan", type=float, default=5.0, help="scan_interval_s of the operator")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--stream", dest="stream", action="store_true", default=True,
                      help="follow tmux over the live stream (settings.tmux_stream; default)")
    mode.add_argument("--polling", dest="stream", action="store_false", help="poll every scan interval instead")
    ns = p.parse_args()
    result = asyncio.run(run(ns))
    print(f"reaction limit line -> continue on the new account (s): p50 {result['reaction_p50_s']}  "
          f"p99 {result['reaction_p99_s']}  max {result['reaction_max_s']}; switches {result['switches']}; "
          f"failures {result['failures']}")
    print(json.dumps(result))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
