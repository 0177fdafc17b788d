"""Detection levels 1 and 3 end to end: structured data (Claude Code's statusline input saved in
the box) and asking a human when a tab stalls with nothing recognised."""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in
from tests.harness.world_fixtures import FAST

pytestmark = pytest.mark.component


def tab(world: World, box: str = "box") -> dict:
    tabs = ((world.box(box) or {}).get("status") or {}).get("tabs") or []
    return tabs[0] if tabs else {}


async def setup(world: World, reset: float, *agent_args: str) -> None:
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                               weekly=(30.0, utc_in(86400)))
    await world.add_secret("login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("a", "anthropic", "login", "credentials.json")
    await world.add_box("box", "claude-code", "a")
    await world.run_pod("box", [TabSpec("main", fake_agent_argv("claude-code", reset, *agent_args))])


async def test_statusline_data_catches_a_turn_that_ended_without_a_banner(world: World):
    world.start_operator()
    reset = float(math.ceil(time.time() + 6))
    statusline = world.pod_dir("box") / ".agentbox" / "statusline.json"
    statusline.parent.mkdir(parents=True, exist_ok=True)
    statusline.write_text(json.dumps({"session_id": "s", "rate_limits": {
        "five_hour": {"used_percentage": 100, "resets_at": int(reset)},
        "seven_day": {"used_percentage": 30, "resets_at": int(reset) + 86400}}}))
    await setup(world, reset, "--wrap-up")
    await eventually(lambda: tab(world).get("state") == "RateLimited", 15, what="structured limit")
    assert tab(world)["detectedBy"] == "structured:statusline"
    assert tab(world)["resetsAt"] == datetime.fromtimestamp(reset, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        await eventually(lambda: [e for e in world.agent_log("box", "main") if e["event"] == "submit"], 30)
    except TimeoutError:
        print("TAB", tab(world), [(e["reason"], e["message"]) for e in world.events("box")], world.screen("box", "main"))
        raise
    sent = [e for e in world.agent_log("box", "main") if e["event"] == "submit"]
    assert [e["text"] for e in sent] == ["continue"] and sent[0]["t"] >= reset


async def test_stalled_tab_asks_a_human_who_answers_with_the_annotation(tmp_path):
    async with World(tmp_path / "w", FAST.model_copy(update={"stall_s": 3.0})) as world:
        world.start_operator()
        await setup(world, time.time() - 60, "--frozen")
        world.provider.set_windows("acct-a", five_hour=(20.0, utc_in(3600)), weekly=(30.0, utc_in(86400)))
        await eventually(lambda: tab(world).get("state") == "NeedsAttention", 20, what="stalled tab flagged")
        assert "No progress" in tab(world)["message"] and "Running" in tab(world)["message"]
        cond = next(c for c in world.box("box")["status"]["conditions"] if c["type"] == "NeedsAttention")
        assert cond["status"] == "True"
        await eventually(lambda: any(e["reason"] == "Stalled" and e["type"] == "Warning" and "Running" in e["message"]
                                     for e in world.events("box")), 10)
        assert not [e for e in world.agent_log("box", "main") if e["event"] in ("key", "submit")], \
            "nothing is typed until a human answers"
        await world.patch(world.box_path("box"), {"metadata": {"annotations": {"agentbox.dev/resume-now": "1"}}})
        await eventually(lambda: [e for e in world.agent_log("box", "main") if e["event"] == "submit"], 15)
        assert [e["text"] for e in world.agent_log("box", "main") if e["event"] == "submit"] == ["continue"]
        await eventually(lambda: "agentbox.dev/resume-now" not in
                         (world.box("box")["metadata"].get("annotations") or {}), 10, what="annotation consumed")


async def test_transcript_entry_catches_a_limit_without_a_banner(world: World):
    """No statusline helper in this box: the agent's transcript (Claude Code 2.1.328 format) is read."""
    world.start_operator()
    reset = float(math.ceil(time.time() + 6))
    fixture = Path(__file__).parent / "fixtures" / "real-transcripts" / "claude-2.1.328-usage-limit.jsonl"
    entry = json.loads(fixture.read_text().splitlines()[0])
    entry["apiErrorParams"]["rate_limit_info"]["resetsAt"] = int(reset)
    transcript = world.pod_dir("box") / ".claude" / "projects" / "-work-app" / "session.jsonl"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text(json.dumps({"type": "user", "message": {"content": "go"}}, separators=(",", ":")) + "\n"
                          + json.dumps(entry, separators=(",", ":")) + "\n")
    await setup(world, reset, "--wrap-up")
    await eventually(lambda: tab(world).get("state") == "RateLimited", 15, what="structured limit")
    assert tab(world)["detectedBy"] == "structured:transcript"
    await eventually(lambda: [e for e in world.agent_log("box", "main") if e["event"] == "submit"], 30)
    sent = [e for e in world.agent_log("box", "main") if e["event"] == "submit"]
    assert [e["text"] for e in sent] == ["continue"] and sent[0]["t"] >= reset


async def test_one_limit_keeps_one_identity_when_the_exact_reset_drops_out(world: World):
    """issue 13: the statusline gives the exact reset (hh:mm:ss); at that instant it drops out of the
    structured data and the screen's minute-rounded time takes over. Still the same limit: one
    LimitDetected (none with a reset in the past) and `continue` no sooner than the exact reset plus
    the margin."""
    world.start_operator()
    reset = float(math.ceil(time.time() + 10))
    if reset % 60 < 5:
        reset += 7  # the printed minute must differ from the exact reset
    statusline = world.pod_dir("box") / ".agentbox" / "statusline.json"
    statusline.parent.mkdir(parents=True, exist_ok=True)
    statusline.write_text(json.dumps({"session_id": "s", "rate_limits": {
        "five_hour": {"used_percentage": 100, "resets_at": int(reset)},
        "seven_day": {"used_percentage": 30, "resets_at": int(reset) + 86400}}}))
    await setup(world, reset)
    await eventually(lambda: tab(world).get("state") == "RateLimited", 15, what="the limit")
    await eventually(lambda: [e for e in world.agent_log("box", "main") if e["event"] == "submit"],
                     reset - time.time() + 30, what="continue")
    sent = [e for e in world.agent_log("box", "main") if e["event"] == "submit"]
    assert sent[0]["text"] == "continue"
    assert sent[0]["t"] >= reset + FAST.resume_margin_s - 0.05, f"sent {sent[0]['t'] - reset:.1f} s after the reset"
    detected = [e["message"] for e in world.events("box") if e["reason"] == "LimitDetected"]
    assert len(detected) == 1, detected


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+05:00"])
async def test_resume_at_annotation_out_of_range_is_ignored_not_a_crash(world: World, value: str):
    """An AgentBox author writes `agentbox.dev/resume-at` with an instant that parses but leaves the
    datetime range once converted to UTC (year 10000 / year 0): the tab watcher must not fail every
    pass; the limited tab is still resumed at its reset."""
    world.start_operator()
    reset = float(math.ceil(time.time() + 8))
    await setup(world, reset)
    await world.patch(world.box_path("box"), {"metadata": {"annotations": {"agentbox.dev/resume-at": value}}})
    await eventually(lambda: [e for e in world.agent_log("box", "main") if e["event"] == "submit"], 40,
                     what="the limited tab resumed at its reset")
