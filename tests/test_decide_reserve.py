"""Table tests of the reserve (`controller.domain.box.reserve`), by itself: pure, no I/O.

`apply_reserve` stops a box whose subscription is Reserved (Esc to the running agents, the login file
removed, the stop line printed), stops once the agents started since in tabs that were at their shell, and at
the lift restores the login and resumes the tabs it stopped; `stop_line` words the stop.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from controller.domain.box import Count, Done, InstallLogin, Memory, Performed, Reserve, RunJournal, TabView
from controller.domain.box.reserve import apply_reserve, stop_line
from controller.domain.resume import Phase, Step, TabRecord
from controller.domain.rotation import Candidate
from controller.domain.types import Detection, TabState
from harness.decide_cases import IDLE, NOW, WORKING, limited, observe, ok, sub, tab
from harness.rule_cases import dets, kinds, pass_events, run_rule

pytestmark = pytest.mark.unit

UNKNOWN = Detection(TabState.UNKNOWN)
RESERVED = sub("sub-a", "Reserved", five=95.0, until=NOW + timedelta(hours=5))
AVAILABLE = sub("sub-a")
RESERVES = {"sub-a": Reserve(five_hour=10)}
LINE = "Stopping to keep 10% of your 5-hour limit (reserved until 2026-03-02 17:00 UTC)"
STOPPED = {"w": TabRecord("w", stopped_by_reserve=True), "i": TabRecord("i", stopped_by_reserve=True)}


def stopped(*names: str) -> dict[str, TabRecord]:
    return {n: TabRecord(n, stopped_by_reserve=True) for n in names}


def restore(installed: bool = True) -> Any:
    def respond(action: Any) -> Any:
        if isinstance(action, InstallLogin):
            assert action.why == "restore"
            return Done(installed)
        return ok(action)
    return respond


# id, tabs, subscription, memory, respond -> actions, Events, Memory.reserved, reserve_pending, stopped tabs
CASES = [
    ("not reserved: nothing", (tab(WORKING, "w"),), AVAILABLE, Memory(), ok,
     [], [], None, frozenset(), set()),
    ("reserved: Esc to the running agents, login removed, the line printed",
     (tab(WORKING, "w"), tab(IDLE, "i"), tab(UNKNOWN, "u"), tab(limited(), "l"), tab(IDLE, "s", at_shell=True)),
     RESERVED, Memory(), ok,
     ["PressKey"] * 4 + ["RemoveLogin"] + ["PrintNotice"] * 5 + ["Count", "PostEvent"], [("Warning", "ReserveReached")],
     LINE, frozenset({"s"}), {"w", "u", "l"}),
    ("reserved and stopped already: nothing again", (tab(WORKING, "w"),), RESERVED,
     Memory(reserved=LINE, records=stopped("w")), ok, [], [], LINE, frozenset(), {"w"}),
    ("a tab at its shell when stopped now works: Esc once", (tab(WORKING, "s"), tab(WORKING, "w")), RESERVED,
     Memory(reserved=LINE, reserve_pending=frozenset({"s"}), records=stopped("w")), ok,
     ["PressKey"], [], LINE, frozenset(), {"s", "w"}),
    ("a tab at its shell when stopped, not painted yet: waits", (tab(UNKNOWN, "s"),), RESERVED,
     Memory(reserved=LINE, reserve_pending=frozenset({"s"})), ok, [], [], LINE, frozenset({"s"}), set()),
    ("lifted: login restored, the stopped idle tab resumed, the working one left alone",
     (tab(WORKING, "w"), tab(IDLE, "i"), tab(IDLE, "x")), AVAILABLE, Memory(reserved=LINE, records=STOPPED),
     restore(), ["InstallLogin", "PostEvent", "RunJournal", "PostEvent"],
     [("Normal", "ReserveLifted"), ("Normal", "Resumed")], None, frozenset(), set()),
    ("lifted, a human typed in the stopped tab: restored, not resumed",
     (tab(IDLE, "i", last_input=NOW - timedelta(seconds=5)),), AVAILABLE, Memory(reserved=LINE, records=stopped("i")),
     restore(), ["InstallLogin", "PostEvent"], [("Normal", "ReserveLifted")], None, frozenset(), set()),
    ("lifted, the login cannot be installed: still reserved", (tab(IDLE, "i"),), AVAILABLE,
     Memory(reserved=LINE, records=stopped("i")), restore(False), ["InstallLogin"], [], LINE, frozenset(), {"i"}),
    ("the subscription is gone: lifted", (tab(IDLE, "i"),), sub("sub-b"), Memory(reserved=LINE, records=stopped("i")),
     restore(), ["InstallLogin", "PostEvent", "RunJournal", "PostEvent"],
     [("Normal", "ReserveLifted"), ("Normal", "Resumed")], None, frozenset(), set()),
]


@pytest.mark.parametrize("tabs,subscription,mem,respond,actions,evts,reserved,pending,stopped_tabs",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_apply_reserve(tabs: tuple[TabView, ...], subscription: Candidate, mem: Memory, respond: Any,
                       actions: list[str], evts: list[tuple[str, str]], reserved: str | None, pending: frozenset[str],
                       stopped_tabs: set[str]) -> None:
    obs = observe(*tabs, subs=(subscription,), reserves=RESERVES)
    p, _ = run_rule(lambda p: apply_reserve(p, dets(p)), obs, mem, respond)
    assert kinds(p) == actions and pass_events(p) == evts
    assert p.mem.reserved == reserved and p.mem.reserve_pending == pending
    assert {n for n, r in p.records.items() if r.stopped_by_reserve} == stopped_tabs
    assert all(r.journal is None for r in p.records.values())  # a restore's journal is closed by its outcome


def test_the_stop_counts_its_window_and_resumes_with_the_agents_continue() -> None:
    obs = observe(tab(WORKING, "w"), subs=(RESERVED,), reserves={"sub-a": Reserve(weekly=20)})
    p, _ = run_rule(lambda p: apply_reserve(p, dets(p)), obs)
    assert [a.labels for a in p.actions if isinstance(a, Count)] == [("$ns", "sub-a", "weekly")]
    lifted = replace(obs, subscriptions=(AVAILABLE,))
    q, _ = run_rule(lambda p: apply_reserve(p, dets(p)), lifted, p.mem,
                    lambda a: Performed(a.tab, True, NOW, Step.ENTER, text="continue") if isinstance(a, RunJournal)
                    else restore()(a))
    assert kinds(q) == ["InstallLogin", "PostEvent"]  # a working agent stopped by Esc is not resumed by a key


@pytest.mark.parametrize("reserve,five,until,line", [
    (Reserve(five_hour=10), 95.0, None, "Stopping to keep 10% of your 5-hour limit"),
    (Reserve(five_hour=10), 89.0, None, "Stopping to keep the reserve of your limits"),  # 5-hour not the cause
    (Reserve(five_hour=10, weekly=20), 50.0, None, "Stopping to keep 20% of your weekly limit"),
    (Reserve(five_hour=12.5), 90.0, None, "Stopping to keep 12.5% of your 5-hour limit"),
    (Reserve(five_hour=10.0), 95.0, None, "Stopping to keep 10% of your 5-hour limit"),  # a whole float: no ".0"
    (Reserve(weekly=20), None, NOW + timedelta(days=2),
     "Stopping to keep 20% of your weekly limit (reserved until 2026-03-04 12:00 UTC)"),
    (Reserve(), 100.0, None, "Stopping to keep the reserve of your limits"),
])
def test_stop_line(reserve: Reserve, five: float | None, until: Any, line: str) -> None:
    cand = Candidate("sub-a", "anthropic", "Reserved", five_hour=five, until=until)
    p, got = run_rule(lambda p: stop_line(p, cand), observe(reserves={"sub-a": reserve}))
    assert got == line and p.actions == []


def test_a_tab_stopped_and_limited_is_resumed_at_the_lift_with_a_journal() -> None:
    obs = observe(tab(limited(), "l"), subs=(AVAILABLE,))
    seen: list[RunJournal] = []

    def respond(action: Any) -> Any:
        if isinstance(action, RunJournal):
            seen.append(action)
            return Performed(action.tab, True, NOW, Step.ENTER, text="continue")
        return restore()(action)

    p, _ = run_rule(lambda p: apply_reserve(p, dets(p)), obs, Memory(reserved=LINE, records=stopped("l")), respond)
    assert [(a.tab, a.why, a.journal.for_key, a.journal.text) for a in seen] == [("l", "restore", None, "continue")]
    assert p.records["l"].phase == Phase.UNKNOWN and not p.records["l"].stopped_by_reserve
