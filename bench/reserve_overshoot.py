"""Reserve overshoot: an agent burning fast towards a 20 % reserve; how far past the threshold
(80 % of the 5-hour window) is the window when the box is stopped?

The provider emulator's 5-hour utilization of one account climbs linearly at `--rate` percentage
points per minute from `--start` (default 50 %/ 6 points a minute, "burning fast"). The
subscription has `reserve.fiveHourPercent: 20`. The operator reads usage on its own cadence
(every minute within 10 points of the threshold, sooner when the burn rate predicts the crossing,
never more often than `usage_min_interval_s`) and, at the threshold, stops the box: Esc to the
agent, login file removed, the stop line printed. Overshoot = utilization at the instant the agent
got Esc - 80. Default operator settings are used for the usage cadence.

Usage: .venv/bin/python bench/reserve_overshoot.py [--rate 6] [--start 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentbox_sim.bench_settings import bench_settings  # noqa: E402
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in  # noqa: E402

THRESHOLD = 80.0


async def one_run(rate_per_min: float, start_pct: float) -> dict:
    settings = bench_settings("default", scan_interval_s=5.0, resume_margin_s=1.0)   # default usage cadence
    with tempfile.TemporaryDirectory(prefix="abx-res-", ignore_cleanup_errors=True) as tmp:
        async with World(Path(tmp), settings) as w:
            w.start_operator()
            t0 = time.time()
            reset = utc_in(3 * 3600)

            def util(at: float) -> float:
                return min(100.0, start_pct + rate_per_min * (at - t0) / 60.0)

            w.provider.add_login("tok-a", "acct-a")
            w.provider.set_windows("acct-a", five_hour=(util(t0), reset), weekly=(10.0, utc_in(86400)))

            async def burn() -> None:
                while True:
                    w.provider.set_windows("acct-a", five_hour=(round(util(time.time()), 3), reset),
                                           weekly=(10.0, utc_in(86400)))
                    await asyncio.sleep(0.2)
            burner = asyncio.create_task(burn())
            await w.add_secret("login", "credentials.json", claude_login("tok-a"))
            await w.add_subscription("a", "anthropic", "login", "credentials.json", reserve={"fiveHourPercent": 20})
            await w.add_box("box", "claude-code", "a")
            await w.run_pod("box", [TabSpec("main", fake_agent_argv("claude-code", time.time() + 7200,
                                                                    "--start-working", "--work-seconds", "7200"))])
            budget = (THRESHOLD - start_pct) / rate_per_min * 60 + 120
            await eventually(lambda: any(e["event"] == "interrupted" for e in w.agent_log("box", "main")),
                             budget, every=0.5, what="the reserve stop")
            burner.cancel()
            esc_at = next(e["t"] for e in w.agent_log("box", "main") if e["event"] == "interrupted")
            reads = w.provider.count(path="/api/oauth/usage")
    return {"overshoot_points": round(util(esc_at) - THRESHOLD, 3), "stopped_after_s": round(esc_at - t0, 1),
            "usage_reads": reads}


async def run(ns: argparse.Namespace) -> dict:
    runs = [await one_run(ns.rate, ns.start) for _ in range(ns.runs)]
    over = [r["overshoot_points"] for r in runs]
    return {"rate_points_per_min": ns.rate, "start_percent": ns.start, "threshold_percent": THRESHOLD,
            "runs": runs, "overshoot_max_points": max(over), "overshoot_mean_points": round(sum(over) / len(over), 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=6.0, help="utilization growth, points per minute")
    p.add_argument("--start", type=float, default=50.0, help="utilization at the start, percent")
    p.add_argument("--runs", type=int, default=3)
    ns = p.parse_args()
    result = asyncio.run(run(ns))
    print(f"overshoot past the 80% threshold (points): max {result['overshoot_max_points']}  "
          f"mean {result['overshoot_mean_points']}  runs {[r['overshoot_points'] for r in result['runs']]}")
    print(json.dumps(result))
    return 0 if result["overshoot_max_points"] <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
