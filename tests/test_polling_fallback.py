"""The polling fallback keeps working: a representative set of scenarios run again with the live tmux stream
off (`tmux_stream: false`, what the controller does by itself where control mode cannot be used: no tmux
in the image, tmux older than 3.2, or while a dropped stream reconnects). The whole suites run on the
stream (the default); `AGENTBOX_TEST_TMUX_STREAM=0` runs every scenario on polling.

The scenarios are the suites' own functions, collected here a second time under this module's `world`
fixture (pytest resolves fixtures from the module that collects a test)."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from harness.world_fixtures import FAST

from agentbox_sim.world import World

from test_resume_scenarios import (  # noqa: F401 - collected here on polling
    test_claude_tab_resumed_at_reset,
    test_codex_tab_restarted_with_resume_last_then_continued,
    test_half_typed_line_stays_intact,
    test_limit_menu_answered_by_its_stop_and_wait_number,
    test_recent_typing_holds_the_resume_until_the_human_is_idle,
)
from test_rotation_scenarios import (  # noqa: F401
    test_codex_box_is_stopped_before_its_login_changes_then_resumed,
    test_limit_line_switches_to_the_subscription_with_most_headroom,
    test_reserve_stops_the_box_and_restores_it_after_the_reset,
)
from test_storms import test_half_typed_line_after_the_reset_is_reported_once_and_not_spun_on  # noqa: F401

pytestmark = pytest.mark.component


@pytest_asyncio.fixture
async def world(tmp_path: pathlib.Path) -> AsyncIterator[World]:
    async with World(tmp_path / "world", FAST.model_copy(update={"tmux_stream": False})) as w:
        yield w


async def test_polling_world_polls(world: World) -> None:
    """This module's world runs without the stream: every pass lists the tabs by one-shot exec."""
    from test_resume_scenarios import claude_world

    from agentbox_sim.world import eventually

    assert world.settings.tmux_stream is False
    world.start_operator()
    await claude_world(world, 3600.0)
    await eventually(lambda: sum(1 for r in world.kube.exec_journal if "list-windows" in r.argv) >= 2, 20,
                     what="two polling passes")
    assert not [a for *_, a in world.kube.exec_streams if "attach-session" in a], "no stream opened"
    await eventually(lambda: next((c for c in (world.box("box-a").get("status") or {}).get("conditions") or []
                                   if c["type"] == "TerminalStream"), {}).get("reason") == "StreamDisabled", 10,
                     what="TerminalStream False, reason StreamDisabled")
