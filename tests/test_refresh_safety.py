"""Refresh safety (issue 9 finding 4), against the real operator and the provider emulator, whose
refresh tokens are single-use: a second use revokes every token of the chain.

* A refresh whose answer is lost after the provider spent the token is never retried with that
  token; the current access token stays in use and the subscription says RefreshAnswerLost
  (condition, metric, one Warning Event). The same after a controller restart mid-refresh.
* Numbers in a token answer (`expires_in: 1e999`, negative, NaN, strings) never throw the new tokens
  away.
* `Disconnected` is level-triggered: a failed status patch is repeated until the API server has it.
* Provider error codes are reported from an allow-list; `Retry-After` has one parser.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from datetime import datetime, timezone

import pytest

from controller import constants as C
from controller import metrics
from controller.providers.credentials import parse_login, token_fingerprint
from controller.providers.oauth import _error_code, apply_refresh
from controller.providers.retry_after import MAX_RETRY_AFTER_S, parse_retry_after
from agentbox_sim.world import TabSpec, World, eventually

TOKEN_PATH = {"anthropic": "/v1/oauth/token", "openai": "/oauth/token"}
KEY = {"anthropic": "credentials.json", "openai": "auth.json"}
AGENT = {"anthropic": "claude-code", "openai": "codex"}


def settings(world: World, **kw) -> None:
    world.settings = world.settings.model_copy(update={
        "login_refresh_before_s": 3.0, "login_retry_s": 0.5, "usage_interval_s": 30.0,
        "anthropic_token_url": world.provider.url + TOKEN_PATH["anthropic"],
        "openai_token_url": world.provider.url + TOKEN_PATH["openai"], **kw})


def secret_text(world: World) -> str:
    sec = world.kube.get("v1/secrets", world.namespace, "login-shared") or {}
    return base64.b64decode((sec.get("data") or {})["credentials.json"]).decode()


def sub_status(world: World) -> dict:
    return (world.kube.get("subscriptions", world.namespace, "shared") or {}).get("status") or {}


def cond(world: World, type_: str) -> dict:
    return next((c for c in sub_status(world).get("conditions") or [] if c.get("type") == type_), {})


async def setup(world: World, provider: str = "anthropic", ttl: float = 8.0, boxes: int = 1,
                start: bool = True, login: str | None = None) -> str:
    world.provider.token_ttl_s[provider] = ttl
    world.provider.set_windows("acct-a", five_hour=(20.0, None), weekly=(10.0, None))
    text = login or world.provider.issue_login(provider, "acct-a", ttl)
    await world.add_secret("login-shared", KEY[provider], text)
    await world.add_subscription("shared", provider, "login-shared", KEY[provider])
    if start:
        world.start_operator()
    for i in range(boxes):
        await world.add_box(f"box{i}", AGENT[provider], "shared")
        await world.run_pod(f"box{i}", [TabSpec("main", [sys.executable, "-c", "import time; time.sleep(600)"])])
    return text


def uses_of(world: World, refresh_token: str) -> int:
    fp = token_fingerprint(refresh_token)
    return sum(1 for r in world.provider.refreshes if r.refresh_fp == fp)


# ---------------------------------------------------------------------------------- lost answers
@pytest.mark.component
@pytest.mark.timeout(60)
async def test_lost_refresh_answer_is_never_retried_with_the_spent_token(world: World):
    settings(world, usage_interval_s=3.0)  # the reader notices the new Secret at its next read
    text = await setup(world)
    first = parse_login("anthropic", text)
    world.provider.drop_next_token_answers(1)
    await eventually(lambda: uses_of(world, first.refresh_token or "") >= 1, 20, what="the refresh sent")
    await eventually(lambda: cond(world, "LoginRefreshed").get("reason") == "RefreshAnswerLost", 10,
                     what="RefreshAnswerLost")
    # Past the retry delays (0.5 s doubling) and until the access token expires: nothing resent.
    until = first.expires_at.timestamp() if first.expires_at else time.time() + 5
    await asyncio.sleep(max(2.0, until - time.time() - 0.5))
    assert uses_of(world, first.refresh_token or "") == 1, world.provider.refreshes
    assert not any(r.outcome in ("reused", "revoked") for r in world.provider.refreshes), world.provider.refreshes
    assert parse_login("anthropic", secret_text(world)).access_token == first.access_token, \
        "the current access token stays in use until it expires"
    assert world.provider.token_valid(first.access_token), "the chain was not revoked"
    c = cond(world, "LoginRefreshed")
    assert c["status"] == "False" and "login-shared" in c["message"]
    assert sub_status(world).get("state") == "Available"
    events = [e for e in world.events("shared") if e["reason"] == "RefreshAnswerLost"]
    assert len(events) == 1 and events[0]["type"] == "Warning", events
    assert metrics.LOGIN_ANSWER_LOST.labels(world.namespace, "shared")._value.get() == 1
    # A human logs in again: the alert clears and refreshing resumes.
    await world.patch(f"/api/v1/namespaces/{world.namespace}/secrets/login-shared", {"data": {
        "credentials.json": base64.b64encode(world.provider.issue_login("anthropic", "acct-a", 8.0).encode()).decode()}})
    await eventually(lambda: cond(world, "LoginRefreshed").get("reason") == "Refreshed", 20, what="refreshing again")
    assert metrics.LOGIN_ANSWER_LOST.labels(world.namespace, "shared")._value.get() == 0


@pytest.mark.component
@pytest.mark.timeout(60)
async def test_refresh_in_flight_at_a_restart_is_not_sent_again(world: World):
    """The controller died after sending a refresh and before storing its answer: the write-ahead mark
    in status tells the restarted controller that the token may be spent."""
    settings(world)
    text = await setup(world, ttl=6.0, boxes=0, start=False)
    login = parse_login("anthropic", text)
    await world.patch(world.sub_path("shared") + "/status", {"status": {
        "refreshInFlight": "sha256:" + token_fingerprint(login.refresh_token)}})
    world.start_operator()
    await eventually(lambda: cond(world, "LoginRefreshed").get("reason") == "RefreshAnswerLost", 15,
                     what="RefreshAnswerLost")
    await asyncio.sleep(max(0.0, (login.expires_at.timestamp() if login.expires_at else 0) - time.time() - 3.5) + 1.5)
    assert uses_of(world, login.refresh_token or "") == 0, "a refresh token marked in flight was sent again"
    assert any(e["reason"] == "RefreshAnswerLost" for e in world.events("shared"))


@pytest.mark.component
@pytest.mark.timeout(60)
async def test_refresh_marks_its_token_in_flight_before_sending(world: World):
    """Write-ahead: the mark is in status before the provider sees the request, and gone after."""
    settings(world)
    world.provider.latency_s = 1.0
    text = await setup(world, ttl=6.0, boxes=0)
    fp = "sha256:" + token_fingerprint(parse_login("anthropic", text).refresh_token)
    await eventually(lambda: sub_status(world).get("refreshInFlight") == fp, 15, every=0.05, what="the mark")
    assert not world.provider.refreshes, "the mark is written before the request is answered"
    await eventually(lambda: world.provider.refreshes and not sub_status(world).get("refreshInFlight"), 15,
                     what="the mark cleared")
    assert parse_login("anthropic", secret_text(world)).refresh_token != parse_login("anthropic", text).refresh_token


# ---------------------------------------------------------------------------------- numbers
@pytest.mark.unit
@pytest.mark.parametrize("raw", ["1e999", "-5", "NaN", '"soon"', "0", "true", "1e30", '"86400abc"'])
def test_unusable_expires_in_keeps_the_new_tokens(raw: str):
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    text = json.dumps({"claudeAiOauth": {"accessToken": "a", "refreshToken": "r", "expiresAt": 1}})
    answer = json.loads('{"access_token": "a2", "refresh_token": "r2", "expires_in": ' + raw + "}")
    notes: list[str] = []
    out = json.loads(apply_refresh("anthropic", text, answer, now, notes))
    assert out["claudeAiOauth"]["accessToken"] == "a2" and out["claudeAiOauth"]["refreshToken"] == "r2"
    assert out["claudeAiOauth"]["expiresAt"] == int(now.timestamp() * 1000) + 3600 * 1000
    assert len(notes) == 1 and "expires_in" in notes[0]
    assert len(raw.strip('"')) < 3 or raw.strip('"') not in notes[0], "the provider's value is not echoed"
    login = parse_login("anthropic", json.dumps(out))
    assert login.expires_at is not None


@pytest.mark.unit
@pytest.mark.parametrize("raw,secs", [("28800", 28800), ('"3600"', 3600), ("3599.5", 3599.5)])
def test_valid_expires_in(raw: str, secs: float):
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    text = json.dumps({"claudeAiOauth": {"accessToken": "a", "refreshToken": "r", "expiresAt": 1}})
    notes: list[str] = []
    out = json.loads(apply_refresh("anthropic", text, json.loads('{"access_token": "a2", "expires_in": ' + raw + "}"),
                                   now, notes))
    assert out["claudeAiOauth"]["expiresAt"] == int(now.timestamp() * 1000 + secs * 1000) and not notes


@pytest.mark.component
@pytest.mark.timeout(60)
@pytest.mark.parametrize("raw", ["1e999", "1" + "0" * 400])
async def test_expires_in_1e999_from_the_provider_keeps_the_login(world: World, raw: str):
    """Before: the overflow threw the new tokens away and the retry reused the spent token (a
    400-digit integer, which float() cannot hold, raised OverflowError out of the keeper's tick)."""
    settings(world)
    world.provider.override_next_token_answer("expires_in", raw)
    text = await setup(world, ttl=6.0, boxes=1)
    first = parse_login("anthropic", text)
    await eventually(lambda: any(e["reason"] == "TokenAnswerInvalid" for e in world.events("shared")), 20,
                     what="the unusable expires_in reported")
    await asyncio.sleep(1.0)
    assert uses_of(world, first.refresh_token or "") == 1
    assert all(r.outcome == "ok" for r in world.provider.refreshes), world.provider.refreshes
    secret = parse_login("anthropic", secret_text(world))
    newest = [r for r in world.provider.refreshes if r.status == 200][-1]
    assert token_fingerprint(secret.access_token) == newest.new_access_fp
    assert world.provider.token_valid(secret.access_token)
    assert secret.expires_at is not None and secret.expires_at.timestamp() - time.time() < 3700
    event = next(e for e in world.events("shared") if e["reason"] == "TokenAnswerInvalid")
    assert "expires_in" in event["message"] and raw not in event["message"]
    assert token_fingerprint(parse_login("anthropic", world.login_file("box0") or "").access_token) == \
        newest.new_access_fp


# ---------------------------------------------------------------------------------- level-triggered state
@pytest.mark.component
@pytest.mark.timeout(60)
async def test_disconnected_is_rewritten_until_the_api_server_has_it(world: World):
    settings(world, usage_interval_s=3.0)
    world.provider.token_ttl_s["anthropic"] = 60.0
    await setup(world, ttl=60.0, boxes=0)
    await eventually(lambda: sub_status(world).get("state") == "Available", 15, what="first read")
    world.provider.fail_next(1, 400, path=TOKEN_PATH["anthropic"], body={"error": "invalid_grant"})
    status_path = world.sub_path("shared") + "/status"
    world.kube.fail_next("PATCH", status_path, status=500, n=2, body_contains="Disconnected")
    text = json.loads(secret_text(world))
    text["claudeAiOauth"]["expiresAt"] = int((time.time() + 2) * 1000)  # due now (same tokens)
    await world.patch(f"/api/v1/namespaces/{world.namespace}/secrets/login-shared",
                      {"data": {"credentials.json": base64.b64encode(json.dumps(text).encode()).decode()}})
    await eventually(lambda: world.provider.count(TOKEN_PATH["anthropic"]) >= 1, 15, what="the refused refresh")
    await eventually(lambda: sub_status(world).get("state") == "Disconnected", 15, what="Disconnected written")
    assert world.kube.faults[0].remaining == 0, "both failing patches were tried"
    await asyncio.sleep(4.0)  # a usage read later (the access token itself still works)
    assert sub_status(world).get("state") == "Disconnected"
    assert cond(world, "LoginRefreshed").get("reason") == "RefreshRefused"
    assert world.provider.count(TOKEN_PATH["anthropic"]) == 1


# ---------------------------------------------------------------------------------- provider text
@pytest.mark.unit
def test_oauth_error_codes_come_from_an_allow_list():
    assert _error_code(b'{"error": "invalid_grant", "error_description": "Refresh token revoked"}') == "invalid_grant"
    assert _error_code(b'{"error": {"code": "refresh_token_reused", "message": "x"}}') == "refresh_token_reused"
    for hostile in ('{"error": "see_http_evil_example_com_now"}', '{"error": "sk_ant_oat01_abcdef"}',
                    '{"error": {"code": "' + "a" * 40 + '"}}'):
        assert _error_code(hostile.encode()) == "(unrecognized error code)"
    assert _error_code(b'{"error": 5}') == "" and _error_code(b"<html>") == ""


@pytest.mark.component
@pytest.mark.timeout(60)
async def test_refused_refresh_reports_no_provider_text(world: World):
    settings(world)
    world.provider.fail_next(1, 400, path=TOKEN_PATH["anthropic"],
                             body={"error": "visit_evil_example_to_fix", "error_description": "call +1 555"})
    await setup(world, ttl=6.0, boxes=0)
    await eventually(lambda: sub_status(world).get("state") == "Disconnected", 20, what="Disconnected")
    texts = json.dumps(sub_status(world)) + json.dumps([e.get("message") for e in world.events("shared")])
    assert "evil" not in texts and "555" not in texts
    assert "unrecognized error code" in cond(world, "LoginRefreshed")["message"]


@pytest.mark.unit
@pytest.mark.parametrize("value,secs", [("120", 120.0), ("0", 0.0), ("-3", 0.0), ("1e999", MAX_RETRY_AFTER_S),
                                        ("nan", None), ("soon", None), ("", None), (None, None),
                                        ("Thu, 01 Jan 2026 01:00:00 GMT", 3600.0),
                                        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_S)])
