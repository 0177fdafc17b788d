"""Run one rule of the box decision by itself (`controller.domain.box.<module>`), for the table tests of its
module: a `Pass` built from an observation and a memory, the rule replayed with the results of its blocking
actions the way `decide` replays a pass (`harness.decide_cases.run`).

Pure: no emulator, no clock (`NOW` of `harness.decide_cases`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, TypeVar

from controller.domain.box import BLOCKING, DecideConfig, Memory, Observation
from controller.domain.box.passstate import Blocked, Pass
from controller.domain.types import Detection
from harness.decide_cases import NOW, Responder, ok

T = TypeVar("T")


def run_rule(rule: Callable[[Pass], T], obs: Observation, mem: Memory = Memory(), respond: Responder = ok,
             now: datetime = NOW, cfg: DecideConfig | None = None) -> tuple[Pass, T]:
    """The pass after `rule` ran to its end (every blocking action answered by `respond`) and what it returned."""
    results: dict[Any, Any] = {}
    for _ in range(12):
        p = Pass(replace(obs, results=dict(results)), mem, now, cfg or DecideConfig())
        try:
            return p, rule(p)
        except Blocked:
            pass
        waiting = [a for a in p.actions if isinstance(a, BLOCKING) and a not in results]
        assert waiting, "blocked without a blocking action"
        for action in waiting:
            results[action] = respond(action)
    raise AssertionError("the rule never completed")


def dets(p: Pass) -> dict[str, Detection]:
    """The detections of the pass's tabs by name (what `decide` hands the rules after the tabs were read)."""
    return {t.name: t.detection for t in p.obs.tabs or ()}


def kinds(p: Pass) -> list[str]:
    """The pass's actions by type name, in order."""
    return [type(a).__name__ for a in p.actions]


def pass_events(p: Pass) -> list[tuple[str, str]]:
    """(type, reason) of the Events the pass posted, in order."""
    return [(a.type, a.reason) for a in p.actions if type(a).__name__ == "PostEvent"]


def condition(conds: Any, type_: str) -> dict[str, Any] | None:
    """The condition of `type_` among `conds`, or None."""
    return next((c for c in conds if c.get("type") == type_), None)
