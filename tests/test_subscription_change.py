"""spec.subscription changed while rotation is off: the pure rules (`rotation.follow_spec`, the box decision's
`_follow_spec`) as table tests. The operator scenarios are in tests/test_subscription_change_scenarios.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controller import constants as C
from controller.domain.box import (
    Count, Done, InstallLogin, Memory, PatchStatus, ReadUsage, RemoveLogin, SendContinue, SwitchSubscription, UsageRead,
    memory_from_status,
)
from controller.domain.resume import Phase
from controller.domain.rotation import follow_spec
from harness.decide_cases import CLAUDE, CODEX, NOW, WORKING, events, limited, observe, ok, run, sub, tab, usage
from datetime import timedelta

pytestmark = pytest.mark.unit

A, B = sub("sub-a"), sub("sub-b")


@pytest.mark.parametrize("current, spec, rotation, subs, expected", [
    ("sub-a", "sub-b", False, (A, B), "sub-b"),                        # moved by a human: follow spec
    ("sub-a", "sub-a", False, (A, B), None),                           # already there
    ("sub-a", "sub-b", True, (A, B), None),                            # rotation owns status.subscription
    ("sub-a", "sub-b", False, (A,), None),                             # missing: stay (reconcile reports)
    ("sub-a", "sub-b", False, (A, sub("sub-b", provider="openai")), None),  # wrong provider: stay
    (None, "sub-b", False, (A, B), None),                              # never placed: nothing to move
    ("sub-a", None, False, (A, B), None),                              # no subscription in spec
    ("sub-a", "sub-b", False, (A, sub("sub-b", "Exhausted")), "sub-b"),  # a human's choice, whatever its state
])
def test_follow_spec(current, spec, rotation, subs, expected):
    got = follow_spec(current, spec, rotation, subs, "anthropic")
    assert (got.name if got else None) == expected


def moved(box=CLAUDE, **kw: Any):
    return replace(box, subscription="sub-b", **kw)


def test_a_tab_limited_on_the_old_subscription_is_resumed_on_the_new_one_now():
    # sub-a's limit resets in 3 hours; sub-b has headroom: the tab is planned again on sub-b at once.
    det = limited(resets_at=NOW + timedelta(hours=3))
    obs = observe(tab(det), box=moved(), subs=(sub("sub-a", "Exhausted", 100.0), B))
    waiting = run(observe(tab(det), subs=(sub("sub-a", "Exhausted", 100.0), B)), Memory(current="sub-a"))[0]
    assert waiting.tab_records["main"].phase == Phase.RATE_LIMITED  # before: waits for sub-a's reset
    d, _ = run(obs, replace(waiting.memory))
    switch = next(a for a in d.actions if isinstance(a, SwitchSubscription))
    assert (switch.old, switch.new, switch.trigger, switch.limited) == ("sub-a", "sub-b", "spec", ("main",))
    reads = [a for a in d.actions if isinstance(a, ReadUsage)]
    assert [r.subscription for r in reads] == ["sub-b"]
    assert d.actions.index(switch) < d.actions.index(reads[0])
    assert any(isinstance(a, SendContinue) for a in d.actions)
    assert d.memory.current == "sub-b" and d.status.fields["subscription"] == "sub-b"
    assert events(d).count(("Normal", C.R_SUBSCRIPTION_CHANGED)) == 1
    assert Count("SWITCHES", ("$ns", "$name", "spec")) in d.actions
    assert ("Normal", "Switched") not in events(d)
    again, _ = run(obs, d.memory)  # once: the next pass does not move it again
    assert not any(isinstance(a, SwitchSubscription) for a in again.actions)
    assert C.R_SUBSCRIPTION_CHANGED not in [r for _, r in events(again)]


def test_the_new_subscription_exhausted_too_waits_for_its_own_reset():
    det = limited(resets_at=NOW + timedelta(hours=3))
    b_reset = NOW + timedelta(minutes=30)
    respond = lambda a: UsageRead(usage(100.0, b_reset), NOW, a.provider) if isinstance(a, ReadUsage) else ok(a)  # noqa: E731
    d, _ = run(observe(tab(det), box=moved(), subs=(A, B)), Memory(current="sub-a"), respond)
    rec = d.tab_records["main"]
    assert rec.phase == Phase.RATE_LIMITED and rec.resets_at == b_reset
    assert not any(isinstance(a, SendContinue) for a in d.actions)


@pytest.mark.parametrize("subs", [(A,), (A, sub("sub-b", provider="openai"))])
def test_a_missing_or_foreign_new_subscription_moves_nothing(subs):
    d, _ = run(observe(tab(limited(resets_at=NOW + timedelta(hours=3))), box=moved(), subs=subs),
               Memory(current="sub-a"))
    assert not any(isinstance(a, (SwitchSubscription, InstallLogin)) for a in d.actions)
    assert d.memory.current == "sub-a" and d.status.fields["subscription"] == "sub-a"
    assert C.R_SUBSCRIPTION_CHANGED not in [r for _, r in events(d)]


def test_an_unusable_new_login_moves_nothing_and_is_tried_again():
    refuse = lambda a: Done(False) if isinstance(a, SwitchSubscription) else ok(a)  # noqa: E731
    obs = observe(tab(WORKING), box=moved(), subs=(A, B))
    d, _ = run(obs, Memory(current="sub-a"), refuse)
    assert d.memory.current == "sub-a" and d.status.fields["subscription"] == "sub-a"
    assert events(d) == []  # the reconcile reports spec.subscription (one Warning)
    assert any(isinstance(a, SwitchSubscription) for a in run(obs, d.memory)[0].actions)


def test_with_rotation_on_a_changed_spec_subscription_does_not_move_the_box():
    obs = observe(tab(WORKING), box=moved(rotation=True), subs=(A, B, sub("sub-c")))
    d, _ = run(obs, Memory(current="sub-a"))
    assert not any(isinstance(a, SwitchSubscription) for a in d.actions)
    assert d.memory.current == "sub-a"


def test_a_working_codex_is_left_alone_and_a_limited_one_is_stopped_before_the_login_changes():
    o = sub("sub-a", provider="openai"), sub("sub-b", provider="openai")
    obs = observe(tab(WORKING, "w"), tab(limited(resets_at=NOW + timedelta(hours=3)), "l"), box=moved(CODEX), subs=o)
    d, _ = run(obs, Memory(current="sub-a"))
    switch = next(a for a in d.actions if isinstance(a, SwitchSubscription))
    assert switch.stop == (("l", "%l"),) and switch.limited == ("l",)


def test_reserve_of_the_old_subscription_is_lifted_on_a_new_one_without_reserve():
    obs = observe(tab(WORKING), box=moved(), subs=(sub("sub-a", "Reserved", 92.0), B))
    mem = Memory(current="sub-a", reserved="Stopping to keep 10% of your 5-hour limit (reserved until ...)")
    d, _ = run(obs, mem)
    assert InstallLogin("sub-b", "restore") in d.actions
    assert d.memory.reserved is None and d.status.fields["state"] != "Reserved"


def test_a_new_subscription_that_is_reserved_too_keeps_the_box_stopped_without_a_login():
    obs = observe(tab(WORKING), box=moved(), subs=(sub("sub-a", "Reserved", 92.0), sub("sub-b", "Reserved", 99.0)))
    mem = Memory(current="sub-a", reserved="Stopping to keep 10% of your 5-hour limit")
    d, _ = run(obs, mem)
    switch = d.actions.index(next(a for a in d.actions if isinstance(a, SwitchSubscription)))
    assert RemoveLogin() in d.actions[switch:]
    assert d.memory.reserved == "Stopping to keep the reserve of your limits"
    assert not any(isinstance(a, InstallLogin) for a in d.actions)


@pytest.mark.parametrize("to, completed", [("sub-b", True), ("sub-c", False)])
def test_a_switch_left_in_status_is_finished_only_when_it_goes_where_spec_says(to: str, completed: bool):
    pending = {"to": to, "fromSubscription": "sub-a", "tabs": [], "reason": "limit"}
    mem = memory_from_status({"subscription": "sub-a", "switch": pending}, "sub-b")
    d, _ = run(observe(tab(WORKING), box=moved(), subs=(A, B, sub("sub-c"))), mem)
    # Either way the box ends on spec.subscription with its login installed, once, and status.switch cleared.
    assert InstallLogin("sub-b", "complete") in d.actions and (InstallLogin(to, "complete") in d.actions) == completed
    assert PatchStatus((("switch", None), ("subscription", "sub-b"))) in d.actions
    assert not any(isinstance(a, SwitchSubscription) for a in d.actions)
    assert d.memory.current == "sub-b"


def test_rotation_switched_off_mid_switch_puts_the_login_of_spec_back():
    pending = {"to": "sub-c", "fromSubscription": "sub-a", "tabs": [], "reason": "limit"}
    mem = memory_from_status({"subscription": "sub-a", "switch": pending}, "sub-a")
    d, _ = run(observe(tab(WORKING), subs=(A, B, sub("sub-c"))), mem)  # spec sub-a, rotation off
    assert InstallLogin("sub-a", "complete") in d.actions and InstallLogin("sub-c", "complete") not in d.actions
    assert d.memory.current == "sub-a"
    assert any("Stayed on sub-a" in a.message for a in d.actions if hasattr(a, "message"))


# ---------------------------------------------------------------------------------------------- login keeper
@pytest.mark.parametrize("spec, status, to, expected", [
    ("sub-a", {}, None, "sub-a"),                                                  # never placed
    ("sub-b", {"subscription": "sub-a"}, None, "sub-a"),                           # not moved yet
    ("sub-b", {"subscription": "sub-a", "switch": {"to": "sub-b"}}, "sub-b", "sub-b"),  # being moved
    ("sub-a", {"subscription": "sub-c"}, None, "sub-c"),                           # moved by the rotation
])
def test_subscription_of_box(spec, status, to, expected):
    from controller.domain.rotation import subscription_of_box

    assert subscription_of_box(spec, status.get("subscription"), to) == expected


async def test_the_old_subscriptions_keeper_leaves_a_box_being_switched_away():
    """Between the switch's new login and its status.subscription, the old subscription's login keeper
    must not count the box as its own (its stale-box sync would write the old login back)."""
    from types import SimpleNamespace

    from harness.memkube import MemKube
    from controller.service.logins import LoginKeeper

    kube = MemKube()
    for name, status in (("moving", {"subscription": "sub-a", "switch": {"to": "sub-b", "step": "InstallLogin"}}),
                         ("staying", {"subscription": "sub-a"})):
        kube.objects[(C.AGENTBOX_PLURAL, "ns", name)] = {
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"agent": "claude-code", "subscription": "sub-b"
                                                                    if name == "moving" else "sub-a"},
            "status": status}
    rt = SimpleNamespace(kube=kube)
    a = LoginKeeper(rt, "ns", "sub-a", lambda *_: None)
    b = LoginKeeper(rt, "ns", "sub-b", lambda *_: None)
    assert [x.name for x in await a.pusher.boxes("anthropic")] == ["staying"]
    assert [x.name for x in await b.pusher.boxes("anthropic")] == ["moving"]


def test_a_tab_mid_resume_is_not_planned_again_by_the_move():
    """A tab whose resume journal is unfinished (a controller stopped mid-send) is completed from its journal
    first (never sent twice); only tabs without one are planned again on the new subscription."""
    from controller.domain.resume import JournalAction, TabRecord, limit_key
    from controller.domain.box import start_journal

    det = limited(resets_at=NOW - timedelta(seconds=30))
    journal = start_journal(JournalAction.CONTINUE, NOW - timedelta(seconds=2), limit_key(det), "continue")
    rec = TabRecord("main", Phase.RESUMING, limit_key=limit_key(det), sent_for=limit_key(det), journal=journal)
    d, _ = run(observe(tab(det), box=moved(), subs=(A, B)), Memory(current="sub-a", records={"main": rec}))
    switch = next(a for a in d.actions if isinstance(a, SwitchSubscription))
    assert switch.limited == ()
    assert d.memory.current == "sub-b"
    assert not (d.tab_records["main"].message or "").startswith("Switched to")  # not re-planned by the move
    assert not any(isinstance(a, ReadUsage) for a in d.actions)  # completed from its journal, no new resume
