"""Usage reads over a simulated hour: 50 boxes on 5 subscriptions, windows approaching and crossing
their thresholds. How many usage calls does each subscription cost per minute (near a threshold and
far from one), and how stale are the windows when a box decides (rotation / reserve) from them?

What runs: the controller's own `SubscriptionReader` (one per subscription: cadence from
`controller.domain.subscription.next_read_in`, the login keeper, status patches) and its `UsageCache` /
`UsageReader` over real HTTP against the provider emulator on loopback. Time is simulated: one clock
drives the readers, the emulator and the boxes, and the loop jumps from one wake-up to the next
(an hour takes seconds). The Kubernetes API is an in-memory stand-in (status patches and Secrets).

Boxes: each looks at its subscription's status every `scan_interval_s` (5 s), as the tab watcher does
for rotation and the reserve; staleness = decision instant - `status.readAt`. Windows: each
subscription's 5-hour utilization climbs at its own rate (points/minute) from its own start; at 100 %
it stays until its reset, then starts again from 0. Reserve 20 % (threshold 80 %) on every
subscription. "Near" = within 10 points below a threshold (80 or 100), as the reader counts it.

Printed: per subscription, calls per minute near / far, staleness p50/p95/max near / far; a final
JSON line with every figure.

Usage: .venv/bin/python bench/usage_reads.py [--boxes 50] [--subscriptions 5] [--minutes 60]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import heapq
import json
import statistics
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.providers.readers import UsageCache, UsageReader  # noqa: E402
from controller.runtime import Runtime  # noqa: E402
from controller.service.subscriptions import SubscriptionReader  # noqa: E402
from agentbox_sim.bench_settings import bench_settings  # noqa: E402
from agentbox_sim.provider import ProviderEmulator  # noqa: E402
from agentbox_sim.world import claude_login  # noqa: E402

THRESHOLD = 80.0


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


class MemKube:
    """The few Kube calls the reader makes, in memory."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.status: dict[str, dict[str, Any]] = {}

    async def get_secret_value(self, namespace: str, name: str, key: str) -> tuple[bool, str | None]:
        data = self.secrets.get((namespace, name))
        if data is None:
            return False, None
        return True, data.get(key)

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        cur = self.status.setdefault(name, {})
        for k, v in status.items():
            if v is None:
                cur.pop(k, None)
            else:
                cur[k] = v

    async def patch_status_at(self, plural: str, namespace: str, name: str, status: dict[str, Any],
                              resource_version: str | None) -> dict[str, Any]:
        """The status writer's conditional patch (no other writer here: never a conflict)."""
        await self.patch_status(plural, namespace, name, status)
        return {"metadata": {"name": name, "namespace": namespace}, "status": dict(self.status[name])}

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "namespace": namespace}, "status": dict(self.status.get(name, {}))}

    async def list_custom(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        return []


def trajectory(i: int, n: int) -> tuple[float, float]:
    """(start %, points per minute) of subscription i: from far-and-slow to crossing both thresholds."""
    starts = [20.0, 55.0, 68.0, 74.0, 85.0]
    rates = [0.3, 0.5, 0.4, 0.9, 0.6]
    return starts[i % len(starts)], rates[i % len(rates)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


async def run(ns: argparse.Namespace) -> dict:
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    clock = Clock(t0)
    settings = bench_settings("default")   # the default usage cadence
    emu = ProviderEmulator(now=clock)
    await emu.start()
    kube = MemKube()
    reader = UsageReader(anthropic_base_url=emu.url, openai_base_url=emu.url, attempts=1)
    rt = Runtime(settings=settings, kube=kube, usage=UsageCache(reader), clock=clock)
    subs = [f"s{i}" for i in range(ns.subscriptions)]
    plans: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(subs):
        start, rate = trajectory(i, ns.subscriptions)
        emu.add_login(f"tok-{name}", f"acct-{name}")
        kube.secrets[("default", f"login-{name}")] = {"credentials.json": claude_login(f"tok-{name}")}
        plans[name] = {"start": start, "rate": rate, "reset_after_full_s": 600.0 + 300 * i, "full_at": None,
                       "reset_at": None}

    def util(name: str, now: datetime) -> tuple[float, datetime]:
        p = plans[name]
        minutes = (now - t0).total_seconds() / 60
        base_t, base_u = t0, p["start"]
        if p["reset_at"] is not None and now >= p["reset_at"]:
            base_t, base_u = p["reset_at"], 0.0
            minutes = (now - base_t).total_seconds() / 60
        u = min(100.0, base_u + p["rate"] * minutes)
        if u >= 100.0 and p["full_at"] is None:
            p["full_at"] = now
            p["reset_at"] = now + timedelta(seconds=p["reset_after_full_s"])
        reset = p["reset_at"] if (p["reset_at"] is not None and now < p["reset_at"]) else now + timedelta(hours=4)
        return round(u, 3), reset

    def near(u: float) -> bool:
        return (THRESHOLD - 10 <= u < THRESHOLD) or (100 - 10 <= u < 100)

    body = {name: {"metadata": {"name": name, "namespace": "default", "generation": 1},
                   "spec": {"provider": "anthropic",
                            "credentialsSecretRef": {"name": f"login-{name}", "key": "credentials.json"},
                            "reserve": {"fiveHourPercent": 20}}} for name in subs}
    readers = {name: SubscriptionReader(rt, "default", name, lambda *a: None) for name in subs}
    end = t0 + timedelta(minutes=ns.minutes)
    boxes = [(f"b{j}", subs[j % len(subs)]) for j in range(ns.boxes)]
    heap: list[tuple[datetime, int, str, str]] = []
    seq = 0
    for name in subs:
        heapq.heappush(heap, (t0, seq, "read", name))
        seq += 1
    for j, (box, sub) in enumerate(boxes):
        heapq.heappush(heap, (t0 + timedelta(seconds=1 + (j * 5.0 / len(boxes))), seq, box, sub))
        seq += 1
    calls: dict[str, dict[str, int]] = {s: {"near": 0, "far": 0} for s in subs}
    minutes_in: dict[str, dict[str, set[int]]] = {s: {"near": set(), "far": set()} for s in subs}
    stale: dict[str, dict[str, list[float]]] = {s: {"near": [], "far": []} for s in subs}
    decisions = 0
    while heap:
        at, _, kind, name = heapq.heappop(heap)
        if at > end:
            break
        clock.now = at
        for s in subs:   # the provider's windows at this instant
            u, reset = util(s, at)
            emu.set_windows(f"acct-{s}", five_hour=(u, reset), weekly=(30.0, t0 + timedelta(days=3)))
        if kind == "read":
            before = rt.usage.calls.get(("default", name), 0)
            u_now, _ = util(name, at)
            b = dict(body[name], status=dict(kube.status.get(name, {})))
            delay = await readers[name].tick(b)
            made = rt.usage.calls.get(("default", name), 0) - before
            zone = "near" if near(u_now) else "far"
            calls[name][zone] += made
            heapq.heappush(heap, (at + timedelta(seconds=max(0.5, delay)), seq, "read", name))
        else:
            st = kube.status.get(name, {})
            u_now, _ = util(name, at)
            zone = "near" if near(u_now) else "far"
            minutes_in[name][zone].add(int((at - t0).total_seconds() // 60))
            if st.get("readAt"):
                read_at = datetime.fromisoformat(st["readAt"].replace("Z", "+00:00"))
                stale[name][zone].append((at - read_at).total_seconds())
                decisions += 1
            heapq.heappush(heap, (at + timedelta(seconds=settings.scan_interval_s), seq, kind, name))
        seq += 1
    await reader.close()
    await emu.stop()

    per_sub = {}
    for s in subs:
        row: dict[str, Any] = {"start_percent": plans[s]["start"], "rate_points_per_min": plans[s]["rate"],
                               "crossed_100_at_min": (round((plans[s]["full_at"] - t0).total_seconds() / 60, 1)
                                                      if plans[s]["full_at"] else None),
                               "final_percent": util(s, end)[0], "state": kube.status.get(s, {}).get("state")}
        for zone in ("near", "far"):
            mins = len(minutes_in[s][zone])
            row[f"{zone}_minutes"] = mins
            row[f"{zone}_calls"] = calls[s][zone]
            row[f"{zone}_calls_per_min"] = round(calls[s][zone] / mins, 3) if mins else None
            vals = stale[s][zone]
            row[f"{zone}_staleness_p50_s"] = round(pct(vals, 50), 1) if vals else None
            row[f"{zone}_staleness_p95_s"] = round(pct(vals, 95), 1) if vals else None
            row[f"{zone}_staleness_max_s"] = round(max(vals), 1) if vals else None
        per_sub[s] = row
    all_near = [v for s in subs for v in stale[s]["near"]]
    all_far = [v for s in subs for v in stale[s]["far"]]
    near_min = sum(len(minutes_in[s]["near"]) for s in subs)
    far_min = sum(len(minutes_in[s]["far"]) for s in subs)
    return {
        "boxes": ns.boxes, "subscriptions": ns.subscriptions, "simulated_minutes": ns.minutes,
        "usage_calls_total": sum(calls[s]["near"] + calls[s]["far"] for s in subs),
        "usage_calls_by_provider_emulator": emu.count(path="/api/oauth/usage"),
        "calls_per_sub_per_min_near": round(sum(calls[s]["near"] for s in subs) / near_min, 3) if near_min else None,
        "calls_per_sub_per_min_far": round(sum(calls[s]["far"] for s in subs) / far_min, 3) if far_min else None,
        "decisions": decisions,
        "staleness_near_p50_s": round(pct(all_near, 50), 1) if all_near else None,
        "staleness_near_p95_s": round(pct(all_near, 95), 1) if all_near else None,
        "staleness_near_max_s": round(max(all_near), 1) if all_near else None,
        "staleness_far_p50_s": round(pct(all_far, 50), 1) if all_far else None,
        "staleness_far_p95_s": round(pct(all_far, 95), 1) if all_far else None,
        "staleness_far_max_s": round(max(all_far), 1) if all_far else None,
        "settings": {"usage_interval_s": settings.usage_interval_s, "usage_near_interval_s": settings.usage_near_interval_s,
                     "usage_min_interval_s": settings.usage_min_interval_s, "scan_interval_s": settings.scan_interval_s},
        "per_subscription": per_sub,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--boxes", type=int, default=50)
    p.add_argument("--subscriptions", type=int, default=5)
    p.add_argument("--minutes", type=float, default=60.0)
    ns = p.parse_args()
    result = asyncio.run(run(ns))
    print(f"{'sub':4} {'start':>5} {'rate':>5} {'full@':>6} {'near min':>8} {'calls/min near':>14} "
          f"{'far min':>7} {'calls/min far':>13} {'stale p95 near':>14} {'stale p95 far':>13} {'max':>6}")
    for s, r in result["per_subscription"].items():
        print(f"{s:4} {r['start_percent']:5.0f} {r['rate_points_per_min']:5.1f} {str(r['crossed_100_at_min']):>6} "
              f"{r['near_minutes']:8d} {str(r['near_calls_per_min']):>14} {r['far_minutes']:7d} "
              f"{str(r['far_calls_per_min']):>13} {str(r['near_staleness_p95_s']):>14} "
              f"{str(r['far_staleness_p95_s']):>13} "
              f"{str(max(x for x in (r['near_staleness_max_s'], r['far_staleness_max_s']) if x is not None)):>6}")
    print(f"calls per subscription per minute: near {result['calls_per_sub_per_min_near']}, "
          f"far {result['calls_per_sub_per_min_far']}; staleness at {result['decisions']} decisions: near p50/p95/max "
          f"{result['staleness_near_p50_s']}/{result['staleness_near_p95_s']}/{result['staleness_near_max_s']} s, "
          f"far {result['staleness_far_p50_s']}/{result['staleness_far_p95_s']}/{result['staleness_far_max_s']} s")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
