"""Storms (issue 9, finding 5): a state that does not change must not be re-handled at 0 s, nor
re-announced. The real operator runs against the emulator; every exec call and every Event is in
the emulator's journal, so each scenario counts watcher passes, exec calls, Events and webhook calls
while the box sits in one unchanging state.

A pass is counted by the controller's pass counter (`harness.world_fixtures.watcher_passes`:
`agentbox_watcher_passes_total`, on the live stream as when polling). Instead of sleeping for a fixed window, each test waits for a number of
passes and checks how long they took: a sane watcher needs about a scan interval per pass; a hot loop does
them in milliseconds. On the live stream an unchanged box is only re-passed every `stream_rescan_s`; these
worlds set it to the scan interval so the unchanged state IS re-handled (what must not spin nor
re-announce) in both modes.
"""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from typing import Any

import pytest

import pytest_asyncio

from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component

BOX = "box-a"


@pytest_asyncio.fixture
async def world(tmp_path):
    """The usual test world with a 2 s scan interval (and stream rescan), so a pass loop is told from a
    sane one by a wide margin even on a loaded machine (an exec call takes up to ~0.2 s there)."""
    from harness.world_fixtures import FAST

    async with World(tmp_path / "world", FAST.model_copy(update={"scan_interval_s": 2.0,
                                                                "stream_rescan_s": 2.0})) as w:
        yield w


def passes(world: World, pod: str = BOX) -> int:
    from harness.world_fixtures import watcher_passes

    return watcher_passes(world, pod)


def exec_calls(world: World, pod: str = BOX) -> int:
    return sum(1 for r in world.kube.exec_journal if r.pod == pod)


def events(world: World, reason: str, box: str = BOX) -> list[dict[str, Any]]:
    return [e for e in world.events(box) if e.get("reason") == reason]


def occurrences(world: World, reason: str, box: str = BOX) -> int:
    """How many times an Event was posted, counting the `count` of an aggregated one."""
    return sum(int(e.get("count") or 1) for e in events(world, reason, box))


def tab_status(world: World, tab: str = "main", box: str = BOX) -> dict[str, Any]:
    for t in ((world.box(box) or {}).get("status") or {}).get("tabs") or []:
        if t["name"] == tab:
            return t
    return {}


def submits(world: World, tab: str = "main", pod: str = BOX) -> list[str]:
    return [e["text"] for e in world.agent_log(pod, tab) if e["event"] == "submit"]


async def claude_box(world: World, reset_in: float, *agent_args: str, **spec: Any) -> float:
    reset = float(math.ceil(time.time() + reset_in))
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                               weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box(BOX, "claude-code", "claude-a", **spec)
    await world.run_pod(BOX, [TabSpec("main", fake_agent_argv("claude-code", reset, *agent_args))])
    return reset


async def steady_passes(world: World, n: int = 4) -> tuple[float, int]:
    """Wait for `n` more watcher passes; return (seconds they took, exec calls made meanwhile)."""
    start, calls, t0 = passes(world), exec_calls(world), time.monotonic()
    await eventually(lambda: passes(world) >= start + n, n * world.settings.scan_interval_s * 4 + 10,
                     every=0.05, what=f"{n} watcher passes")
    return time.monotonic() - t0, exec_calls(world) - calls


def assert_not_hot(world: World, took: float, calls: int, n: int = 4) -> None:
    # n passes after an arbitrary instant need at least n-1 whole scan intervals.
    floor = (n - 1) * world.settings.scan_interval_s * 0.8
    assert took >= floor, f"{n} passes in {took:.2f} s ({calls} exec calls): the watcher spins"
    assert calls <= n * 6, f"{calls} exec calls in {n} passes"


