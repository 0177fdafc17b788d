"""How long one box decision takes (`controller.domain.box.decide`), without any I/O.

Builds observations of a box with `--tabs` tabs in three shapes (all quiet; every tab due for a resume, with
the usage read and the resumes answered; rotation with every tab limited, switched and resumed) and times a
whole pass of decide calls (the replays a pass needs included) `--rounds` times each. Prints one line per
shape and a final JSON line: {"tabs", "quiet_us", "resume_pass_us", "rotation_pass_us"} (median microseconds
per pass).

    .venv/bin/python bench/decide.py [--tabs 10] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from controller.domain.box import (
    BLOCKING, BoxFacts, Done, InstallLogin, Memory, Observation, Performed, ReadStructured, ReadUsage, RunJournal, SendContinue,
    StructuredRead, SwitchSubscription, TabView, UsageRead, decide,
)
from controller.domain.podstate import ContainerView
from controller.domain.resume import Phase, TabRecord, limit_key
from controller.domain.rotation import Candidate
from controller.domain.types import Detection, LimitKind, TabState, Usage, Window

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def _answer(action: Any) -> Any:
    if isinstance(action, ReadUsage):
        return UsageRead(Usage({"five_hour": Window("five_hour", 10.0, NOW + timedelta(hours=5))}), NOW)
    if isinstance(action, ReadStructured):
        return StructuredRead(None)
    if isinstance(action, (InstallLogin, SwitchSubscription)):
        return Done(True)
    if isinstance(action, SendContinue):
        return tuple(Performed(t, True, "sent", NOW) for t, _ in action.tabs)
    if isinstance(action, RunJournal):
        return Performed(action.tab, True, "done", NOW)
    raise TypeError(action)


def one_pass(obs: Observation, mem: Memory) -> None:
    results: dict[Any, Any] = {}
    while True:
        d = decide(replace(obs, results=dict(results)), mem, NOW)
        if d.complete:
            return
        for a in d.actions:
            if isinstance(a, BLOCKING) and a not in results:
                results[a] = _answer(a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tabs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    limited = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, NOW - timedelta(minutes=1), "five_hour",
                        prompt_text="", evidence="You've hit your limit", detected_by="pattern:x")
    idle = Detection(TabState.IDLE, prompt_text="", detected_by="pattern:idle")
    names = [f"tab{i}" for i in range(args.tabs)]
    box = BoxFacts("claude-code", "a", provider="anthropic")
    subs = (Candidate("a", "anthropic", "Available", 10.0, 5.0), Candidate("b", "anthropic", "Available", 20.0, 5.0))
    base = Observation(box=box, pod=ContainerView(True, "ContainerRunning", ""), session=True, subscriptions=subs)
    quiet = replace(base, tabs=tuple(TabView(n, "@" + n, "%" + n, False, "screen " + n, idle) for n in names))
    due = replace(base, tabs=tuple(TabView(n, "@" + n, "%" + n, False, "limit " + n, limited) for n in names))
    records = {n: TabRecord(n, Phase.RATE_LIMITED, limit_key=limit_key(limited), resets_at=limited.resets_at,
                            resume_at=NOW - timedelta(seconds=5)) for n in names}
    rotation = replace(due, box=replace(box, rotation=True),
                       subscriptions=(Candidate("a", "anthropic", "Exhausted", 100.0, 5.0), subs[1]))
    shapes = {"quiet_us": (quiet, Memory()), "resume_pass_us": (due, Memory(records=records)),
              "rotation_pass_us": (rotation, Memory(current="a"))}
    out: dict[str, Any] = {"tabs": args.tabs}
    for key, (obs, mem) in shapes.items():
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            one_pass(obs, mem)
            times.append((time.perf_counter() - t0) * 1e6)
        out[key] = round(statistics.median(times), 1)
        print(f"{key}: median {out[key]} us, p99 {sorted(times)[int(len(times) * 0.99) - 1]:.1f} us")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