def test_retry_after_one_parser(value, secs):
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_retry_after(value, now) == secs


@pytest.mark.unit
def test_retry_after_is_shared():
    from controller import notify
    from controller.providers import readers

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert readers._retry_after("Thu, 01 Jan 2026 01:00:00 GMT", now) == 3600.0
    assert notify._retry_after("7") == 7.0
    assert C  # constants importable alongside (no cycle)


@pytest.mark.component
@pytest.mark.timeout(60)
async def test_deeply_nested_token_answer_never_reuses_the_spent_token(world: World):
    """A 200 token answer with 100,000 nested brackets in one field: Python's JSON decoder raises
    RecursionError (not ValueError). The provider spent the refresh token; the keeper must treat the
    answer as lost, never send the token again (a second use revokes every copy)."""
    settings(world)
    world.provider.override_next_token_answer("scope", "[" * 100_000 + "]" * 100_000)
    text = await setup(world, ttl=6.0, boxes=1)
    first = parse_login("anthropic", text)
    await eventually(lambda: cond(world, "LoginRefreshed").get("reason") == "RefreshAnswerLost", 20,
                     what="the unusable answer treated as lost")
    await asyncio.sleep(2.0)
    assert uses_of(world, first.refresh_token or "") == 1, world.provider.refreshes
    assert all(r.outcome in ("ok", "lost") for r in world.provider.refreshes), world.provider.refreshes
