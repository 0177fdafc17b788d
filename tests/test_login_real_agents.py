"""The login lifecycle with the real CLIs: two Claude Code boxes share one subscription, two Codex
boxes another; the controller refreshes the logins long before the agents would and pushes them.
The CLIs' own refresh calls are answered by the provider emulator (Claude Code through a CONNECT
tunnel for platform.claude.com and the test CA; Codex through CODEX_REFRESH_TOKEN_URL_OVERRIDE),
whose refresh tokens are single-use (reuse revokes the chain).

Access tokens live 330 s and the controller renews them 320 s before expiry, so every ~10 s a token
reaches the point where, without the controller, the agents would refresh (5 minutes before expiry).

Phase 1: prompts in every box across many renewals: every model call succeeds, no agent refreshes,
no refresh token is used twice. Phase 2 (the fallback): the controller stops, a Claude box refreshes
by itself once its token gets within 5 minutes of expiry; the restarted controller adopts that login and
passes it to the other box, which works on without refreshing (a second refresh would log both out).

Skipped only when npm is missing (and the CLIs are not already in .agents/).
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from controller.providers.credentials import parse_login
from agentbox_sim.real_agents import RealAgents
from agentbox_sim.world import TabSpec, World, eventually

from harness.world_fixtures import FAST

pytestmark = [pytest.mark.component]

TTL = 330.0
LEAD = 320.0
REAL = FAST.model_copy(update={
    "auto_continue_grace_s": 150.0, "restart_timeout_s": 40.0, "verify_timeout_s": 8.0, "settle_s": 6.0,
    "exec_timeout_s": 15.0, "usage_interval_s": 30.0, "login_refresh_before_s": LEAD, "login_retry_s": 2.0,
})
TOKEN_PATHS = ("/v1/oauth/token", "/oauth/token")


@pytest_asyncio.fixture
async def real(tmp_path: pathlib.Path, agents_installed: None) -> AsyncIterator[tuple[World, RealAgents]]:
    async with World(tmp_path / "world", REAL) as world:
        world.settings = world.settings.model_copy(update={
            "anthropic_token_url": world.provider.url + "/v1/oauth/token",
            "openai_token_url": world.provider.url + "/oauth/token"})
        world.provider.token_ttl_s = {"anthropic": TTL, "openai": TTL}
        agents = RealAgents(world, route_token_endpoints=True)
        try:
            await agents.start()
            yield world, agents
        finally:
            await world.stop_operator()
            world.sockets.close()
            await agents.cleanup()
            assert agents.processes() == [], "every process of the run is stopped"


def keys(world: World, box: str, *args: str) -> None:
    world.tmux(box, "send-keys", "-t", "=agentbox:main", *args)


async def prompt(world: World, box: str, text: str) -> None:
    keys(world, box, "-l", text)
    await asyncio.sleep(0.5)
    keys(world, box, "Enter")


def agent_refreshes(world: World) -> list:
    """Token endpoint calls not made by the controller (its client is aiohttp)."""
    return [r for r in world.provider.requests
            if r.path in TOKEN_PATHS and "aiohttp" not in r.headers.get("user-agent", "")]


async def replied(world: World, text: str, timeout: float = 45) -> None:
    box = text.split()[1]
    def probe():
        return next((t for t in world.provider.turns if t.text == text), None)
    try:
        await eventually(probe, 8, every=0.5, what=text)
    except TimeoutError:
        if f"› {text}" in world.screen(box, "main"):   # a TUI still starting up took the Enter as text
            keys(world, box, "Enter")
    try:
        turn = await eventually(probe, timeout, every=0.5, what=f"the model call for {text!r}")
    except TimeoutError:
        raise AssertionError(f"{text!r} never reached the provider; turns: "
                             f"{[(t.text[:30], t.status) for t in world.provider.turns][-8:]}; requests: "
                             f"{[(r.path, r.status) for r in world.provider.requests if r.status >= 400][-8:]}\n"
                             f"{world.screen(box, 'main')}\nREFRESHES: "
                             f"{[(r.account, r.outcome, r.status, round(r.at % 1000, 1)) for r in world.provider.refreshes]}\n"
                             f"TOKEN CALLS: {[(r.path, r.status, r.headers.get('user-agent', '')[:30], round(r.at % 1000, 1)) for r in world.provider.requests if 'token' in r.path]}"
                             ) from None
    assert turn.status == 200, f"{text!r} got {turn.status}"


def secret_login(world: World, name: str, key: str):
    import base64

    sec = world.kube.get("v1/secrets", world.namespace, name) or {}
    provider = "anthropic" if key == "credentials.json" else "openai"
    return parse_login(provider, base64.b64decode(sec["data"][key]).decode())


@pytest.mark.timeout(330)
async def test_real_agents_keep_working_while_the_controller_renews_their_shared_logins(real):
    world, agents = real
    world.start_operator()
    world.provider.set_windows("acct-claude", five_hour=(10.0, None), weekly=(5.0, None))
    world.provider.set_windows("acct-codex", five_hour=(10.0, None), weekly=(5.0, None))
    await world.add_secret("claude-login", "credentials.json", world.provider.issue_login("anthropic", "acct-claude"))
    await world.add_subscription("claude-shared", "anthropic", "claude-login", "credentials.json")
    await world.add_secret("codex-login", "auth.json", world.provider.issue_login("openai", "acct-codex"))
    await world.add_subscription("codex-shared", "openai", "codex-login", "auth.json")
    claude, codex = ["c0", "c1"], ["x0", "x1"]
    for box in claude:
        await world.add_box(box, "claude-code", "claude-shared")
    for box in codex:
        await world.add_box(box, "codex", "codex-shared")
    for box in claude:
        await world.run_pod(box, [TabSpec("main", ["claude", "--permission-mode", "default"])],
                            shims=agents.claude_shims(box, account="acct-claude"))
    for box in codex:
        await world.run_pod(box, [TabSpec("main", ["codex"])], shims=agents.codex_shims(box))
    for box in claude:
        await eventually(lambda: "? for shortcuts" in world.screen(box, "main"), 60, what=f"{box} Claude's prompt")
    for box in codex:
        await eventually(lambda: "Ask Codex to do anything" in world.screen(box, "main") or
                         "for shortcuts" in world.screen(box, "main"), 60, what=f"{box} Codex's composer")
    t0 = time.time()

    # Phase 1: three rounds of prompts, ~30 s apart, while the controller renews every ~10 s.
    for rnd in range(3):
        for box in claude + codex:
            await prompt(world, box, f"hello {box} {rnd}")
        for box in claude + codex:
            await replied(world, f"hello {box} {rnd}")
        await asyncio.sleep(max(0.0, t0 + 30 * (rnd + 1) - time.time()))
    phase1 = time.time() - t0
    assert agent_refreshes(world) == [], f"an agent refreshed although the controller did: {agent_refreshes(world)}"
    assert all(r.outcome == "ok" for r in world.provider.refreshes), world.provider.refreshes
    n_claude = sum(1 for r in world.provider.refreshes if r.account == "acct-claude")
    n_codex = sum(1 for r in world.provider.refreshes if r.account == "acct-codex")
    assert n_claude >= 5 and n_codex >= 5, (n_claude, n_codex)
    model_401 = [r for r in world.provider.requests if r.status == 401]
    assert model_401 == [], model_401[:5]
    # Claude Code re-reads its file: its calls use the newest pushed token. Codex keeps its
    # in-memory token until its own 5-minute point, then reloads the file (still valid meanwhile).
    newest = secret_login(world, "claude-login", "credentials.json")
    for box in claude:
        assert parse_login("anthropic", world.login_file(box) or "").access_token == newest.access_token
    for box in codex:
        held = parse_login("openai", world.login_file(box, "codex") or "")
        assert held.access_token == secret_login(world, "codex-login", "auth.json").access_token
    print(f"phase 1: {phase1:.0f} s, controller refreshes: claude {n_claude}, codex {n_codex}; no agent refresh")

    # Phase 2 (Claude): the controller is away past the agents' refresh point; c0 refreshes itself.
    await world.stop_operator()
    stopped = time.time()
    left = (newest.expires_at.timestamp() - time.time()) if newest.expires_at else 0
    await asyncio.sleep(max(0.0, left - 290))    # now < 5 minutes left: the agents' own refresh point
    await prompt(world, "c0", "hello c0 alone")
    await replied(world, "hello c0 alone")
    own = [r for r in agent_refreshes(world) if r.path == "/v1/oauth/token"]
    assert own and own[0].status == 200, f"Claude Code refreshed by itself through the tunnel: {own}"
    assert "platform.claude.com:443" in agents.proxy.tunnels
    world.start_operator()
    await eventually(lambda: any(e["reason"] == "LoginAdopted" for e in world.events("claude-shared")), 30,
                     what="the controller adopting c0's login")
    await prompt(world, "c1", "hello c1 after")
    await replied(world, "hello c1 after")
    claude_own = [r for r in agent_refreshes(world) if r.path == "/v1/oauth/token"]
    assert len(claude_own) == 1, f"c1 used the adopted login instead of refreshing: {claude_own}"
    claude_outcomes = [r.outcome for r in world.provider.refreshes if r.account == "acct-claude"]
    assert set(claude_outcomes) == {"ok"}, claude_outcomes
    codex_outcomes = [r.outcome for r in world.provider.refreshes if r.account == "acct-codex"]
    print(f"phase 2: controller away {time.time() - stopped:.0f} s; claude refreshes {claude_outcomes[-4:]}, "
          f"codex (not asserted: both Codex boxes were on their own meanwhile) {codex_outcomes[-4:]}; "
          f"agent refreshes {[(r.path, r.status) for r in agent_refreshes(world)]}")
