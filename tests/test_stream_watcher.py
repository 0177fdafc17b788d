"""The tab watcher on the live tmux stream (settings.tmux_stream): the real operator, exec streamed by the
emulator into real tmux, scripted agents. The whole scenario suites also run in this mode with
AGENTBOX_TEST_TMUX_STREAM=1."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from harness.world_fixtures import FAST

from agentbox_sim.world import World, eventually

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
    attach = [a for *_, a in world.kube.exec_streams if a[1:3] == ("-C", "attach-session")]
    assert len(attach) == 1, "one long-lived stream"
