"""The emulated world's controller restart: a killed operator's late kill steps never reach its successor.

`World.kill_operator_now` cancels the old event loop's tasks at once and again at 0.05-1 s (kopf shields parts
of its shutdown). Under CPU load the old loop runs those steps late, after `kill_operator` gave up joining its
thread (2 s) and the test started the next operator. A step that set the *current* stop flag stopped the new
controller (its login activity cancelled, no pass ever ran): CI's
`test_a_codex_move_killed_midway_is_completed_once_on_the_new_login[poll]` timed out on "continue on b after
the restart" that way (1 run in 3 fresh-clone runs, 2 workers).
"""

from __future__ import annotations

import asyncio
import time

from agentbox_sim.world import World, claude_login, eventually, utc_in
from controller import constants as C


async def test_a_late_kill_step_of_the_old_operator_does_not_stop_the_restarted_one(world: World) -> None:
    world.start_operator()
    old_loop = world._loop
    assert old_loop is not None
    # The old loop is held busy for 2.5 s (a loaded machine): its kill steps run after kill_operator()
    # stopped waiting for its thread (2 s) and the next operator started.
    old_loop.call_soon_threadsafe(time.sleep, 2.5)
    await world.kill_operator()
    world.start_operator()
    new_stop = world._stop
    assert new_stop is not None and not new_stop.is_set()
    await asyncio.sleep(3.5)  # the old loop wakes at 2.5 s and runs every kill step it had (the last at +1 s)
    assert not new_stop.is_set(), "the old operator's kill stopped its successor"
    assert world._thread is not None and world._thread.is_alive()
    # The restarted controller still serves: a Subscription it sees gets its status.
    world.provider.add_login("tok-x", "acct-x")
    world.provider.set_windows("acct-x", five_hour=(10.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("login-x", "credentials.json", claude_login("tok-x"))
    await world.add_subscription("x", "anthropic", "login-x", "credentials.json")
    await eventually(lambda: ((world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, "x") or {}).get("status") or {})
                     .get("observedGeneration"), 15, what="the restarted controller reconciles a new Subscription")
