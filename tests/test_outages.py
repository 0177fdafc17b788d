"""Outages and isolation: the API server unreachable across a reset, watch streams cut with 410 Gone, one
box whose exec hangs or is refused beside healthy ones. The operator recovers by itself, resumes late rather
than never, and sends once."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from agentbox_sim.kube import ExecFault
from controller import constants as C
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in
from tests.test_resume_faults import MODES, claude_box, streaming, use_mode
from tests.test_resume_scenarios import at, reset_epoch, submits, tab_status

pytestmark = pytest.mark.component
USAGE = "/api/oauth/usage"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("terminal", MODES)
async def test_api_server_down_30s_across_the_reset_resumes_late_and_once(world: World, terminal: str):
    """The API server is unreachable for 30 s, from 10 s before the reset to 20 s after it (every request
    and every open exec connection, the live tmux stream included, is cut). Nothing is sent while the
    write-ahead cannot be written; once the server is back the operator recovers by itself and sends
    exactly one `continue`, late rather than never."""
    use_mode(world, terminal)
    world.start_operator()
    reset = await claude_box(world, 14.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 20)
    await streaming(world, terminal)
    await eventually(lambda: time.time() > reset - 10, 20, what="10 s before the reset")
    world.kube.set_outage(True)
    down_at = time.time()
    await eventually(lambda: time.time() > down_at + 30, 40, what="30 s of outage")
    assert submits(world, "box-a", "main") == [], "nothing is sent while status cannot be written ahead"
    world.kube.set_outage(False)
    up_at = time.time()
    await eventually(lambda: submits(world, "box-a", "main"), 60, what="continue after the outage")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"]
    sent = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    assert sent >= up_at
    print(f"{terminal}: API down {up_at - down_at:.1f} s; continue {sent - up_at:.2f} s after it came back, "
          f"{sent - reset:.1f} s after the reset")


def usage_condition(world: World) -> dict:
    sub = world.kube.get(f"{C.GROUP}/{C.VERSION}/{C.SUBSCRIPTION_PLURAL}", world.namespace, "claude-a") or {}
    return next((c for c in (sub.get("status") or {}).get("conditions") or [] if c["type"] == "UsageFetched"), {})


@pytest.mark.timeout(180)
@pytest.mark.parametrize("down", ["refuse", "5xx", "429"])
async def test_provider_down_at_the_reset_resumes_late_once_and_says_so(world: World, down: str):
    """The provider's usage endpoint is down when the reset comes (connection refused, 503, or 429 with a
    Retry-After longer than the test) and stays down: the reset cannot be confirmed, so the operator resumes
    on the screen's reset time (after the end of its printed minute) rather than never, sends once, and says
    so: the Resumed Event names the unconfirmed reset, the Subscription's UsageFetched is False."""
    world.settings = world.settings.model_copy(update={"usage_interval_s": 3.0, "usage_near_interval_s": 2.0})
    world.start_operator()
    # The screen prints the reset to the minute; the real reset is at second 55 of that minute, so the
    # unconfirmed resume (end of the printed minute + margin) comes a few seconds after the real reset.
    minute = math.ceil((time.time() + 12) / 60) * 60
    real = await claude_box(world, minute + 55 - time.time())
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited", 20)
    await eventually(lambda: usage_condition(world).get("status") == "True", 20, what="a usage read first")
    await world.provider.set_down(down, retry_after="3600" if down == "429" else None,
                                  path=None if down == "refuse" else USAGE)
    await eventually(lambda: usage_condition(world).get("status") == "False", 20, what="UsageFetched False")
    reason = usage_condition(world).get("reason")
    assert reason == ("Throttled" if down == "429" else "UpstreamUnavailable"), usage_condition(world)
    await eventually(lambda: submits(world, "box-a", "main"), real + 30 - time.time(), what="continue")
    sent = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    assert sent >= real, "never before the real reset"
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"]
    resumed = [e["message"] for e in world.events("box-a") if e["reason"] == "Resumed"]
    assert len(resumed) == 1 and "usage API could not be read" in resumed[0], resumed
    print(f"provider {down}: continue {sent - real:.1f} s after the real reset")
    await world.provider.set_down(None)
    if down != "429":  # a 429's Retry-After (an hour here) is honoured in full: no read before it ends
        await eventually(lambda: usage_condition(world).get("status") == "True", 20, what="UsageFetched True again")


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


async def test_provider_emulator_goes_down_as_a_real_one():
    """The emulator's down switch: refused connections (keep-alive connections reset), 503 with an HTML
    body, 429 with Retry-After; and back up on the same port."""
    import aiohttp

    from agentbox_sim.provider import ProviderEmulator

    async with ProviderEmulator() as emu, aiohttp.ClientSession() as http:
        emu.add_login("tok", "acct")
        auth = {"Authorization": "Bearer tok"}
        async with http.get(emu.url + USAGE, headers=auth) as resp:
            assert resp.status == 200
        await emu.set_down("refuse")
        with pytest.raises(aiohttp.ClientConnectionError):  # the kept-alive connection is reset
            async with http.get(emu.url + USAGE, headers=auth):
                pass
        with pytest.raises(aiohttp.ClientConnectorError):  # a new connection is refused
            async with aiohttp.ClientSession() as fresh, fresh.get(emu.url + USAGE, headers=auth):
                pass
        await emu.set_down("5xx", path=USAGE)
        async with http.get(emu.url + USAGE, headers=auth) as resp:
            assert resp.status == 503 and resp.content_type == "text/html"
        async with http.get(emu.url + "/api/oauth/profile", headers=auth) as resp:
            assert resp.status == 200, "only the usage path is down"
        await emu.set_down("429", retry_after="120", path=USAGE)
        async with http.get(emu.url + USAGE, headers=auth) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "120"
        await emu.set_down(None)
        async with http.get(emu.url + USAGE, headers=auth) as resp:
            assert resp.status == 200
