"""The main loop end to end: the real kopf operator against the emulated API server, pod exec into
real tmux, scripted agents printing real limit lines, the provider usage emulator on loopback."""

from __future__ import annotations

import time

import pytest

from controller.sim.world import TabSpec, World, claude_login, codex_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component


def submits(world: World, pod: str, tab: str) -> list[str]:
    return [e["text"] for e in world.agent_log(pod, tab) if e["event"] == "submit"]


def tab_status(world: World, box: str, tab: str) -> dict:
    for t in ((world.box(box) or {}).get("status") or {}).get("tabs") or []:
        if t["name"] == tab:
            return t
    return {}


async def claude_world(world: World, reset_in: float, *agent_args: str, box: str = "box-a") -> float:
    reset = time.time() + reset_in
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, utc_in(reset_in)), weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box(box, "claude-code", "claude-a")
    await world.run_pod(box, [TabSpec("main", fake_agent_argv("claude-code", reset, *agent_args))])
    return reset


async def test_claude_tab_resumed_at_reset(world: World):
    world.start_operator()
    reset = await claude_world(world, 6.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 15, what="limit detected")
    assert submits(world, "box-a", "main") == []
    await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue sent")
    sent_at = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    assert submits(world, "box-a", "main") == ["continue"]
    assert reset <= sent_at <= reset + 30, "continue is sent after the reset, within 30 s"
    await eventually(lambda: any(e["event"] == "working" for e in world.agent_log("box-a", "main")), 10)
    reasons = [e["reason"] for e in world.events("box-a")]
    assert "LimitDetected" in reasons and "Resumed" in reasons
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 10)
    assert submits(world, "box-a", "main") == ["continue"], "sent exactly once"