async def test_half_typed_line_after_the_reset_is_reported_once_and_not_spun_on(world: World):
    world.start_operator()
    await claude_box(world, 3.0)
    await eventually(lambda: tab_status(world).get("state") == "RateLimited", 15, what="limit detected")
    world.tmux(BOX, "send-keys", "-t", "=agentbox:main", "-l", "fix the parser and")
    await eventually(lambda: tab_status(world).get("state") == "NeedsAttention", 20, what="NeedsAttention")
    took, calls = await steady_passes(world)
    assert_not_hot(world, took, calls)
    assert occurrences(world, "PromptNotEmpty") == 1, events(world, "PromptNotEmpty")
    assert submits(world) == [] and "fix the parser and" in world.screen(BOX, "main")
    assert "resumeAt" not in tab_status(world), "a tab held for a human has no resume instant"

    # The human clears the line: the tab is resumed at once (the reset is long past).
    world.tmux(BOX, "send-keys", "-t", "=agentbox:main", *["BSpace"] * len("fix the parser and"))
    await eventually(lambda: submits(world) == ["continue"], 20, what="continue once the line is cleared")


async def test_limit_menu_without_a_stop_option_is_reported_once_and_not_spun_on(world: World):
    world.start_operator()
    await claude_box(world, 2.0, "--menu", "--menu-no-stop")
    await eventually(lambda: tab_status(world).get("state") == "NeedsAttention", 20, what="NeedsAttention")
    took, calls = await steady_passes(world)
    assert_not_hot(world, took, calls)
    assert occurrences(world, "NeedsAttention") == 1, events(world, "NeedsAttention")
    keys = [e for e in world.agent_log(BOX, "main") if e["event"] in ("key", "submit", "menu")]
    assert keys == [], "nothing is pressed in a menu without a 'Stop and wait' option"


async def test_parked_tab_is_announced_once_and_counts_the_resumes_sent(world: World,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """The limit keeps coming back after the printed reset: after max_attempts sends the tab is
    parked for a human, with ONE Warning and ONE webhook call whose message counts the sends."""
    from aiohttp import web

    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    monkeypatch.setenv("AGENTBOX_WEBHOOK_URL", f"http://127.0.0.1:{port}/hook")
    try:
        world.start_operator()
        await claude_box(world, 2.0, "--refuse-after-reset", "100")
        await eventually(lambda: events(world, "ResumeNotTakingEffect"), 60, what="the tab parked")
        took, calls = await steady_passes(world)
        assert_not_hot(world, took, calls)
        sends = len(submits(world))
        assert sends == world.settings.max_attempts, submits(world)
        parked = events(world, "ResumeNotTakingEffect")
        assert occurrences(world, "ResumeNotTakingEffect") == 1, parked
        assert f"after {sends} resumes" in parked[0]["message"], parked[0]["message"]
        assert f"after {sends} resumes" in tab_status(world)["message"]
        assert tab_status(world)["attempts"] == sends
        attention = [r for r in received if r.get("kind") == "needs_attention"]
        assert len(attention) == 1, json.dumps(received)
    finally:
        await runner.cleanup()


async def test_invalid_user_patterns_are_reported_once_each(world: World):
    bad = ["(unclosed", "a{2,1}", "[z-a]", "(?P<x>a)(?P<x>b)", "*start"]
    world.start_operator()
    await claude_box(world, 3600.0, detection={"patterns": [{"regex": r, "kind": "usage"} for r in bad]})
    await eventually(lambda: len(events(world, "InvalidPattern")) >= len(bad), 20, what="InvalidPattern Events")
    await steady_passes(world)
    posted = events(world, "InvalidPattern")
    assert occurrences(world, "InvalidPattern") == len(bad), [(e["message"], e.get("count")) for e in posted]
    for i in range(len(bad)):
        assert any(f"spec.detection.patterns[{i}].regex" in e["message"] for e in posted), i
    cond = next(c for c in world.box(BOX)["status"]["conditions"] if c["type"] == "InputIgnored")
    assert cond["status"] == "True" and cond["reason"] == "InvalidPattern"
    assert all(f"spec.detection.patterns[{i}].regex" in cond["message"] for i in range(len(bad)))
