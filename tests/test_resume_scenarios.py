"""The main loop end to end: the real kopf operator against the emulated API server, pod exec into
real tmux, scripted agents printing real limit lines, the provider usage emulator on loopback."""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import datetime, timezone

import pytest

from agentbox_sim.world import TabSpec, World, claude_login, codex_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component


def submits(world: World, pod: str, tab: str) -> list[str]:
    return [e["text"] for e in world.agent_log(pod, tab) if e["event"] == "submit"]


def tab_status(world: World, box: str, tab: str) -> dict:
    for t in ((world.box(box) or {}).get("status") or {}).get("tabs") or []:
        if t["name"] == tab:
            return t
    return {}


def reset_epoch(seconds: float) -> float:
    """A reset instant on a whole second (the providers' epochs have one-second resolution)."""
    return float(math.ceil(time.time() + seconds))


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


async def claude_world(world: World, reset_in: float, *agent_args: str, box: str = "box-a") -> float:
    reset = reset_epoch(reset_in)
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, at(reset)), weekly=(40.0, utc_in(86400)))
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
    await eventually(lambda: {"LimitDetected", "Resumed"} <= {e["reason"] for e in world.events("box-a")}, 10,
                     what="LimitDetected and Resumed Events")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 10)
    assert submits(world, "box-a", "main") == ["continue"], "sent exactly once"


async def codex_world(world: World, reset_in: float, *agent_args: str) -> float:
    """A Codex box `box-x` on `codex-a` (account `acct-x`, 5-hour window at 100 % until the reset `reset_in`
    seconds ahead), its tab running the scripted Codex behind a `codex` shim; returns the reset (epoch s)."""
    reset = reset_epoch(reset_in)
    world.provider.add_login("tok-x", "acct-x")
    world.provider.set_windows("acct-x", five_hour=(100.0, at(reset)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("codex-login", "auth.json", codex_login("tok-x", "acct-x"))
    await world.add_subscription("codex-a", "openai", "codex-login", "auth.json")
    await world.add_box("box-x", "codex", "codex-a")
    await world.run_pod("box-x", [TabSpec("main", ["codex"])],
                        shims={"codex": fake_agent_argv("codex", reset, *agent_args)})
    return reset


async def test_codex_tab_restarted_with_resume_last_then_continued(world: World):
    world.start_operator()
    reset = await codex_world(world, 6.0)
    await eventually(lambda: tab_status(world, "box-x", "main").get("state") == "RateLimited", 15, what="limit detected")
    try:
        await eventually(lambda: submits(world, "box-x", "main"), 40, what="continue sent")
    except TimeoutError:
        print("SCREEN", world.screen("box-x", "main")); print("STATUS", world.box("box-x")["status"]); print("EVENTS", [(e["reason"], e["message"]) for e in world.events()]); print("LOG", world.agent_log("box-x", "main"))
        raise
    log = world.agent_log("box-x", "main")
    starts = [e["argv"] for e in log if e["event"] == "start"]
    assert starts == [[], ["resume", "--last"]], "the agent was restarted with `codex resume --last`"
    exit_at = next(e["t"] for e in log if e["event"] == "exit")
    submit_at = next(e["t"] for e in log if e["event"] == "submit")
    assert exit_at >= reset, "the restart happens after the reset, not before"
    assert submit_at > exit_at
    assert submits(world, "box-x", "main") == ["continue"]
    await eventually(lambda: any(e["event"] == "working" for e in world.agent_log("box-x", "main")), 10)
    await eventually(lambda: any(e["reason"] == "Resumed" and "codex resume --last" in e["message"]
                                 for e in world.events("box-x")), 10, what="Resumed Event")


async def test_reset_not_reached_yet_is_rescheduled_from_usage(world: World):
    """The screen's (minute-rounded) reset passes, but the usage API says the window is still at
    100 % until later: nothing is sent until then."""
    world.start_operator()
    shown = reset_epoch(3.0)
    real_reset = shown + 9
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, at(real_reset)), weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a")
    await world.run_pod("box-a", [TabSpec("main", fake_agent_argv("claude-code", shown))])
    await eventually(lambda: any(e["reason"] == "ResetNotYet" for e in world.events("box-a")), 20, what="ResetNotYet")
    assert submits(world, "box-a", "main") == []
    await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue sent")
    sent_at = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    assert sent_at >= real_reset, "nothing is sent before the usage window really reset"
    assert submits(world, "box-a", "main") == ["continue"]


async def test_recent_typing_holds_the_resume_until_the_human_is_idle(world: World):
    from agentbox_sim.world import Human

    world.start_operator()
    reset = await claude_world(world, 5.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 15)
    human = Human(world, "box-a")
    try:
        last_key = time.time()
        # Keep typing (a character and its erasure) across the reset: the prompt stays empty.
        while time.time() < reset + 4:
            human.type("x")
            await asyncio.sleep(0.3)
            human.type("\x7f")
            last_key = time.time()
            await asyncio.sleep(0.7)
        assert submits(world, "box-a", "main") == [], "nothing is sent while a human types"
        await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue once idle")
        sent_at = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
        assert sent_at >= last_key + world.settings.human_idle_s - 1.0  # tmux activity has 1 s resolution
        assert submits(world, "box-a", "main") == ["continue"]
    finally:
        human.close()


async def test_permission_prompt_is_left_alone(world: World):
    world.start_operator()
    reset = await claude_world(world, 2.0, "--prompt")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "AwaitingInput", 15)
    await asyncio.sleep(max(0.0, reset - time.time()) + 5)
    keys = [e for e in world.agent_log("box-a", "main") if e["event"] in ("key", "submit")]
    assert keys == [], "no key is sent to a tab waiting on a permission prompt"
    assert tab_status(world, "box-a", "main")["state"] == "AwaitingInput"


