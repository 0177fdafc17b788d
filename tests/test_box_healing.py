"""Boxes that heal: a deleted box pod is recreated, an evicted one replaced, a changed spec.template applied
by spec.podUpdate; while the pod is gone or not ready, status says so with a reason, never Running. Tabs that
come back showing their limit line are resumed as usual (exactly once)."""

from __future__ import annotations

import asyncio

import pytest

from controller import constants as C
from agentbox_sim.world import TabSpec, World, eventually, fake_agent_argv
from tests.test_resume_faults import claude_box
from tests.test_resume_scenarios import submits, tab_status

pytestmark = pytest.mark.component


def pod(world: World) -> dict | None:
    return world.kube.get("v1/pods", world.namespace, "box-a")


def uid(world: World) -> str | None:
    return ((pod(world) or {}).get("metadata") or {}).get("uid")


def condition(world: World, type_: str) -> dict:
    box = world.box("box-a") or {}
    return next((c for c in (box.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


class Seen:
    """Every (Ready status, reason, box state, pod uid) the box's status went through: recorded on every
    stored change of the AgentBox (the emulator's change listener), so a state that lasted a millisecond
    is seen too. The pod uid is the pod's at that moment (None while no pod exists)."""

    def __init__(self, world: World) -> None:
        self.world, self.states, self._on = world, [], False
        self.messages: list[str] = []  # every Ready message seen, in order
        world.kube.add_change_listener(self._changed)

    def _changed(self, _resource: object, _type: str, obj: dict) -> None:
        if not self._on or obj.get("kind") != "AgentBox" or (obj.get("metadata") or {}).get("name") != "box-a":
            return
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == C.COND_READY), {})
        sample = (ready.get("status"), ready.get("reason"), status.get("state"), uid(self.world))
        if not self.states or self.states[-1] != sample:
            self.states.append(sample)
        if ready.get("message") and (not self.messages or self.messages[-1] != ready["message"]):
            self.messages.append(ready["message"])

    def __enter__(self) -> "Seen":
        self._on = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._on = False


async def test_a_deleted_pod_is_recreated_and_its_limited_tab_resumed_once(world: World):
    world.start_operator()
    reset = await claude_box(world, 12.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 20)
    first = uid(world)
    with Seen(world) as seen:
        await world.kube.delete_object("v1/pods", world.namespace, "box-a")
        await eventually(lambda: uid(world) not in (None, first), 20, what="a new pod")
        # The pod watch wakes the box: the first status change after the deletion says the pod is missing
        # (on the live stream the dropped stream wakes it again at once, so PodPending may follow within
        # milliseconds: every stored version is checked, not the live value), and the status is never
        # Ready or Running again until the new pod runs.
        await eventually(lambda: any(s[1] == C.R_POD_MISSING and s[3] != first for s in seen.states), 10,
                         what="Ready False, PodMissing")
        # Every status written once the first pod was gone (recorded per write, so nothing stale in it).
        after = seen.states[next(i for i, s in enumerate(seen.states) if s[3] != first):]
        assert after[0][:2] == ("False", C.R_POD_MISSING), seen.states
        assert all(s[0] != "True" and s[2] != "Running" for s in after), \
            f"never Ready nor Running while the pod is gone or new: {seen.states}"
        assert any("was missing" in m for m in seen.messages), seen.messages
        # The kubelet starts the new pod; the agent comes back showing its limit line.
        await world.run_pod("box-a", [TabSpec("main", fake_agent_argv("claude-code", reset))])
        await eventually(lambda: condition(world, C.COND_READY).get("status") == "True", 20, what="Ready again")
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="continue in the new pod")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"]
    assert [e["reason"] for e in world.events("box-a")].count("CreatedPod") >= 1


async def test_an_evicted_pod_is_replaced_and_status_says_why(world: World):
    world.start_operator()
    await claude_box(world, 3600.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 20)
    first = uid(world)
    with Seen(world) as seen:
        await world.kube.evict_pod(world.namespace, "box-a")
        await eventually(lambda: uid(world) not in (None, first), 20, what="the evicted pod replaced")
        await eventually(lambda: any(e["reason"] == "ReplacingPod" and "Evicted" in e["message"]
                                     for e in world.events("box-a")), 10, what="ReplacingPod Event")
    failed = [s for s in seen.states if s[1] == C.R_POD_FAILED]
    assert failed and all(s[0] == "False" and s[2] != "Running" for s in failed), seen.states
    assert all(s[2] != "Running" for s in seen.states if s[3] != first or s[1] == C.R_POD_FAILED)


async def test_template_change_on_delete_marks_the_pod_out_of_date_until_it_is_replaced(world: World):
    world.start_operator()
    await claude_box(world, 3600.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 20)
    first = uid(world)
    await world.patch(world.box_path("box-a"), {"spec": {"template": {"spec": {"containers": [
        {"name": "box", "image": "agentbox-box:v2"}]}}}})
    await eventually(lambda: condition(world, C.COND_POD_OUT_OF_DATE).get("status") == "True", 15,
                     what="PodOutOfDate")
    assert "OnDelete" in condition(world, C.COND_POD_OUT_OF_DATE)["message"]
    await asyncio.sleep(3)
    assert uid(world) == first, "OnDelete: a working or limited box is not recreated for a template change"
    await world.kube.delete_object("v1/pods", world.namespace, "box-a")
    await eventually(lambda: uid(world) not in (None, first), 20, what="the pod recreated")
    new = pod(world)
    assert new["spec"]["containers"][0]["image"] == "agentbox-box:v2"
    await eventually(lambda: condition(world, C.COND_POD_OUT_OF_DATE).get("status") == "False", 15)


async def test_template_change_when_idle_recreates_only_once_no_tab_works(world: World):
    world.start_operator()
    await claude_box(world, 3600.0, "--start-working", "--work-seconds", "6")
    await world.patch(world.box_path("box-a"), {"spec": {"podUpdate": "WhenIdle"}})
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 20)
    first = uid(world)
    await world.patch(world.box_path("box-a"), {"spec": {"template": {"spec": {"containers": [
        {"name": "box", "image": "agentbox-box:v2"}]}}}})
    await eventually(lambda: condition(world, C.COND_POD_OUT_OF_DATE).get("status") == "True", 15)
    assert "once no tab is working" in condition(world, C.COND_POD_OUT_OF_DATE)["message"]
    assert uid(world) == first, "not while a tab works"
    await eventually(lambda: uid(world) not in (None, first), 30, what="recreated once the tab is idle")
    assert pod(world)["spec"]["containers"][0]["image"] == "agentbox-box:v2"
    assert any(e["reason"] == "RecreatingPod" for e in world.events("box-a"))
