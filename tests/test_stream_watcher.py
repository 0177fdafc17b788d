"""The tab watcher on the live tmux stream (settings.tmux_stream): the real operator, exec streamed by the
emulator into real tmux, scripted agents. The whole scenario suites also run in this mode with
AGENTBOX_TEST_TMUX_STREAM=1."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from harness.world_fixtures import FAST

from agentbox_sim.fake_agent import claude_clock
from agentbox_sim.world import World, eventually, utc_in

from test_resume_scenarios import claude_world, submits, tab_status

pytestmark = pytest.mark.component


@pytest_asyncio.fixture
async def sworld(tmp_path: pathlib.Path) -> AsyncIterator[World]:
    async with World(tmp_path / "world", FAST.model_copy(update={"tmux_stream": True})) as w:
        yield w


def condition(world: World, box: str, type_: str) -> dict:
    return next((c for c in ((world.box(box) or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == type_), {})


def tmux_execs(world: World) -> list[tuple[str, ...]]:
    return [r.argv for r in world.kube.exec_journal if r.argv[:1] == ("tmux",)]


async def streaming_box(world: World) -> None:
    """Box `box-a` on subscription `claude-a` (20 % used), one `sh` tab, its live stream attached and its
    tab seen by the operator (already started)."""
    from agentbox_sim.world import TabSpec, claude_login, utc_in

    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(20.0, utc_in(3600)), weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a")
    await world.run_pod("box-a", [TabSpec("main", ["sh"])])
    await eventually(lambda: condition(world, "box-a", "TerminalStream").get("status") == "True", 15,
                     what="stream attached")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state"), 10, what="tab seen")


async def test_limit_resumed_over_the_stream_and_waiting_costs_no_exec(sworld: World) -> None:
    world = sworld
    world.start_operator()
    await claude_world(world, 8.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 15,
                     what="limit detected")
    await eventually(lambda: condition(world, "box-a", "TerminalStream").get("status") == "True", 10,
                     what="stream attached")
    before = len(tmux_execs(world))
    await eventually(lambda: submits(world, "box-a", "main") == ["continue"], 30, what="continue sent")
    # waiting for the reset and typing `continue` ran no tmux exec: all of it went over the one stream
    # (polling runs two tmux execs per pass)
    assert tmux_execs(world)[before:] == []
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 10)
    attach = [a for *_, a in world.kube.exec_streams if "attach-session" in a]
    assert len(attach) == 1, "one long-lived stream"


async def test_structured_files_are_read_when_a_tab_stops_not_at_every_pass(sworld: World) -> None:
    """On the stream, the agent's structured files (statusline, transcripts) are read when a tab's state
    changes (a turn ended, a limit came), not at every pass: passes whose screens changed but whose tabs
    stay in the same state reuse the last read."""
    from harness.world_fixtures import watcher_passes

    world = sworld
    world.start_operator()
    await streaming_box(world)

    def reads() -> int:  # every exec in the box that is not tmux is a structured read (or a login push)
        return sum(1 for r in world.kube.exec_journal if r.pod == "box-a" and r.argv[:1] != ("tmux",))
    state, first = tab_status(world, "box-a", "main").get("state"), reads()
    for i in range(3):  # the screen changes and a pass runs (a box update wakes it); the state stays
        passes = watcher_passes(world, "box-a")
        world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "-l", f"echo line-{i}")
        world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "Enter")
        await eventually(lambda i=i: f"line-{i}\n" in world.screen("box-a", "main") + "\n", 10)
        await world.patch(world.box_path("box-a"), {"metadata": {"annotations": {"test/pass": str(i)}}})
        await eventually(lambda p=passes: watcher_passes(world, "box-a") > p, 10, what="a pass")
    assert tab_status(world, "box-a", "main").get("state") == state
    assert reads() == first, "no structured read while no tab changed state"
    # the tab stops on a limit: its files are read once more
    # a reset two hours from now: a fixed clock time (say 11:59pm) read between 11:59pm and 0:59am is a
    # reset that just passed (Claude's time-only rule), and the tab is rightly not limited then
    clock = claude_clock(utc_in(7200), "UTC")
    world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "-l",
               f"printf '  \\342\\216\\277  You'\"'\"'ve hit your 5-hour limit \\302\\267 resets {clock} (UTC)\\n'")
    world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "Enter")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 15, what="limit seen")
    assert reads() > first


async def test_reconnects_into_a_box_without_its_session_start_no_tmux_server(sworld: World) -> None:
    """While the box has no tmux session yet (its entrypoint has not started it), the stream's attempts start
    no tmux server in the box. `tmux -C attach-session` alone starts one, which exits at once for want of a
    session; a `tmux new-session` of the entrypoint that reached it failed with "server exited unexpectedly"
    (about 1 in 13 when the two meet, tmux 3.3a), and test_box_reconcile's test_ready_follows_the_pod then
    waited in vain for Ready. A server's socket file stays after it exits: none may appear."""
    from agentbox_sim.world import claude_login

    world = sworld
    world.start_operator()
    world.provider.add_login("tok-a", "acct-a")
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a")
    await world.kube.wait_for("v1/pods", world.namespace, "box-a", lambda o: o is not None, timeout=15)
    await world.kube.set_pod_phase(world.namespace, "box-a", "Running")

    def attaches_ended() -> int:
        return sum(1 for r in world.kube.exec_journal if r.pod == "box-a" and "attach-session" in r.argv)

    await eventually(lambda: attaches_ended() >= 2, 15, what="two stream attempts into the box without a session")
    assert condition(world, "box-a", "Ready").get("reason") == "SessionMissing"
    assert not world.sockets(world.namespace, "box-a").exists(), "a stream attempt started a tmux server in the box"
    # The entrypoint starts the session now: it succeeds (world.tmux checks), and the stream attaches to it.
    world.tmux("box-a", "new-session", "-d", "-s", "agentbox", "-n", "main")
    # The stream reconnects with backoff (1, 2, 4, 8 s... times 0.5-1.5): the next attempt may be 12 s away.
    await eventually(lambda: condition(world, "box-a", "TerminalStream").get("status") == "True", 30,
                     what="stream attached once the session exists")
    await eventually(lambda: condition(world, "box-a", "Ready").get("status") == "True", 10, what="Ready")