async def test_agent_that_resumed_by_itself_gets_nothing(world: World):
    world.start_operator()
    await claude_world(world, 3.0, "--auto-continue", "--auto-continue-after", "1")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 15)
    assert "Claude Code continues by itself" in tab_status(world, "box-a", "main")["message"]
    await eventually(lambda: any(e["event"] == "working" for e in world.agent_log("box-a", "main")), 20)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 10)
    await asyncio.sleep(world.settings.auto_continue_grace_s + 2)
    keys = [e for e in world.agent_log("box-a", "main") if e["event"] in ("key", "submit")]
    assert keys == [], "Claude Code's own continue is left to act; nothing is typed"


async def test_failed_native_continue_gets_a_continue_after_the_grace(world: World):
    world.start_operator()
    reset = await claude_world(world, 3.0, "--auto-continue", "--auto-continue-fails")
    await eventually(lambda: submits(world, "box-a", "main"), 100, what="continue after grace")
    sent_at = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    assert sent_at >= reset + world.settings.auto_continue_grace_s - 1
    assert submits(world, "box-a", "main") == ["continue"]


async def test_half_typed_line_stays_intact(world: World):
    world.start_operator()
    await claude_world(world, 4.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 15)
    world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "-l", "fix the parser and")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "NeedsAttention", 20)
    await asyncio.sleep(2)
    assert "fix the parser and" in world.screen("box-a", "main")
    assert submits(world, "box-a", "main") == []
    box = world.box("box-a")
    cond = next(c for c in box["status"]["conditions"] if c["type"] == "NeedsAttention")
    assert cond["status"] == "True" and "half-typed" in cond["message"]
    await eventually(lambda: any(e["reason"] == "PromptNotEmpty" and e["type"] == "Warning"
                                 for e in world.events("box-a")), 10, what="PromptNotEmpty Event")


async def test_limit_menu_answered_by_its_stop_and_wait_number(world: World):
    world.start_operator()
    await claude_world(world, 5.0, "--menu", "--menu-upgrade-first")
    await eventually(lambda: any(e["event"] == "menu" for e in world.agent_log("box-a", "main")), 15)
    menu = [e for e in world.agent_log("box-a", "main") if e["event"] == "menu"]
    assert menu == [dict(menu[0], choice="stop")], "option 2 'Stop and wait' was chosen, never Upgrade"
    await eventually(lambda: submits(world, "box-a", "main"), 30)
    assert submits(world, "box-a", "main") == ["continue"]


