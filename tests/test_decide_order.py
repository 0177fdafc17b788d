"""The order of the rules in one pass (`controller.domain.box.decision._decide`), table-tested through `decide`:
pure, no I/O. Each row is a box where two neighbouring rules would decide differently in the other order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controller import constants as C
from controller.domain.box import Memory, Observation, ReadStructured, ReadUsage, StructuredRead
from harness.decide_cases import CLAUDE, IDLE, NOW, due, events, limited, observe, ok, run, sub, tab, usage

pytestmark = pytest.mark.unit

ROTATING = replace(CLAUDE, rotation=True)
SWITCH_LEFT = {"to": "sub-b", "fromSubscription": "sub-a", "step": "InstallLogin", "tabs": ["main"], "reason": "x"}


def full_usage(action: Any) -> Any:
    """The agent's files say the account is at 100 %: an idle screen is limited (structured before planning)."""
    if isinstance(action, ReadStructured):
        return StructuredRead(usage(100.0), "statusline")
    return ok(action)


# id, observation, memory, respond -> action types present, absent, Events present, absent
ORDER = [
    ("rotation before the reserve: a reserved subscription is left, the box not stopped",
     observe(tab(IDLE), box=ROTATING, subs=(sub("sub-a", "Reserved"), sub("sub-b"))), Memory(), ok,
     {"SwitchSubscription"}, {"RemoveLogin", "PressKey"}, {("Normal", "Switched")}, {("Warning", "ReserveReached")}),
    ("the reserve before the tabs: a box it stops resumes nothing",
     observe(tab(limited()), subs=(sub("sub-a", "Reserved"),)), Memory(records={"main": due()}), ok,
     {"RemoveLogin"}, {"ReadUsage", "SendContinue"}, {("Warning", "ReserveReached")}, {("Normal", "Resumed")}),
    ("spec followed before rotation's checks: the old subscription missing is not reported",
     observe(tab(IDLE), box=replace(CLAUDE, subscription="sub-b"), subs=(sub("sub-b"),)), Memory(current="sub-a"), ok,
     {"SwitchSubscription"}, set(), {("Normal", C.R_SUBSCRIPTION_CHANGED)}, {("Warning", C.R_SUBSCRIPTION_NOT_FOUND)}),
    ("the switch left unfinished before spec is followed: one move, no second switch",
     observe(tab(IDLE), box=replace(CLAUDE, subscription="sub-b"), subs=(sub("sub-a"), sub("sub-b"))),
     Memory(current="sub-a", pending_switch=SWITCH_LEFT), ok,
     {"InstallLogin", "PatchStatus"}, {"SwitchSubscription"}, {("Normal", "Switched")},
     {("Normal", C.R_SUBSCRIPTION_CHANGED)}),
    ("structured usage before the tabs: an idle screen on an exhausted account is limited",
     observe(tab(IDLE)), Memory(), full_usage, {"ReadStructured"}, set(), {("Normal", "LimitDetected")}, set()),
]


@pytest.mark.parametrize("obs,mem,respond,present,absent,evts,no_evts", [c[1:] for c in ORDER],
                         ids=[c[0] for c in ORDER])
def test_the_rules_run_in_their_order(obs: Observation, mem: Memory, respond: Any, present: set[str],
                                      absent: set[str], evts: set[tuple[str, str]],
                                      no_evts: set[tuple[str, str]]) -> None:
    d, _ = run(obs, mem, respond)
    kinds = {type(a).__name__ for a in d.actions}
    assert present <= kinds and not absent & kinds, kinds
    assert evts <= set(events(d)) and not no_evts & set(events(d)), events(d)


def test_the_resume_now_annotation_is_cleared_after_the_tabs_were_planned() -> None:
    obs = observe(tab(limited()), annotations={C.ANNOTATION_RESUME_NOW: "true"})
    d, _ = run(obs, Memory(records={"main": due()}))
    names = [type(a).__name__ for a in d.actions]
    assert names[-1] == "ClearAnnotation" and "SendContinue" in names
    assert any(isinstance(a, ReadUsage) for a in d.actions) and d.tab_records["main"].sent_at == NOW
