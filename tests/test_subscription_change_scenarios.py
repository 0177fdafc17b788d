"""spec.subscription changed while rotation is off, end to end: the real operator against the emulated API
server, pod exec into tmux, scripted agents that read their live login file, the provider usage emulator.
The pure rules are table-tested in tests/test_subscription_change.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component


def status(world: World, box: str = "box") -> dict:
    return (world.box(box) or {}).get("status") or {}


def reasons(world: World, box: str = "box") -> list[str]:
    return [e["reason"] for e in world.events(box)]


def submits(world: World, box: str = "box", tab: str = "main") -> list[dict]:
    return [e for e in world.agent_log(box, tab) if e["event"] == "submit"]


def ready(world: World) -> dict:
    return next((c for c in status(world).get("conditions") or [] if c.get("type") == "Ready"), {})


async def subscription(world: World, name: str, five: float, reset_in: float, provider: str = "anthropic") -> None:
    token = f"tok-{name}"
    world.provider.add_login(token, f"acct-{name}")
    world.provider.set_windows(f"acct-{name}", five_hour=(five, utc_in(reset_in)), weekly=(10.0, utc_in(86400 * 3)))
    await world.add_secret(f"login-{name}", "credentials.json", claude_login(token))
    await world.add_subscription(name, provider, f"login-{name}", "credentials.json")


async def box_on(world: World, sub: str, *agent_args: str, rotation: dict | None = None) -> None:
    wa: dict = {"resumeAfterReset": True}
    if rotation is not None:
        wa["rotation"] = rotation
    await world.add_box("box", "claude-code", sub, whenAgentStops=wa)
    await world.run_pod("box", [TabSpec("main", fake_agent_argv("claude-code", time.time() + 3600, *agent_args))])


async def move(world: World, to: str) -> None:
    await world.patch(world.box_path("box"), {"spec": {"subscription": to}})


async def test_a_changed_subscription_moves_the_box_its_login_and_status(world: World):
    world.start_operator()
    await subscription(world, "a", 10.0, 3600)
    await subscription(world, "b", 10.0, 3600)
    await box_on(world, "a", "--start-working")
    await eventually(lambda: status(world).get("subscription") == "a" and ready(world).get("status") == "True", 20,
                     what="box ready on a")
    await eventually(lambda: "tok-a" in (world.login_file("box") or ""), 10, what="a's login live")
    await move(world, "b")
    await eventually(lambda: status(world).get("subscription") == "b", 15, what=f"status follows: {status(world)}")
    assert "tok-b" in world.box_secret("box")["credentials.json"]
    assert "tok-b" in (world.login_file("box") or ""), "the live login file is the new subscription's"
    await eventually(lambda: "SubscriptionChanged" in reasons(world), 10, what="the Event")
    ev = [e for e in world.events("box") if e["reason"] == "SubscriptionChanged"]
    assert len(ev) == 1 and ev[0]["type"] == "Normal" and "from a to b" in ev[0]["message"]
    assert "tok-" not in ev[0]["message"]
    await asyncio.sleep(3)  # the login keeper of a and later passes do not move it back
    assert status(world).get("subscription") == "b" and "tok-b" in world.box_secret("box")["credentials.json"]
    assert "tok-b" in (world.login_file("box") or "")
    assert reasons(world).count("SubscriptionChanged") == 1


async def test_a_tab_limited_on_the_old_subscription_resumes_on_the_new_one(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)   # exhausted for an hour
    await subscription(world, "b", 20.0, 7200)    # headroom now
    await box_on(world, "a", "--limited-token", "tok-a")
    await eventually(lambda: any(t.get("state") == "RateLimited" for t in status(world).get("tabs", [])), 20,
                     what="limited on a")
    assert submits(world) == []
    await move(world, "b")
    await eventually(lambda: submits(world), 20, what="continue on b, not at a's reset")
    assert [e["text"] for e in submits(world)] == ["continue"]
    assert submits(world)[0]["token"] == "tok-b", "the agent resumed on the new login"
    await eventually(lambda: status(world).get("subscription") == "b", 10)
    await eventually(lambda: "Resumed" in reasons(world), 10, what="the Resumed Event (posted after the keys)")


@pytest.mark.parametrize("to, reason", [("missing", "SubscriptionNotFound"), ("o", "ProviderMismatch")])
async def test_a_bad_new_subscription_keeps_the_box_where_it_is_and_names_the_field(world: World, to: str,
                                                                                   reason: str):
    world.start_operator()
    await subscription(world, "a", 10.0, 3600)
    await subscription(world, "o", 10.0, 3600, provider="openai")
    await box_on(world, "a", "--start-working")
    await eventually(lambda: ready(world).get("status") == "True", 20, what="box ready on a")
    await move(world, to)
    await eventually(lambda: ready(world).get("reason") == reason, 15, what=f"Ready {reason}: {ready(world)}")
    assert "spec.subscription" in ready(world)["message"]
    await asyncio.sleep(3)  # passes and retries: still one Warning, the box still on a
    warnings = [e for e in world.events("box") if e["reason"] == reason]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning" and "spec.subscription" in warnings[0]["message"]
    assert status(world).get("subscription") == "a"
    assert "tok-a" in world.box_secret("box")["credentials.json"] and "tok-a" in (world.login_file("box") or "")
    assert "SubscriptionChanged" not in reasons(world)
    # Fixed (the Subscription created, or spec.subscription set back to one of the provider): the box moves.
    if to == "missing":
        await subscription(world, "missing", 10.0, 3600)
    else:
        await move(world, "missing2")
        await subscription(world, "missing2", 10.0, 3600)
    fixed = "missing" if to == "missing" else "missing2"
    await eventually(lambda: status(world).get("subscription") == fixed, 20, what=f"moved once fixed: {status(world)}")
    # Ready True again at once: the watcher decides on the reconcile's newest Ready (written through the
    # box's one status writer), not on its older copy of the box (on the live stream its next pass may be
    # minutes away).
    await eventually(lambda: ready(world).get("status") == "True", 10, what=f"Ready again: {ready(world)}")
    assert f"tok-{fixed}" in world.box_secret("box")["credentials.json"]
    assert f"tok-{fixed}" in (world.login_file("box") or "")


async def test_with_rotation_on_the_rotation_keeps_the_box_where_it_moved_it(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)
    await subscription(world, "b", 60.0, 7200)
    await subscription(world, "c", 20.0, 7200)
    await box_on(world, "a", "--limited-token", "tok-a", rotation={"enabled": True, "group": "All"})
    await eventually(lambda: status(world).get("subscription") == "c", 20, what="rotation to c")
    await move(world, "b")
    await eventually(lambda: (world.box("box") or {}).get("status", {}).get("observedGeneration")
                     == (world.box("box") or {}).get("metadata", {}).get("generation"), 10, what="reconciled")
    await asyncio.sleep(3)
    assert status(world).get("subscription") == "c", "the rotation moved the box; it keeps the login it installed"
    assert "tok-c" in world.box_secret("box")["credentials.json"] and "tok-c" in (world.login_file("box") or "")
    assert "SubscriptionChanged" not in reasons(world)


async def test_a_tab_limited_on_both_resumes_at_the_new_subscriptions_reset(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)   # exhausted for an hour
    await subscription(world, "b", 100.0, 8)      # exhausted too, resets in 8 s
    await box_on(world, "a", "--limited-token", "tok-a")
    await eventually(lambda: any(t.get("state") == "RateLimited" for t in status(world).get("tabs", [])), 20,
                     what="limited on a")
    await move(world, "b")
    await eventually(lambda: status(world).get("subscription") == "b", 15, what="moved to b")
    await eventually(lambda: "ResetNotYet" in reasons(world), 15, what="b's usage read: not reset yet")
    assert submits(world) == [], "b is exhausted too: nothing is sent before its reset"
    await eventually(lambda: submits(world), 30, what="continue at b's reset, not a's")
    assert submits(world)[0]["token"] == "tok-b"


@pytest.mark.parametrize("terminal", ["poll", "stream"])
async def test_a_codex_move_killed_midway_is_completed_once_on_the_new_login(world: World, terminal: str):
    """The move is the rotation's journaled switch: a Codex tab stopped on a's limit gets Ctrl-C twice before
    the new auth.json goes in. Killed right after the first Ctrl-C, the restarted controller finds
    status.switch and completes it: b's login in place, status on b, the agent relaunched once, one continue
    on b's account."""
    from agentbox_sim.kube import ExecFault
    from tests.test_resume_faults import ctrl_c, inject, use_mode
    from tests.test_rotation_scenarios import codex_subscription

    use_mode(world, terminal)
    fault = inject(world, terminal, ExecFault(mode="pass", pod="box", match=ctrl_c, when="after",
                                              on_match=world.kill_operator_now))
    world.start_operator()
    for name, five in (("a", 100.0), ("b", 10.0)):
        await codex_subscription(world, name, five)
    await world.add_box("box", "codex", "a", whenAgentStops={"resumeAfterReset": True})
    await world.run_pod("box", [TabSpec("main", ["codex"])], shims={"codex": fake_agent_argv(
        "codex", time.time() + 3600, "--limited-token", "tok-a")})
    await eventually(lambda: any(t.get("state") == "RateLimited" for t in status(world).get("tabs", [])), 30,
                     what="limited on a")
    await move(world, "b")
    await eventually(lambda: fault.hits, 30, what="the kill point (the first Ctrl-C of the move)")
    await world.kill_operator()
    assert (status(world).get("switch") or {}).get("to") == "b" and status(world).get("subscription") == "a"
    world.start_operator()
    await eventually(lambda: submits(world), 40, what="continue on b after the restart")
    await asyncio.sleep(world.settings.settle_s + 2)
    log = world.agent_log("box", "main")
    subs = [e for e in log if e["event"] == "submit"]
    assert [e["text"] for e in subs] == ["continue"] and subs[0]["token"] == "tok-b"
    assert [e.get("argv") for e in log if e["event"] == "start"] == [[], ["resume", "--last"]]
    assert status(world).get("subscription") == "b" and "switch" not in status(world)
    assert "tok-b" in world.box_secret("box")["auth.json"] and "tok-b" in (world.login_file("box", "codex") or "")
