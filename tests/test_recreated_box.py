"""A box (or Subscription) deleted and re-created under the same name is another object (another uid) with its
own daemon (kopf keys daemons by uid), which may start before the old daemon ends (the old one may sit in a long
pass: a restart, a verification wait, an exec timing out). What is kept by name (the wake-up, the interests,
the human-change count, the status writer) must stay the new box's when the old daemon ends."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from controller import constants as C
from controller.handlers import boxes
from controller.runtime import Runtime
from controller.settings import Settings

pytestmark = pytest.mark.unit


def box_body(uid: str) -> kopf.Body:
    return kopf.Body({"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": "AgentBox",
                      "metadata": {"namespace": "ns", "name": "box-a", "uid": uid}, "spec": {}})


async def until(probe, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not probe():
            await asyncio.sleep(0.01)


def stand_in(passes: dict[str, int], gate: asyncio.Event) -> type:
    """Stands for a daemon's pass runner (BoxWatcher, SubscriptionReader): counts the passes per object uid; the
    old object's first pass lasts until `gate`."""
    class StandIn:
        def __init__(self, rt: Any, namespace: str, name: str, post: Any) -> None:
            pass

        async def tick(self, body: dict[str, Any]) -> float:
            uid = body["metadata"]["uid"]
            passes[uid] += 1
            if uid == "old" and passes[uid] == 1:
                await gate.wait()
            return 3600.0

        async def aclose(self) -> None:
            pass
    return StandIn


async def test_the_old_daemon_ending_late_leaves_the_new_box_its_wake_up(monkeypatch):
    from kopf._cogs.aiokits.aioenums import FlagSetter

    passes: dict[str, int] = {"old": 0, "new": 0}
    gate = asyncio.Event()

    monkeypatch.setattr(boxes, "BoxWatcher", stand_in(passes, gate))
    rt = Runtime(settings=Settings(metrics_port=0), kube=SimpleNamespace(), usage=None)
    memo = SimpleNamespace(runtime=rt)
    log = logging.getLogger("t")
    rt.presence.observe(C.AGENTBOX_PLURAL, "ADDED", box_body("old"))
    old_stop, new_stop = FlagSetter(), FlagSetter()
    old = asyncio.ensure_future(boxes.watch_tabs(body=box_body("old"), memo=memo, stopped=old_stop.async_waiter,
                                                 logger=log))
    await until(lambda: passes["old"] == 1)
    # Deleted and re-created while the old daemon's pass runs: the new box's daemon starts and sleeps.
    rt.presence.observe(C.AGENTBOX_PLURAL, "DELETED", box_body("old"))
    rt.box_changed("ns", "box-a")
    rt.presence.observe(C.AGENTBOX_PLURAL, "ADDED", box_body("new"))
    new = asyncio.ensure_future(boxes.watch_tabs(body=box_body("new"), memo=memo, stopped=new_stop.async_waiter,
                                                 logger=log))
    await until(lambda: passes["new"] >= 1)
    # The old pass ends (its wake-up, shared by name, was cleared by the new daemon's pass: it sleeps); the
    # next wake-up of the name runs both: the old daemon sees its box gone and ends, the new one makes a pass.
    gate.set()
    await asyncio.sleep(0)
    rt.wakeup("ns", "box-a").set()
    await asyncio.wait_for(old, 5)
    await until(lambda: passes["new"] >= 2)
    settled = passes["new"]
    # A human changes the new box (an annotation): its watcher must wake. Before: the old daemon's end dropped
    # the wake-up Event the new daemon sleeps on; the change set a fresh one nobody waits for (the new box
    # slept until its deadline: up to stream_rescan_s, 300 s).
    rt.box_changed("ns", "box-a")
    await until(lambda: passes["new"] > settled)
    assert ("ns", "box-a") in rt.wakeups and rt.daemon_uids.get(("ns", "box-a")) == "new"
    new.cancel()
    try:
        await new
    except asyncio.CancelledError:
        pass


async def test_the_old_usage_reader_ending_late_leaves_the_new_subscription_its_wake_up(monkeypatch):
    """The same for a Subscription deleted and re-created under its name: its usage reader's wake-up (a login
    refresh, a box asking for a fresh read) must reach the new reader after the old one ended."""
    from kopf._cogs.aiokits.aioenums import FlagSetter
    from controller.handlers import subscriptions

    passes: dict[str, int] = {"old": 0, "new": 0}
    gate = asyncio.Event()

    Reader = stand_in(passes, gate)

    def sub_body(uid: str) -> kopf.Body:
        return kopf.Body({"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": "Subscription",
                          "metadata": {"namespace": "ns", "name": "sub-a", "uid": uid}, "spec": {}})

    monkeypatch.setattr(subscriptions, "SubscriptionReader", Reader)
    rt = Runtime(settings=Settings(metrics_port=0), kube=SimpleNamespace(), usage=None)
    memo = SimpleNamespace(runtime=rt)
    key = (C.SUBSCRIPTION_PLURAL + "/ns", "sub-a")
    rt.presence.observe(C.SUBSCRIPTION_PLURAL, "ADDED", sub_body("old"))
    old = asyncio.ensure_future(subscriptions.read_usage(body=sub_body("old"), memo=memo,
                                                         stopped=FlagSetter().async_waiter, logger=logging.getLogger("t")))
    await until(lambda: passes["old"] == 1)
    rt.presence.observe(C.SUBSCRIPTION_PLURAL, "DELETED", sub_body("old"))
    rt.presence.observe(C.SUBSCRIPTION_PLURAL, "ADDED", sub_body("new"))
    new = asyncio.ensure_future(subscriptions.read_usage(body=sub_body("new"), memo=memo,
                                                         stopped=FlagSetter().async_waiter, logger=logging.getLogger("t")))
    await until(lambda: passes["new"] >= 1)
    gate.set()
    await asyncio.sleep(0)
    rt.wakeup(*key).set()
    await asyncio.wait_for(old, 5)
    await until(lambda: passes["new"] >= 2)
    settled = passes["new"]
    rt.wakeup(*key).set()
    await until(lambda: passes["new"] > settled)
    new.cancel()
    try:
        await new
    except asyncio.CancelledError:
        pass
