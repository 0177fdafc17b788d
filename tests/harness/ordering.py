"""Longest tests first, so that a parallel run (pytest-xdist, `make test`) ends with the short ones.

The suite is wait-bound: most of its wall time is scenario tests waiting for a reset, a grace or a lease
on the real clock (a real tmux, agent CLI or operator process is under test there). Spread over workers,
its wall time is bounded below by the longest test, and a long test handed out last makes a tail in which
one worker runs while the others are idle. Sorting the collected tests by their last measured duration,
longest first (longest-processing-time scheduling), keeps that tail short.

The durations come from `tests/durations.json` (`{node id: seconds}`, tests of a second or more, written by
`hack/durations.py` from a JUnit report: `make durations`). A test missing there (new, or renamed) is
estimated by its tier: a component test as a typical scenario, any other as short. The order changes no
test's outcome: tests share no state (a fresh emulated world per test).
"""

from __future__ import annotations

import json
import pathlib

import pytest

DURATIONS = pathlib.Path(__file__).resolve().parents[1] / "durations.json"
COMPONENT_GUESS_S = 8.0  # a scenario test not measured yet: a reset a few seconds ahead, a settle
OTHER_GUESS_S = 0.05


def _known() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def estimate(item: pytest.Item, known: dict[str, float]) -> float:
    """The expected wall time of `item` in seconds (its last measured duration, else its tier's guess)."""
    if item.nodeid in known:
        return known[item.nodeid]
    return COMPONENT_GUESS_S if item.get_closest_marker("component") else OTHER_GUESS_S


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    known = _known()
    items.sort(key=lambda item: -estimate(item, known))  # stable: equal estimates keep the file order
