"""A Subscription that changes state wakes only the box watchers it concerns (`service.subscriptions.wake_boxes`).

At 1,000 boxes on 100 Subscriptions, waking every box of the namespace for every Subscription that reset
made each of the 1,000 watchers run 2-4 passes at the very instant the due boxes resumed (bench/scale.py:
1-36 passes per resumed tab in a reset's window, the resume lag p99 up to 29 s at 100 tabs per reset).
"""

from __future__ import annotations

import asyncio

import pytest

from agentbox_sim.world import TabSpec, World, claude_login, eventually, utc_in
from controller import constants as C
from controller.runtime import Runtime
from controller.service.subscriptions import wake_boxes
from controller.settings import Settings


def _runtime() -> Runtime:
    return Runtime(settings=Settings(), kube=None, usage=None)  # type: ignore[arg-type]


def test_a_subscription_wakes_its_boxes_the_boxes_rotating_over_its_provider_and_the_unknown_ones():
    rt = _runtime()
    for name in ("on-a", "on-b", "rotates-anthropic", "rotates-openai", "no-pass-yet"):
        rt.wakeup("ns", name)
    rt.wakeup("other-ns", "on-a")
    rt.interests[("ns", "on-a")] = (("sub-a",), None)
    rt.interests[("ns", "on-b")] = (("sub-b",), None)
    rt.interests[("ns", "rotates-anthropic")] = (("sub-x",), "anthropic")
    rt.interests[("ns", "rotates-openai")] = (("sub-y",), "openai")
    rt.interests[("other-ns", "on-a")] = (("sub-a",), None)

    wake_boxes(rt, "ns", "sub-a", "anthropic")

    woken = {key for key, event in rt.wakeups.items() if event.is_set()}
    assert woken == {("ns", "on-a"), ("ns", "rotates-anthropic"), ("ns", "no-pass-yet")}


def test_a_box_moving_to_the_subscription_its_spec_names_is_woken_by_that_one_too():
    """Rotation off, spec.subscription changed from sub-a to sub-b: until the move is done the box runs on
    sub-a, and sub-b becoming usable (its login created, say) must wake it, not wait for the next scan."""
    rt = _runtime()
    rt.wakeup("ns", "moving")
    rt.wakeup("ns", "staying")
    rt.interests[("ns", "moving")] = (("sub-a", "sub-b"), None)
    rt.interests[("ns", "staying")] = (("sub-a",), None)

    wake_boxes(rt, "ns", "sub-b", "anthropic")

    assert rt.wakeups[("ns", "moving")].is_set()
    assert not rt.wakeups[("ns", "staying")].is_set()


def test_a_deleted_subscription_of_unknown_provider_wakes_every_rotating_box():
    rt = _runtime()
    rt.wakeup("ns", "rotates")
    rt.wakeup("ns", "elsewhere")
    rt.interests[("ns", "rotates")] = (("sub-x",), "openai")
    rt.interests[("ns", "elsewhere")] = (("sub-y",), None)

    wake_boxes(rt, "ns", "sub-a", None)

    assert rt.wakeups[("ns", "rotates")].is_set()
    assert not rt.wakeups[("ns", "elsewhere")].is_set()


@pytest.mark.component
async def test_a_state_change_of_another_subscription_runs_no_pass_of_a_box_on_the_stream(world: World):
    from harness.world_fixtures import watcher_passes

    if not world.settings.tmux_stream:
        pytest.skip("polling passes every scan interval anyway: only the live stream sleeps until woken")
    world.start_operator()
    for sub, account in (("claude-a", "acct-a"), ("claude-b", "acct-b")):
        world.provider.add_login(f"tok-{account}", account)
        world.provider.set_windows(account, five_hour=(20.0, utc_in(3600)), weekly=(40.0, utc_in(86400)))
        await world.add_secret(f"{sub}-login", "credentials.json", claude_login(f"tok-{account}"))
        await world.add_subscription(sub, "anthropic", f"{sub}-login", "credentials.json")
    for box, sub in (("box-a", "claude-a"), ("box-b", "claude-b")):
        await world.add_box(box, "claude-code", sub)
        await world.run_pod(box, [TabSpec("main", ["sh"])])

    def sub_state(name: str) -> str | None:
        return ((world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, name) or {}).get("status") or {}).get("state")

    def stream_up(box: str) -> bool:
        conds = ((world.box(box) or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "TerminalStream" and c.get("status") == "True" for c in conds)

    await eventually(lambda: stream_up("box-a") and stream_up("box-b"), 20, what="both streams attached")
    await eventually(lambda: sub_state("claude-b") == "Available", 20, what="claude-b read")
    # Settled: no pass of either box while nothing changes (the stream rescan is minutes away).
    a0, b0 = watcher_passes(world, "box-a"), watcher_passes(world, "box-b")
    await asyncio.sleep(0)
    # claude-b's window fills up; a spec change makes its reader read now: Available -> Exhausted.
    world.provider.set_windows("acct-b", five_hour=(100.0, utc_in(3600)), weekly=(40.0, utc_in(86400)))
    await world.patch(world.sub_path("claude-b"), {"spec": {"reserve": {"fiveHourPercent": 5}}})
    await eventually(lambda: sub_state("claude-b") == "Exhausted", 20, what="claude-b exhausted")
    # Its own box is woken (the positive control) ...
    await eventually(lambda: watcher_passes(world, "box-b") > b0, 10, what="box-b woken by its subscription")
    # ... the box on claude-a is not: it ran no pass for a Subscription it does not use.
    assert watcher_passes(world, "box-a") == a0
