"""Adversarial login scenarios (issue 9 finding 1): a box acts as the attacker against the real
operator running in the emulated world.

A login file planted in one box (another account's tokens, a copied `agentbox` marker or a claimed
`account_id`, or garbage) must never reach the Subscription's Secret or any other box. The keeper
adopts a login from a box only when the provider itself confirms, with the candidate's access token,
that it belongs to the account recorded in `status.account`; a refused candidate is a Warning naming
the box, and that box is not pushed to.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys

import pytest

from controller.providers.credentials import parse_login
from agentbox_sim.world import TabSpec, World, eventually

pytestmark = pytest.mark.component

AGENT = {"anthropic": "claude-code", "openai": "codex"}
KEY = {"anthropic": "credentials.json", "openai": "auth.json"}
REL = {"anthropic": ".claude/.credentials.json", "openai": ".codex/auth.json"}
TOKEN_PATH = {"anthropic": "/v1/oauth/token", "openai": "/oauth/token"}
TTL = 8.0


def settings(world: World, **kw) -> None:
    world.settings = world.settings.model_copy(update={
        "login_refresh_before_s": 3.0, "login_retry_s": 0.5, "usage_interval_s": 30.0,
        "anthropic_token_url": world.provider.url + TOKEN_PATH["anthropic"],
        "openai_token_url": world.provider.url + TOKEN_PATH["openai"], **kw})


def secret_text(world: World, name: str, key: str) -> str:
    sec = world.kube.get("v1/secrets", world.namespace, name) or {}
    return base64.b64decode((sec.get("data") or {})[key]).decode()


def sub_status(world: World) -> dict:
    return (world.kube.get("subscriptions", world.namespace, "shared") or {}).get("status") or {}


async def two_boxes(world: World, provider: str) -> None:
    world.provider.token_ttl_s[provider] = TTL
    world.start_operator()
    await world.add_secret("login-shared", KEY[provider], world.provider.issue_login(provider, "acct-a", TTL))
    await world.add_subscription("shared", provider, "login-shared", KEY[provider])
    for name in ("attacker", "victim"):
        await world.add_box(name, AGENT[provider], "shared")
        await world.run_pod(name, [TabSpec("main", [sys.executable, "-c", "import time; time.sleep(600)"])])


def forged(world: World, provider: str, how: str) -> str:
    """A login file an attacker could plant: later expiry, a refresh token, and whatever the file
    format uses to say "same account" copied from the real one."""
    if how == "garbage":
        text = world.provider.issue_login(provider, "acct-a", 3600.0)
        data = json.loads(text)
        if provider == "anthropic":
            data["claudeAiOauth"]["accessToken"] = "sk-ant-oat01-forged"
        else:
            data["tokens"]["access_token"] = data["tokens"]["access_token"][:-4] + "XXXX"  # same claims, not issued
        world.provider.revoke(parse_login(provider, text).access_token)
    else:  # another account's real, valid login
        data = json.loads(world.provider.issue_login(provider, "acct-evil", 3600.0))
    if provider == "anthropic":
        data["agentbox"] = {"subscription": f"{world.namespace}/shared"}  # the marker, copied
    else:
        data["tokens"]["account_id"] = "acct-a"  # the account id, claimed
    return json.dumps(data)


@pytest.mark.parametrize("provider,how", [("anthropic", "other-account"), ("openai", "other-account"),
                                          ("anthropic", "garbage")])
@pytest.mark.timeout(90)
async def test_login_planted_in_a_box_is_refused(world: World, provider: str, how: str):
    settings(world)
    await two_boxes(world, provider)
    await eventually(lambda: any(r.status == 200 for r in world.provider.refreshes), 20, what="a first refresh")
    identity = sub_status(world).get("account")

    def pushed() -> bool:  # the first refresh reached the attacker's box: the next one is seconds away
        live = world.login_file("attacker", AGENT[provider])
        sec = parse_login(provider, secret_text(world, "login-shared", KEY[provider]))
        return bool(live) and parse_login(provider, live).access_token == sec.access_token and \
            world.provider.account_of(sec.access_token) == "acct-a" and sec.expires_at is not None

    await eventually(pushed, 10, what="the renewed login pushed")
    planted = forged(world, provider, how)
    (world.pod_dir("attacker") / REL[provider]).write_text(planted)
    # Refreshes keep coming due (tokens live 8 s, renewed 3 s before expiry): at each, the keeper reads
    # the boxes back and finds the planted login, newer than the Secret's.
    start = sum(r.status == 200 for r in world.provider.refreshes)
    planted_access = parse_login(provider, planted).access_token

    def taken_over() -> bool:
        return parse_login(provider, secret_text(world, "login-shared", KEY[provider])).access_token == planted_access

    await eventually(lambda: taken_over() or sum(r.status == 200 for r in world.provider.refreshes) >= start + 2, 30,
                     what="two refreshes after the plant")
    assert not taken_over(), "the planted login was adopted into the Subscription's Secret"
    await eventually(lambda: any(e["reason"] == "LoginCandidateRefused" for e in world.events("shared")), 10,
                     what="the refused candidate reported")
    await asyncio.sleep(1.0)
    assert not taken_over()
    secret = secret_text(world, "login-shared", KEY[provider])
    assert world.provider.account_of(parse_login(provider, secret).access_token) == "acct-a"
    assert world.provider.token_valid(parse_login(provider, secret).access_token)
    victim = world.login_file("victim", AGENT[provider]) or ""
    assert parse_login(provider, victim).access_token == parse_login(provider, secret).access_token, \
        "the other box gets the subscription's own renewed login"
    assert "forged" not in world.box_secret("victim")[KEY[provider]]
    assert world.login_file("attacker", AGENT[provider]) == planted, "the refused box is not pushed to"
    assert all(r.outcome == "ok" for r in world.provider.refreshes), world.provider.refreshes
    events = world.events("shared")
    assert not any(e["reason"] == "LoginAdopted" for e in events)
    refused = [e for e in events if e["reason"] == "LoginCandidateRefused"]
    assert len(refused) == 1 and refused[0]["type"] == "Warning", refused
    assert "attacker" in refused[0]["message"] and "victim" not in refused[0]["message"]
    assert planted_access not in refused[0]["message"]
    assert identity and identity.startswith("sha256:") and sub_status(world)["account"] == identity
    assert sub_status(world).get("state") == "Available"


@pytest.mark.timeout(90)
async def test_adopted_login_takes_only_what_the_provider_confirmed(world: World):
    """A box user spends the pushed refresh token themselves (a real, same-account access token) and
    plants it with a refresh token of their own making and an expiry in year 2100. The provider
    confirms the access token's account, nothing else: the expiry must not reach the Subscription's
    Secret (the keeper would never renew again and the Subscription would show Available with a dead
    login once the access token expires)."""
    import aiohttp

    from controller.providers.oauth import apply_refresh
    from datetime import datetime, timezone

    provider = "anthropic"
    settings(world)
    await two_boxes(world, provider)
    await eventually(lambda: any(r.status == 200 for r in world.provider.refreshes), 20, what="a first refresh")
    await eventually(lambda: "agentbox" in (world.login_file("attacker", AGENT[provider]) or ""), 10,
                     what="the marked login pushed")
    live = world.login_file("attacker", AGENT[provider]) or ""
    async with aiohttp.ClientSession() as s:
        async with s.post(world.provider.url + TOKEN_PATH[provider],
                          json={"grant_type": "refresh_token",
                                "refresh_token": parse_login(provider, live).refresh_token}) as r:
            answer = await r.json()
    data = json.loads(apply_refresh(provider, live, answer, datetime.now(timezone.utc)))
    data["claudeAiOauth"]["refreshToken"] = "sk-ant-ort01-made-up-by-the-attacker"
    data["claudeAiOauth"]["expiresAt"] = 4102444800000  # 2100-01-01
    (world.pod_dir("attacker") / REL[provider]).write_text(json.dumps(data))
    stolen = answer["access_token"]

    def secret_login():
        return parse_login(provider, secret_text(world, "login-shared", KEY[provider]))

    # The keeper reads the boxes back at its next refresh point and finds the planted login.
    await eventually(lambda: secret_login().access_token == stolen
                     or sub_status(world).get("state") == "Disconnected", 30, what="the keeper decided")
    held = secret_login()
    assert held.expires_at is None or held.expires_at.year < 2100, \
        f"the box's word on the expiry reached the Subscription's Secret: {held.expires_at}"
    assert held.refresh_token != "sk-ant-ort01-made-up-by-the-attacker"
    assert "made-up" not in world.box_secret("victim")[KEY[provider]], "the other box got the box's word"
    await eventually(lambda: any(e["reason"] == "LoginCandidateRefused" and "attacker" in e["message"]
                                 for e in world.events("shared")), 10, what="the refused candidate reported")
    # Once the access token the provider confirmed has expired, the Subscription must not show a
    # healthy state with a dead login.
    await eventually(lambda: not world.provider.token_valid(stolen), 20, what="the stolen token expired")
    await eventually(lambda: sub_status(world).get("state") == "Disconnected"
                     or world.provider.token_valid(secret_login().access_token), 20,
                     what="Disconnected or a valid login in the Secret")


def plant_hostile(path, how: str) -> None:
    """Replace a box's login file with something hostile."""
    import os

    path.unlink(missing_ok=True)
    if how == "nested":  # 100,000 brackets: RecursionError in Python's JSON decoder, not ValueError
        path.write_text("[" * 100_000)
    elif how == "dev-zero":  # an endless file
        path.symlink_to("/dev/zero")
    elif how == "fifo":  # a read that never ends (no writer)
        os.mkfifo(path)
    elif how == "huge":  # 4 MiB, past the read cap, starting like a login file
        path.write_text('{"claudeAiOauth": {"accessToken": "' + "x" * (4 << 20) + '"}}')


@pytest.mark.parametrize("provider,how", [("anthropic", "nested"), ("openai", "nested"), ("anthropic", "dev-zero"),
                                          ("anthropic", "fifo"), ("anthropic", "huge")])
@pytest.mark.timeout(90)
async def test_hostile_login_file_in_a_box_does_not_stop_the_keeper(world: World, provider: str, how: str):
    """A box replaces its login file with deeply nested JSON, a symlink to /dev/zero, a FIFO or a
    4 MiB file. The keeper reads every box back before each refresh, so the Subscription's refreshes
    must go on for the other box (before: the nested file made every tick fail with RecursionError)."""
    settings(world)
    await two_boxes(world, provider)
    await eventually(lambda: any(r.status == 200 for r in world.provider.refreshes), 20, what="a first refresh")
    plant_hostile(world.pod_dir("attacker") / REL[provider], how)
    start = sum(r.status == 200 for r in world.provider.refreshes)
    await eventually(lambda: sum(r.status == 200 for r in world.provider.refreshes) >= start + 2, 30,
                     what="two more refreshes with the nested file in place")
    victim = parse_login(provider, world.login_file("victim", AGENT[provider]) or "")
    assert world.provider.token_valid(victim.access_token)
    assert sub_status(world).get("state") == "Available"
