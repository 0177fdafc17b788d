"""Table tests of the switches (`controller.domain.box.switch`), by itself: pure, no I/O.

`rotate` leaves the current subscription on a trigger for the best usable one of the rotation group (or says
the group is exhausted, or that the box's subscription is missing); `follow_spec_change` moves a box whose
spec.subscription changed while rotation is off; `complete_pending_switch` finishes a switch a previous
controller left in status.switch.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from controller import constants as C
from controller.domain.box import (
    BoxFacts, Done, InstallLogin, Memory, PatchStatus, PostEvent, SwitchSubscription, TabView,
)
from controller.domain.box.switch import complete_pending_switch, follow_spec_change, rotate
from controller.domain.resume import Phase, limit_key
from controller.domain.rotation import Candidate
from harness.decide_cases import CLAUDE, CODEX, IDLE, NOW, WORKING, limited, observe, ok, sub, tab
from harness.rule_cases import dets, kinds, pass_events, run_rule

pytestmark = pytest.mark.unit

ROTATING = replace(CLAUDE, rotation=True)
LIMIT = limited()
KEY = limit_key(LIMIT)


def refuse(action: Any) -> Any:
    return Done(False) if isinstance(action, (SwitchSubscription, InstallLogin)) else ok(action)


def switches(actions: Any) -> list[tuple[str | None, str, str]]:
    return [(a.old, a.new, a.trigger) for a in actions if isinstance(a, SwitchSubscription)]


# ---------------------------------------------------------------------------------------------- rotate
A10, B30, C20 = sub("sub-a", five=10.0), sub("sub-b", five=30.0), sub("sub-c", five=20.0)
LATER = NOW + timedelta(hours=2)

# id, box, subscriptions, tabs, memory, respond -> switch, current, next, group exhausted, problem, Events
ROTATE = [
    ("a tab limited: to the most headroom", ROTATING, (A10, B30, C20), (tab(LIMIT),), Memory(), ok,
     [("sub-a", "sub-c", "limit")], "sub-c", "sub-a", False, False, [("Normal", "Switched")]),
    ("the current one exhausted: left, no tab limited", ROTATING, (sub("sub-a", "Exhausted", 100.0), B30),
     (tab(IDLE),), Memory(), ok, [("sub-a", "sub-b", "exhausted")], "sub-b", None, False, False,
     [("Normal", "Switched")]),
    ("the current one reserved: left", ROTATING, (sub("sub-a", "Reserved"), B30), (tab(IDLE),), Memory(), ok,
     [("sub-a", "sub-b", "reserve")], "sub-b", None, False, False, [("Normal", "Switched")]),
    ("quiet: stays, the next one named", ROTATING, (A10, B30, C20), (tab(WORKING),), Memory(), ok,
     [], None, "sub-c", False, False, []),
    ("the limit already answered by a switch: no trigger", ROTATING, (A10, B30), (tab(LIMIT),),
     Memory(switched_keys=frozenset({KEY})), ok, [], None, "sub-b", False, False, []),
    ("the login unusable: stays, warned", ROTATING, (A10, B30), (tab(LIMIT),), Memory(), refuse,
     [("sub-a", "sub-b", "limit")], None, "sub-b", False, False, [("Warning", "SwitchFailed")]),
    ("the whole group exhausted: waits, warned", ROTATING,
     (sub("sub-a", "Exhausted", 100.0, until=LATER), sub("sub-b", "Exhausted", 100.0)), (tab(LIMIT),), Memory(), ok,
     [], None, None, True, False, [("Warning", "RotationGroupExhausted")]),
    ("the whole group exhausted, warned before: once", ROTATING, (sub("sub-a", "Exhausted", 100.0),),
     (tab(LIMIT),), Memory(noted=frozenset({"group-exhausted"})), ok, [], None, None, True, False, []),
    ("another provider's subscription is not a member", ROTATING, (A10, sub("sub-b", five=0.0, provider="openai")),
     (tab(LIMIT),), Memory(), ok, [], None, None, True, False, [("Warning", "RotationGroupExhausted")]),
    ("Selected: only the listed ones", replace(ROTATING, rotation_group="Selected", rotation_selected=("sub-b",)),
     (A10, B30, sub("sub-c", five=0.0)), (tab(LIMIT),), Memory(), ok, [("sub-a", "sub-b", "limit")], "sub-b", "sub-a",
     False, False, [("Normal", "Switched")]),
    ("rotation off, a tab limited: stays", CLAUDE, (A10, B30), (tab(LIMIT),), Memory(), ok,
     [], None, None, False, False, []),
    ("rotation off, the subscription missing: a human is asked", CLAUDE, (B30,), (tab(IDLE),), Memory(), ok,
     [], None, None, False, True, [("Warning", C.R_SUBSCRIPTION_NOT_FOUND)]),
    ("rotation off, the subscription missing, said before: once", CLAUDE, (B30,), (tab(IDLE),),
     Memory(noted=frozenset({"missing-sub-a"})), ok, [], None, None, False, True, []),
    ("rotation on, the subscription deleted: left", ROTATING, (B30,), (tab(IDLE),), Memory(), ok,
     [("sub-a", "sub-b", "deleted")], "sub-b", None, False, False, [("Normal", "Switched")]),
]


@pytest.mark.parametrize("box,subs,tabs,mem,respond,switched,current,nxt,exhausted,problem,evts",
                         [c[1:] for c in ROTATE], ids=[c[0] for c in ROTATE])
def test_rotate(box: BoxFacts, subs: tuple[Candidate, ...], tabs: tuple[TabView, ...], mem: Memory, respond: Any,
                switched: list[tuple[str, str, str]], current: str | None, nxt: str | None, exhausted: bool,
                problem: bool, evts: list[tuple[str, str]]) -> None:
    p, _ = run_rule(lambda p: rotate(p, dets(p)), observe(*tabs, box=box, subs=subs), mem, respond)
    assert switches(p.actions) == switched
    assert (p.mem.current, p.mem.next_sub, p.mem.group_exhausted) == (current, nxt, exhausted)
    assert bool(p.mem.sub_problem) == problem and pass_events(p) == evts


def test_a_switch_resumes_the_limited_tabs_on_the_new_login_and_watches_the_others() -> None:
    tabs = (tab(LIMIT, "l"), tab(WORKING, "w"))
    p, _ = run_rule(lambda p: rotate(p, dets(p)), observe(*tabs, box=ROTATING, subs=(A10, B30)))
    rec = p.records["l"]
    assert (rec.phase, rec.resume_at, rec.limit_key, rec.resets_at) == (Phase.RATE_LIMITED, NOW, KEY, None)
    assert rec.message == "Switched to sub-b; resuming" and KEY in p.mem.switched_keys
    assert "w" not in p.records and p.mem.pre_switch == frozenset({"w"})  # its next limit line may be the old one's


@pytest.mark.parametrize("det,kept,resumed", [
    (WORKING, False, False),  # seen working: it runs on the new login
    (IDLE, True, False),      # an idle screen proves nothing yet
    (LIMIT, False, True),     # the old subscription's limit line: answered by the switch, resumed
])
def test_the_first_limit_line_after_a_switch_is_the_old_subscriptions(det: Any, kept: bool, resumed: bool) -> None:
    mem = Memory(current="sub-b", pre_switch=frozenset({"main"}))
    p, _ = run_rule(lambda p: rotate(p, dets(p)), observe(tab(det), box=ROTATING, subs=(A10, B30)), mem)
    assert ("main" in p.mem.pre_switch) == kept and switches(p.actions) == []
    assert ("main" in p.records and p.records["main"].resume_at == NOW) == resumed


@pytest.mark.parametrize("last_input,stop", [(None, (("main", "%main"),)), (NOW - timedelta(seconds=5), ())])
def test_an_agent_that_refuses_another_login_in_flight_is_stopped_unless_a_human_typed(last_input: Any,
                                                                                     stop: tuple[Any, ...]) -> None:
    obs = observe(tab(LIMIT, last_input=last_input), box=replace(CODEX, rotation=True),
                  subs=(sub("sub-a", provider="openai"), sub("sub-b", provider="openai")))
    p, _ = run_rule(lambda p: rotate(p, dets(p)), obs)
    assert [a.stop for a in p.actions if isinstance(a, SwitchSubscription)] == [stop]


# ---------------------------------------------------------------------------------------------- follow_spec_change
SPEC_B = replace(CLAUDE, subscription="sub-b")

# id, box, subscriptions, memory, respond -> switch, current, Events
FOLLOW = [
    ("spec.subscription changed: moved", SPEC_B, (A10, B30), Memory(current="sub-a"), ok,
     [("sub-a", "sub-b", "spec")], "sub-b", [("Normal", C.R_SUBSCRIPTION_CHANGED)]),
    ("rotation on: the rotation's", replace(SPEC_B, rotation=True), (A10, B30), Memory(current="sub-a"), ok,
     [], "sub-a", []),
    ("already there", SPEC_B, (A10, B30), Memory(current="sub-b"), ok, [], "sub-b", []),
    ("the new one is another provider's: stays", SPEC_B, (A10, sub("sub-b", provider="openai")),
     Memory(current="sub-a"), ok, [], "sub-a", []),
    ("the new one does not exist: stays", SPEC_B, (A10,), Memory(current="sub-a"), ok, [], "sub-a", []),
    ("the new login unusable: stays, said by the reconcile", SPEC_B, (A10, B30), Memory(current="sub-a"), refuse,
     [("sub-a", "sub-b", "spec")], "sub-a", []),
]


@pytest.mark.parametrize("box,subs,mem,respond,switched,current,evts", [c[1:] for c in FOLLOW],
                         ids=[c[0] for c in FOLLOW])
def test_follow_spec_change(box: BoxFacts, subs: tuple[Candidate, ...], mem: Memory, respond: Any,
                            switched: list[tuple[str, str, str]], current: str, evts: list[tuple[str, str]]) -> None:
    p, _ = run_rule(lambda p: follow_spec_change(p, dets(p)), observe(tab(LIMIT, "l"), tab(IDLE, "i"), box=box,
                                                                        subs=subs), mem, respond)
    assert switches(p.actions) == switched and p.mem.current == current and pass_events(p) == evts
    if current == "sub-b" and switched:
        assert p.records["l"].resume_at == NOW and p.mem.pre_switch == frozenset({"i"})


@pytest.mark.parametrize("new_state,actions,reserved", [
    ("Reserved", ["SwitchSubscription", "Count", "PostEvent", "RemoveLogin"],
     "Stopping to keep the reserve of your limits"),  # the new one reserved too: its own stop line, no login
    ("Available", ["SwitchSubscription", "Count", "PostEvent"], "old line"),  # lifted later by the reserve
])
def test_a_box_stopped_by_the_reserve_follows_spec_with_the_new_ones_reserve(new_state: str, actions: list[str],
                                                                             reserved: str) -> None:
    obs = observe(tab(IDLE), box=SPEC_B, subs=(A10, sub("sub-b", new_state)))
    p, _ = run_rule(lambda p: follow_spec_change(p, dets(p)), obs, Memory(current="sub-a", reserved="old line"))
    assert kinds(p) == actions and p.mem.reserved == reserved


# ---------------------------------------------------------------------------------------------- complete_pending_switch
def pending(to: str = "sub-b", frm: str = "sub-a", tabs: tuple[str, ...] = ("s", "l", "w")) -> dict[str, Any]:
    return {"to": to, "fromSubscription": frm, "step": "InstallLogin", "tabs": list(tabs), "reason": "limit"}


SWITCH_TABS = (tab(IDLE, "s", at_shell=True), tab(LIMIT, "l"), tab(WORKING, "w"), tab(IDLE, "other"))

# id, box, memory, respond -> InstallLogin target, PatchStatus fields, current, Events, the tabs resumed
COMPLETE = [
    ("none left: nothing", ROTATING, Memory(current="sub-a"), ok, None, None, "sub-a", [], set()),
    ("finished: moved, its stopped tabs resumed", ROTATING, Memory(current="sub-a", pending_switch=pending()), ok,
     "sub-b", (("switch", None), ("subscription", "sub-b")), "sub-b", [("Normal", "Switched")], {"s", "l"}),
    ("the login unusable: given up, stays", ROTATING, Memory(current="sub-a", pending_switch=pending()), refuse,
     "sub-b", (("switch", None),), "sub-a", [("Warning", "SwitchFailed")], set()),
    ("rotation off, spec names another: spec wins", replace(CLAUDE, subscription="sub-c"),
     Memory(current="sub-a", pending_switch=pending()), ok,
     "sub-c", (("switch", None), ("subscription", "sub-c")), "sub-c", [("Normal", "Switched")], {"s", "l"}),
    ("rotation off, spec is where it started: stayed", CLAUDE, Memory(current="sub-a", pending_switch=pending()), ok,
     "sub-a", (("switch", None), ("subscription", "sub-a")), "sub-a", [("Normal", "Switched")], {"s", "l"}),
    ("rotation off, spec is its target: completed as it was", SPEC_B,
     Memory(current="sub-a", pending_switch=pending()), ok,
     "sub-b", (("switch", None), ("subscription", "sub-b")), "sub-b", [("Normal", "Switched")], {"s", "l"}),
]


@pytest.mark.parametrize("box,mem,respond,install,patch,current,evts,resumed", [c[1:] for c in COMPLETE],
                         ids=[c[0] for c in COMPLETE])
def test_complete_pending_switch(box: BoxFacts, mem: Memory, respond: Any, install: str | None,
                                 patch: tuple[Any, ...] | None, current: str, evts: list[tuple[str, str]],
                                 resumed: set[str]) -> None:
    obs = observe(*SWITCH_TABS, box=box, subs=(A10, B30))
    p, got = run_rule(lambda p: complete_pending_switch(p, dets(p)), obs, mem, respond)
    assert [a.subscription for a in p.actions if isinstance(a, InstallLogin)] == ([install] if install else [])
    assert [a.fields for a in p.actions if isinstance(a, PatchStatus)] == ([patch] if patch else [])
    assert p.mem.current == current and pass_events(p) == evts and p.mem.pending_switch is None
    assert {n for n, r in p.records.items() if r.resume_at == NOW and r.phase == Phase.RATE_LIMITED} == resumed
    if resumed:  # the tab stopped at its shell is given the limit it was stopped for, so it is relaunched
        assert got["s"].state.value == "rate_limited" and got["s"].detected_by == "switch"
        assert got["w"] is WORKING and got["other"] is IDLE
    else:
        assert got == dets(p)


def test_a_switch_back_to_where_it_started_says_it_stayed() -> None:
    obs = observe(*SWITCH_TABS, box=CLAUDE, subs=(A10, B30))
    p, _ = run_rule(lambda p: complete_pending_switch(p, dets(p)), obs,
                    Memory(current="sub-a", pending_switch=pending()))
    message = next(a.message for a in p.actions if isinstance(a, PostEvent))
    assert message.startswith("Stayed on sub-a: spec.subscription (rotation is off)")
