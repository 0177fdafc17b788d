"""Login lifecycle with the real operator and scripted token users: several boxes share one
subscription while the emulator's access tokens expire every few seconds and its refresh tokens are
single-use (a second use revokes the whole chain, as the real providers do).

The controller is the only refresher (controller/service/logins.py, docs/logins.md). Checked while
it runs: every box's live login file always holds a currently valid token; the Secret holds the
newest login; no refresh token is used twice; the token users in the tabs never get a 401.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from datetime import datetime, timezone

import aiohttp
import pytest

from controller.providers.credentials import parse_login
from controller.providers.oauth import RefreshError, apply_refresh
from agentbox_sim.world import TabSpec, World, eventually

from harness.world_fixtures import FAST

pytestmark = pytest.mark.component

TTL = 6.0
LEAD = 3.0
AGENT = {"anthropic": "claude-code", "openai": "codex"}
KEY = {"anthropic": "credentials.json", "openai": "auth.json"}
TOKEN_PATH = {"anthropic": "/v1/oauth/token", "openai": "/oauth/token"}

# A stand-in for an agent: reads its live login file before every request (as Claude Code does)
# and calls the usage endpoint with it twice a second; logs each status.
USER = r"""
import json, os, sys, time, urllib.request
url, provider = sys.argv[1], sys.argv[2]
rel = ".claude/.credentials.json" if provider == "anthropic" else ".codex/auth.json"
path = "/api/oauth/usage" if provider == "anthropic" else "/backend-api/wham/usage"
log = open(os.path.join(os.environ["HOME"], "user.log"), "a")
while True:
    try:
        d = json.load(open(os.path.join(os.environ["HOME"], rel)))
        tok = d["claudeAiOauth"]["accessToken"] if provider == "anthropic" else d["tokens"]["access_token"]
        req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + tok})
        try:
            status = urllib.request.urlopen(req, timeout=5).status
        except urllib.error.HTTPError as e:
            status = e.code
    except (OSError, ValueError, KeyError):
        status = "nofile"
    log.write(f"{time.time():.3f} {status}\n"); log.flush()
    time.sleep(0.5)
