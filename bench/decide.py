"""How long one box decision takes (`controller.domain.box.decide`), without any I/O.

Builds observations of a box with `--tabs` tabs in three shapes (all quiet; every tab due for a resume, with
the usage read and the resumes answered; rotation with every tab limited, switched and resumed) and times a
whole pass of decide calls (the replays a pass needs included) `--rounds` times each. The observations and the
answers to the blocking actions are those of tests/test_decide.py (`tests/harness/decide_cases.py`). Prints one line per
shape and a final JSON line: {"tabs", "quiet_us", "resume_pass_us", "rotation_pass_us"} (median microseconds
per pass).

    .venv/bin/python bench/decide.py [--tabs 10] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from controller.domain.box import Memory, Observation  # noqa: E402
from harness.decide_cases import CLAUDE, IDLE, due, limited, observe, run, sub, tab  # noqa: E402 - shared with tests/test_decide.py


def one_pass(obs: Observation, mem: Memory) -> None:
    """A whole pass: every blocking action answered (`harness.decide_cases.ok`), decide replayed until complete."""
    run(obs, mem, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tabs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    names = [f"tab{i}" for i in range(args.tabs)]
    subs = (sub("sub-a", five=10.0), sub("sub-b", five=20.0))
    quiet = observe(*(tab(IDLE, n, screen="screen " + n) for n in names), subs=subs)
    due_obs = observe(*(tab(limited(), n, screen="limit " + n) for n in names), subs=subs)
    records = {n: due(n) for n in names}
    rotation = replace(due_obs, box=replace(CLAUDE, rotation=True),
                       subscriptions=(sub("sub-a", "Exhausted", 100.0), subs[1]))
    shapes: dict[str, tuple[Observation, Memory]] = {
        "quiet_us": (quiet, Memory()), "resume_pass_us": (due_obs, Memory(records=records)),
        "rotation_pass_us": (rotation, Memory(current="sub-a"))}
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
