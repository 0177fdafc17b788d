"""Watcher passes read their namespace's Subscriptions from kopf's watch-fed index
(`controller.service.subcache`), not with a LIST per pass; what they see follows the watch (a Subscription
created later is a candidate, a state change wakes the boxes it concerns)."""

from __future__ import annotations

import time

import pytest

from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in
from controller.service.subcache import WatchedSubscriptions, index_entry


def sub(name: str, rv: str = "1") -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "resourceVersion": rv},
            "spec": {"provider": "anthropic"}, "status": {"state": "Available"}}


@pytest.mark.unit
def test_the_index_answers_in_name_order_and_none_without_an_index() -> None:
    assert WatchedSubscriptions().of("ns") is None, "no index: the caller lists"
    index = {"ns": [index_entry("ns", sub("c"))["ns"], index_entry("ns", sub("a"))["ns"]]}
    subs = WatchedSubscriptions(index)
    assert [s["metadata"]["name"] for s in subs.of("ns")] == ["a", "c"], "a LIST's order (by name)"
    assert subs.of("other") == [] and subs.reads == 2


def _sub_lists(world: World) -> list:
    """Plain LISTs of Subscriptions (not watches) the API server answered."""
    return [e for e in world.kube.journal if e.method == "GET" and e.path.endswith("/subscriptions")
            and "watch" not in e.query]


async def _subscription(world: World, name: str, five: float) -> None:
    world.provider.add_login(f"tok-{name}", f"acct-{name}")
    world.provider.set_windows(f"acct-{name}", five_hour=(five, utc_in(3600)), weekly=(10.0, utc_in(86400 * 3)))
    await world.add_secret(f"login-{name}", "credentials.json", claude_login(f"tok-{name}"))
    await world.add_subscription(name, "anthropic", f"login-{name}", "credentials.json")


def _state(world: World, name: str) -> str | None:
    return ((world.kube.get("subscriptions", "default", name) or {}).get("status") or {}).get("state")


@pytest.mark.timeout(90)
async def test_passes_list_no_subscriptions_and_a_later_one_is_rotated_to(world: World) -> None:
    world.start_operator()
    await _subscription(world, "a", 100.0)
    await eventually(lambda: _state(world, "a") == "Exhausted", 15, what="a Exhausted")
    await world.add_box("box", "claude-code", "a", whenAgentStops={"resumeAfterReset": True, "rotation": {
        "enabled": True, "group": "All"}})
    await world.run_pod("box", [TabSpec("main", fake_agent_argv("claude-code", time.time() + 3600,
                                                                "--limited-token", "tok-a"))])
    await eventually(lambda: ((world.box("box") or {}).get("status") or {}).get("tabs"), 20, what="a first pass")
    # Created after the box's passes began: the watch brings it, its state change wakes the box, and the box
    # moves to it.
    await _subscription(world, "b", 10.0)
    await eventually(lambda: any(e["reason"] == "Switched" for e in world.events("box")), 30, what="switched to b")
    assert ((world.box("box") or {}).get("status") or {}).get("subscription") == "b"
    lists = _sub_lists(world)
    ours = [e for e in lists if not e.user_agent.startswith("kopf/")]
    assert lists and not ours, f"kopf's initial listing only, no LIST by a pass: {[(e.user_agent, e.at) for e in ours]}"