@pytest.mark.parametrize("terminal", ["poll", "stream"])
async def test_a_limit_menu_that_stays_open_is_answered_once_then_left_to_a_human(world: World, terminal: str):
    """Before: the menu's number was pressed again on every pass (every second) while it stayed open."""
    world.settings = world.settings.model_copy(update={"tmux_stream": terminal == "stream"})
    world.start_operator()
    await claude_world(world, 30.0, "--menu", "--menu-sticky")
    await eventually(lambda: any(e["reason"] == "LimitMenuStillOpen" and e["type"] == "Warning"
                                 for e in world.events("box-a")), 20 + world.settings.settle_s,
                     what="the Warning that the menu stays open")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "NeedsAttention", 10)
    # Time for several passes (a pass a second re-pressed the key before): the count must not move.
    warned = time.time()
    await eventually(lambda: time.time() > warned + 3 * world.settings.scan_interval_s + 3, 20, what="more passes")
    keys = [e for e in world.agent_log("box-a", "main") if e["event"] == "key" and e.get("mode") == "menu"]
    assert [k["key"] for k in keys] == ["1"], "the menu's number was pressed once for the limit event"
    assert [e["reason"] for e in world.events("box-a")].count("LimitMenuStillOpen") == 1
    assert "menuAnsweredFor" in tab_status(world, "box-a", "main")


async def test_controller_restarted_between_detection_and_reset_resumes_once(world: World):
    world.start_operator()
    reset = await claude_world(world, 10.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("resumeAt"), 15, what="resumeAt in status")
    await world.stop_operator()
    assert time.time() < reset, "the controller is down before the reset"
    world.start_operator()
    await eventually(lambda: submits(world, "box-a", "main"), 30)
    await asyncio.sleep(world.settings.settle_s + 3)
    assert submits(world, "box-a", "main") == ["continue"]


async def test_resume_is_also_sent_to_the_webhook(world: World, monkeypatch: pytest.MonkeyPatch):
    """Events always; the optional webhook (generic JSON body) gets the resume too, without secrets."""
    from aiohttp import web

    received: list[dict] = []

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
        await claude_world(world, 4.0)
        await eventually(lambda: any("resume" in json.dumps(r) for r in received), 30, what="webhook call")
        body = json.dumps(received)
        assert "box-a" in body and "continue" in body
        assert "tok-a" not in body, "no credential in a notification"
    finally:
        await runner.cleanup()


async def test_codex_relative_wait_read_at_every_pass_resumes_once(world: World):
    """Codex printing the wait, not the clock ("try again in 1 minute", corpus X02): every poll reads the same
    line again with its own `now`, which put the reset a minute after each pass, a new limit each minute (a
    LimitDetected Event a minute, the resume pushed on and never reached). The first reading stands: one
    LimitDetected, then `codex resume --last` and one continue after the reset the usage read confirms."""
    world.start_operator()
    reset = await codex_world(world, 20.0, "--relative")
    await eventually(lambda: tab_status(world, "box-x", "main").get("state") == "RateLimited", 15,
                     what="limit detected")
    assert "try again in 1 minute" in world.screen("box-x", "main")
    # the first reading: a minute after the limit was seen (+ margin); the passes in that minute read it again
    await eventually(lambda: submits(world, "box-x", "main"), 60 + world.settings.resume_margin_s + 30,
                     what="continue after the first reading's reset")
    log = world.agent_log("box-x", "main")
    assert [e["argv"] for e in log if e["event"] == "start"] == [[], ["resume", "--last"]]
    assert next(e["t"] for e in log if e["event"] == "submit") >= reset
    await eventually(lambda: any(e["event"] == "working" for e in world.agent_log("box-x", "main")), 10)
    assert submits(world, "box-x", "main") == ["continue"]
    assert [e["reason"] for e in world.events("box-x")].count("LimitDetected") == 1, \
        [(e["reason"], e["message"]) for e in world.events("box-x")]