"""


def settings(world: World, **kw) -> None:
    world.settings = world.settings.model_copy(update={
        "login_refresh_before_s": LEAD, "login_retry_s": 0.5, "usage_interval_s": 30.0,
        "anthropic_token_url": world.provider.url + TOKEN_PATH["anthropic"],
        "openai_token_url": world.provider.url + TOKEN_PATH["openai"], **kw})


def secret_text(world: World, name: str, key: str) -> str:
    sec = world.kube.get("v1/secrets", world.namespace, name) or {}
    return base64.b64decode((sec.get("data") or {})[key]).decode()


def access(provider: str, text: str | None) -> str | None:
    if not text:
        return None
    try:
        return parse_login(provider, text).access_token
    except ValueError:
        return None


def sub_status(world: World, name: str) -> dict:
    return (world.kube.get("subscriptions", world.namespace, name) or {}).get("status") or {}


async def shared(world: World, provider: str, boxes: int = 3, ttl: float = TTL) -> list[str]:
    """The operator, a subscription `shared` and `boxes` boxes on it, each running a token user."""
    world.start_operator()
    account = f"acct-{provider}"
    world.provider.set_windows(account, five_hour=(20.0, None), weekly=(10.0, None))
    await world.add_secret("login-shared", KEY[provider], world.provider.issue_login(provider, account, ttl))
    await world.add_subscription("shared", provider, "login-shared", KEY[provider])
    names = [f"box{i}" for i in range(boxes)]
    for name in names:
        await world.add_box(name, AGENT[provider], "shared")
    for name in names:
        cmd = [sys.executable, "-c", USER, world.provider.url, provider]
        await world.run_pod(name, [TabSpec("main", cmd)])
    return names


def user_log(world: World, box: str) -> list[tuple[float, str]]:
    path = world.pod_dir(box) / "user.log"
    if not path.exists():
        return []
    return [(float(t), s) for t, s in (line.split() for line in path.read_text().splitlines() if line.strip())]


async def watch(world: World, provider: str, boxes: list[str], seconds: float) -> dict:
    """Sample every 0.1 s: each live file's token is valid; the Secret and the boxes hold the
    newest login once it is a moment old (the store and the pushes take a few exec calls)."""
    problems: list[str] = []
    samples = 0
    end = time.time() + seconds
    while time.time() < end:
        now = time.time()
        ok = [r for r in world.provider.refreshes if r.status == 200]
        newest = ok[-1] if ok else None
        sec = access(provider, secret_text(world, "login-shared", KEY[provider]))
        if not world.provider.token_valid(sec):
            problems.append(f"{now:.1f} Secret holds an invalid token")
        if newest is not None and now - newest.at > 1.0 and _fp(sec) != newest.new_access_fp:
            problems.append(f"{now:.1f} Secret is not the newest login ({_fp(sec)} != {newest.new_access_fp})")
        for box in boxes:
            live = access(provider, world.login_file(box, AGENT[provider]))
            if not world.provider.token_valid(live):
                problems.append(f"{now:.1f} {box}: live file holds an invalid token")
            if newest is not None and now - newest.at > 2.0 and _fp(live) != newest.new_access_fp:
                problems.append(f"{now:.1f} {box}: live file is not the newest login")
        samples += 1
        await asyncio.sleep(0.1)
    return {"problems": problems, "samples": samples}


def _fp(token: str | None) -> str:
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()[:8] if token else ""


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.timeout(90)
async def test_three_boxes_share_one_login_across_many_expiries(world: World, provider: str):
    settings(world)
    world.provider.token_ttl_s[provider] = TTL
    boxes = await shared(world, provider)
    t0 = time.time()
    result = await watch(world, provider, boxes, 24.0)
    refreshes = world.provider.refreshes
    ok = [r for r in refreshes if r.status == 200]
    assert len(ok) >= 6, f"tokens expired every {TTL:.0f} s for 24 s: {len(ok)} refreshes"
    assert all(r.outcome == "ok" for r in refreshes), f"a refresh token was reused or refused: {refreshes}"
    assert not result["problems"], result["problems"][:10]
    # The token users never saw a 401 (each call read the live file first).
    for box in boxes:
        log = [s for t, s in user_log(world, box) if t > t0 + 1]
        assert log and set(log) <= {"200"}, f"{box}: {sorted(set(log))}"
        # The box credentials Secret follows too (a restarted pod starts with the newest login).
        assert access(provider, world.box_secret(box)[KEY[provider]]) == access(
            provider, secret_text(world, "login-shared", KEY[provider]))
    cond = {c["type"]: c for c in sub_status(world, "shared").get("conditions") or []}
    assert cond["LoginRefreshed"]["status"] == "True", cond
    assert sub_status(world, "shared").get("state") == "Available"
    # Every other field of the login file is kept.
    text = json.loads(secret_text(world, "login-shared", KEY[provider]))
    if provider == "anthropic":
        assert text["claudeAiOauth"]["subscriptionType"] == "max"
        assert text["claudeAiOauth"]["rateLimitTier"] == "default_claude_max_5x"
        assert text["agentbox"] == {"subscription": "default/shared"}
    else:
        assert text["auth_mode"] == "chatgpt" and text["tokens"]["account_id"] == "acct-openai"


@pytest.mark.timeout(60)
async def test_refused_refresh_disconnects_and_keeps_the_windows(world: World):
    settings(world, usage_interval_s=3.0)  # the reader notices the changed Secret at its next read
    world.provider.token_ttl_s["anthropic"] = 60.0
    boxes = await shared(world, "anthropic", boxes=1, ttl=60.0)
    await eventually(lambda: sub_status(world, "shared").get("state") == "Available", 15, what="first read")
    windows = sub_status(world, "shared")["windows"]
    world.provider.fail_next(1, 400, path=TOKEN_PATH["anthropic"],
                             body={"error": "invalid_grant", "error_description": "Refresh token revoked"})
    # Make the login due now: the Secret gets a copy expiring in 2 s (same tokens).
    text = json.loads(secret_text(world, "login-shared", "credentials.json"))
    text["claudeAiOauth"]["expiresAt"] = int((time.time() + 2) * 1000)
    await world.patch(f"/api/v1/namespaces/default/secrets/login-shared",
                      {"data": {"credentials.json": base64.b64encode(json.dumps(text).encode()).decode()}})
    await eventually(lambda: sub_status(world, "shared").get("state") == "Disconnected", 15, what="Disconnected")
    st = sub_status(world, "shared")
    cond = {c["type"]: c for c in st.get("conditions") or []}
    assert cond["LoginRefreshed"]["reason"] == "RefreshRefused", cond
    assert "refused" in cond["LoginRefreshed"]["message"] and "login-shared" in cond["LoginRefreshed"]["message"]
    assert "sk-ant" not in json.dumps(st), "no token text in the status"
    assert st["windows"] == windows, "the last good windows are kept"
    # The Event is posted in the background (sc.post_event), so it may land after the status write.
    await eventually(lambda: any(e["reason"] == "LoginRefreshRefused" for e in world.events("shared")), 10,
                     what="LoginRefreshRefused Event")
    await asyncio.sleep(2.0)
    assert sub_status(world, "shared").get("state") == "Disconnected", "not retried until the Secret changes"
    assert world.provider.count(TOKEN_PATH["anthropic"]) == 1, "the refused refresh token is not sent again"
    # A new login in the Secret recovers.
    await world.patch(f"/api/v1/namespaces/default/secrets/login-shared", {"data": {"credentials.json": base64.b64encode(
        world.provider.issue_login("anthropic", "acct-anthropic", 60.0).encode()).decode()}})
    await eventually(lambda: sub_status(world, "shared").get("state") == "Available", 15, what="recovered")
    assert boxes


@pytest.mark.timeout(60)
async def test_5xx_is_retried_with_the_old_login_kept(world: World):
    settings(world, login_refresh_before_s=6.0)   # 3 failures and their backoff fit in the lead
    world.provider.token_ttl_s["openai"] = 12.0
    world.provider.fail_next(3, 503, path=TOKEN_PATH["openai"])
    boxes = await shared(world, "openai", boxes=2, ttl=12.0)
    result = await watch(world, "openai", boxes, 14.0)
    statuses = [r.status for r in world.provider.requests if r.path == TOKEN_PATH["openai"]]
    assert statuses[:3] == [503, 503, 503] and 200 in statuses[3:], statuses
    assert all(r.outcome == "ok" for r in world.provider.refreshes), world.provider.refreshes
    assert not result["problems"], result["problems"][:10]
    assert sub_status(world, "shared").get("state") == "Available"


@pytest.mark.timeout(90)
async def test_login_refreshed_by_an_agent_while_the_controller_was_away_is_adopted(world: World):
    """The fallback: a box's agent refreshed by itself (controller down); the controller reads the
    newer login back, stores it and passes it on instead of spending the spent refresh token."""
    settings(world)
    world.provider.token_ttl_s["anthropic"] = 12.0
    boxes = await shared(world, "anthropic", boxes=3, ttl=12.0)
    await eventually(lambda: any(r.status == 200 for r in world.provider.refreshes), 15, what="a first refresh")
    await eventually(lambda: "agentbox" in (world.login_file("box2") or ""), 5, what="the marked login pushed")
    await world.stop_operator()
    await asyncio.sleep(1.1)  # expiries compare in whole seconds (Codex's JWT exp is in seconds)
    # box0's agent refreshes by itself, as Claude Code would: same file, new tokens.
    live = world.login_file("box0") or ""
    login = parse_login("anthropic", live)
    async with aiohttp.ClientSession() as s:
        async with s.post(world.provider.url + TOKEN_PATH["anthropic"],
                          json={"grant_type": "refresh_token", "refresh_token": login.refresh_token}) as r:
            answer = await r.json()
    newer = apply_refresh("anthropic", live, answer, datetime.now(timezone.utc))
    (world.pod_dir("box0") / ".claude/.credentials.json").write_text(newer)
    agent_token = answer["access_token"]
    before = len(world.provider.refreshes)
    world.start_operator()
    await eventually(lambda: any(e["reason"] == "LoginAdopted" for e in world.events("shared")), 20,
                     what="the newer login adopted")
    await eventually(lambda: all(access("anthropic", world.login_file(b)) != login.access_token for b in boxes), 10,
                     what="the other boxes updated")
    result = await watch(world, "anthropic", boxes, 8.0)
    assert all(r.outcome == "ok" for r in world.provider.refreshes), world.provider.refreshes
    assert not result["problems"], result["problems"][:10]
    # The adopted token was used as the base of the next refresh, not the spent one.
    assert len(world.provider.refreshes) > before
    assert world.provider.refresh_spent(parse_login("anthropic", newer).refresh_token or "")
    assert agent_token


def test_refresh_answers_with_unknown_keys_and_nulls():
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    claude = json.dumps({"claudeAiOauth": {"accessToken": "a", "refreshToken": "r", "expiresAt": 1,
                                           "scopes": ["user:inference"], "subscriptionType": "max", "x": 1},
                         "mcpOAuth": {"k": "v"}})
    notes: list[str] = []
    out = json.loads(apply_refresh("anthropic", claude, {"access_token": "a2", "refresh_token": None,
                                                         "expires_in": None, "scope": None, "new": {"k": 1}}, now,
                                   notes))
    # A missing expires_in: the new tokens are kept with a short assumed life (an old expiry kept would
    # make the new login look due at once: a refresh loop), and a note names the field.
    assert out["claudeAiOauth"] == {"accessToken": "a2", "refreshToken": "r",
                                    "expiresAt": int(now.timestamp() * 1000) + 3600 * 1000,
                                    "scopes": ["user:inference"], "subscriptionType": "max", "x": 1}
    assert len(notes) == 1 and "expires_in" in notes[0]
    assert out["mcpOAuth"] == {"k": "v"}
    with pytest.raises(RefreshError):
        apply_refresh("anthropic", claude, {"access_token": None}, now)
    codex = json.dumps({"auth_mode": "chatgpt", "tokens": {"access_token": "a", "refresh_token": "r",
                                                           "account_id": "acc", "id_token": "i"}, "z": None})
    out = json.loads(apply_refresh("openai", codex, {"access_token": "a2", "id_token": None, "other": [1]}, now))
    assert out["tokens"] == {"access_token": "a2", "refresh_token": "r", "account_id": "acc", "id_token": "i"}
    assert out["last_refresh"] == "2026-01-01T00:00:00Z" and out["z"] is None
