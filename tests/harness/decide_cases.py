"""Builders of box decisions for table tests and benchmarks (`controller.domain.box.decide`): tabs,
detections, subscriptions, observations, memories, a responder that answers every blocking action, and
`run`, which runs one pass the way the watcher does (a blocking action's result fed to the next `decide`).

Shared by tests/test_decide.py and bench/decide.py (which puts tests/ on its path); the product never
imports it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from controller.domain.box import (
    BLOCKING, BoxDecision, BoxFacts, Done, InstallLogin, Memory, Observation, Performed, PostEvent, ReadStructured,
    ReadUsage, RunJournal, SendContinue, StructuredRead, SwitchSubscription, TabView, UsageRead, decide,
)
from controller.domain.podstate import ContainerView
from controller.domain.resume import Phase, Step, TabRecord, limit_key
from controller.domain.rotation import Candidate
from controller.domain.types import Detection, LimitKind, TabState, Usage, Window

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=timezone.utc)
CLAUDE = BoxFacts("claude-code", "sub-a", provider="anthropic", continue_text="continue")
CODEX = BoxFacts("codex", "sub-a", provider="openai", restarts=True, continue_text="continue", stop_to_switch=True)
RUNNING = ContainerView(True, "ContainerRunning", "")


def limited(resets_at: datetime | None = NOW - timedelta(minutes=1), **kw: Any) -> Detection:
    base = dict(kind=LimitKind.USAGE, resets_at=resets_at, window="five_hour", prompt_text="",
                evidence="You've hit your limit", detected_by="pattern:claude-code/hit-your-limit")
    base.update(kw)
    return Detection(TabState.RATE_LIMITED, **base)  # type: ignore[arg-type]


IDLE = Detection(TabState.IDLE, prompt_text="", detected_by="pattern:idle")
WORKING = Detection(TabState.WORKING, detected_by="pattern:working")


def tab(det: Detection, name: str = "main", last_input: datetime | None = None, at_shell: bool = False,
        screen: str = "screen") -> TabView:
    return TabView(name, "@" + name, "%" + name, at_shell, screen, det, last_input)


def sub(name: str, state: str = "Available", five: float | None = 10.0, provider: str = "anthropic",
        until: datetime | None = None) -> Candidate:
    return Candidate(name, provider, state, five_hour=five, weekly=5.0, until=until)


def observe(*tabs: TabView, box: BoxFacts = CLAUDE, subs: tuple[Candidate, ...] = (sub("sub-a"),),
            **kw: Any) -> Observation:
    return Observation(box=box, pod=RUNNING, session=True, tabs=tabs, subscriptions=subs, **kw)


def usage(percent: float, resets_at: datetime | None = NOW + timedelta(hours=4)) -> Usage:
    return Usage({"five_hour": Window("five_hour", percent, resets_at)}, read_at=NOW)


def due(name: str = "main", det: Detection | None = None) -> TabRecord:
    """A tab whose limit was detected on an earlier pass and whose resume instant has passed."""
    det = det or limited()
    return TabRecord(name, Phase.RATE_LIMITED, limit_key=limit_key(det), resets_at=det.resets_at,
                     resume_at=NOW - timedelta(seconds=5), window="five_hour", detected_by=det.detected_by)


Responder = Callable[[Any], Any]


def ok(action: Any) -> Any:
    """Every blocking action succeeds: usage under 100 %, logins install, keys move the screen."""
    if isinstance(action, ReadUsage):
        return UsageRead(usage(20.0), NOW, action.provider)
    if isinstance(action, ReadStructured):
        return StructuredRead(None)
    if isinstance(action, (InstallLogin, SwitchSubscription)):
        return Done(True)
    if isinstance(action, SendContinue):
        return tuple(Performed(t, True, NOW, Step.ENTER, text=action.text) for t, _ in action.tabs)
    if isinstance(action, RunJournal):
        return Performed(action.tab, True, NOW, Step.ENTER, text=action.journal.text or "")
    raise AssertionError(action)


def run(obs: Observation, mem: Memory = Memory(), respond: Responder = ok, now: datetime = NOW,
        check: bool = True, cfg: Any = None) -> tuple[BoxDecision, list[BoxDecision]]:
    """One pass: decide, answer the blocking actions, decide again until complete. Returns the last decision
    and every intermediate one (the write-ahead snapshots). `check`: assert the replay property the executor
    relies on at every step (off in bench/decide.py, which times the decisions only). `cfg`: the
    `DecideConfig` (default: decide's)."""
    results: dict[Any, Any] = {}
    steps: list[BoxDecision] = []
    for _ in range(12):
        d = decide(replace(obs, results=dict(results)), mem, now, cfg)
        if check and steps:  # the replay repeats what was performed (the executor raises ReplayMismatch otherwise)
            assert d.actions[:len(steps[-1].actions)] == steps[-1].actions, (steps[-1].actions, d.actions)
        if check and not d.complete:  # nothing follows the actions that wait for a result
            waiting = [i for i, a in enumerate(d.actions) if isinstance(a, BLOCKING) and a not in results]
            assert waiting and waiting == list(range(waiting[0], len(d.actions))), d.actions
        steps.append(d)
        if d.complete:
            return d, steps
        for action in d.actions:
            if isinstance(action, BLOCKING) and action not in results:
                results[action] = respond(action)
    raise AssertionError("the decision never completed")


def events(d: BoxDecision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in d.actions if isinstance(a, PostEvent)]


def cond(d: BoxDecision, type_: str) -> dict[str, Any]:
    assert d.status is not None
    return next(c for c in d.status.conditions if c["type"] == type_)
