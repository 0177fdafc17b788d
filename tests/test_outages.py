"""Outages and isolation: the API server unreachable across a reset, watch streams cut with 410 Gone, one
box whose exec hangs or is refused beside healthy ones. The operator recovers by itself, resumes late rather
than never, and sends once."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentbox_sim.kube import ExecFault
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in
from tests.test_resume_faults import claude_box
from tests.test_resume_scenarios import at, reset_epoch, submits, tab_status

pytestmark = pytest.mark.component


async def test_api_server_down_across_the_reset_resumes_late_and_once(world: World):
    world.start_operator()
    reset = await claude_box(world, 8.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 20)
    await eventually(lambda: time.time() > reset - 2, 20, what="just before the reset")
    world.kube.set_outage(True)
    down_until = reset + 10   # unreachable from 2 s before the reset to 10 s after it
    await eventually(lambda: time.time() > down_until, 20, what="the outage")
    assert submits(world, "box-a", "main") == [], "nothing is sent while status cannot be written ahead"
    world.kube.set_outage(False)
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="continue after the outage")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"]
    assert world.agent_log("box-a", "main")[-1]["t"] >= down_until


async def test_watches_cut_with_410_gone_are_relisted(world: World):
    """After an etcd compaction every watch resumes into 410 Gone: the operator lists again and keeps
    serving (a box created afterwards gets its pod, and its tab is resumed)."""
    world.start_operator()
    reset = reset_epoch(6.0)
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, at(reset)), weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await eventually(lambda: any("watch=" in e.query for e in world.kube.journal), 10)
    world.kube.expire_watches()
    first = len(world.kube.journal)
    await eventually(lambda: any(e.status == 200 and "watch=" in e.query and "agentboxes" in e.path
                                 for e in world.kube.journal[first:]), 20, what="the AgentBox watch again")
    await world.add_box("box-a", "claude-code", "claude-a")
    await world.run_pod("box-a", [TabSpec("main", fake_agent_argv("claude-code", reset))])
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="continue after the 410")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"]


@pytest.mark.parametrize("mode", ["hang", "refuse"])
async def test_a_box_whose_exec_hangs_does_not_delay_another(world: World, mode: str):
    world.kube.exec_faults.append(ExecFault(mode=mode, pod="box-b", times=None))
    world.start_operator()
    reset = await claude_box(world, 8.0)
    await world.add_box("box-b", "claude-code", "claude-a")
    await world.run_pod("box-b", [TabSpec("main", fake_agent_argv("claude-code", reset))])
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="box-a resumed")
    sent = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    # Not held back by box-b's hanging calls (each lasts exec_timeout_s): the healthy box's continue comes
    # within the normal margin and verification time of its reset.
    assert sent - reset < world.settings.exec_timeout_s, f"box-a resumed {sent - reset:.1f} s after its reset"
    print(f"healthy box resumed {sent - reset:.2f} s after the reset while box-b's exec {mode}s")
    assert submits(world, "box-b", "main") == []
