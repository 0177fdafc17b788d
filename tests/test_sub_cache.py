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
    checks = world.memo.runtime.subscriptions.checks  # the one LIST after each listing (relists)
    assert len(lists) > len(ours) and len(ours) == checks <= 2, \
        f"kopf's listing and its check only, no LIST by a pass: {[(e.user_agent, e.at) for e in ours]}, {checks}"


def _listing(objs: list[dict]) -> dict:
    return {"ns": objs}


@pytest.mark.unit
def test_each_name_once_at_its_newest_version() -> None:
    old, new = sub("a", "5"), sub("a", "9")
    new["metadata"]["uid"] = "u-a2"  # deleted and re-created while the watch was away: two uids, one name
    subs = WatchedSubscriptions({"ns": [new, old, sub("b", "3")]})
    got = subs.of("ns")
    assert [(s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in got] == [("a", "9"), ("b", "3")]


@pytest.mark.unit
async def test_a_relist_is_followed_by_one_list_that_leaves_out_what_was_deleted(monkeypatch) -> None:
    import asyncio

    from controller.service import subcache

    monkeypatch.setattr(subcache, "QUIET_S", 0.05)
    index = {"ns": [sub("keep", "4"), sub("ghost", "6"), sub("late", "30")]}
    calls: list[str] = []

    async def lister(ns: str):
        calls.append(ns)
        return [sub("keep", "4")], "20"  # "late" was created after the list's version: not gone

    subs = WatchedSubscriptions(index, lister)
    for _ in range(3):  # the relist's events: one check
        subs.listed("ns")
        await asyncio.sleep(0.01)
    while subs.checks < 1:
        await asyncio.sleep(0.01)
    assert calls == ["ns"]
    assert [s["metadata"]["name"] for s in subs.of("ns")] == ["keep", "late"]

    async def failing(ns: str):
        raise OSError("down")

    subs.lister = failing
    subs.listed("ns")
    await asyncio.sleep(0.2)
    assert [s["metadata"]["name"] for s in subs.of("ns")] == ["keep", "late"], "a failed check changes nothing"
    subs.close()


@pytest.mark.timeout(90)
async def test_a_subscription_deleted_while_the_watch_was_away_is_no_candidate(world: World) -> None:
    """410 Gone: kopf lists again and the deleted Subscription gets no DELETED event; the box must neither move
    to it nor name it as the next one."""
    world.start_operator()
    await _subscription(world, "a", 100.0)
    await _subscription(world, "g", 10.0)
    await eventually(lambda: _state(world, "a") == "Exhausted" and _state(world, "g") == "Available", 15,
                     what="states")
    rt = world.memo.runtime
    await world.kube.delete_object("subscriptions", world.namespace, "g")
    world.kube.expire_watches()
    await eventually(lambda: rt.subscriptions.checks >= 1 and [s["metadata"]["name"] for s in
                                                               rt.subscriptions.of(world.namespace)] == ["a"],
                     20, what="g left out after the relist")
    await world.add_box("box", "claude-code", "a", whenAgentStops={"resumeAfterReset": True, "rotation": {
        "enabled": True, "group": "All"}})
    await world.run_pod("box", [TabSpec("main", fake_agent_argv("claude-code", time.time() + 3600,
                                                                "--limited-token", "tok-a"))])
    await eventually(lambda: ((world.box("box") or {}).get("status") or {}).get("tabs"), 20, what="a first pass")
    await eventually(lambda: any(t.get("state") for t in (world.box("box") or {})["status"]["tabs"]), 20)
    st = (world.box("box") or {}).get("status") or {}
    assert st.get("nextSubscription") != "g", st
    assert not any("switch to g" in (e.get("message") or "") for e in world.events("box"))
