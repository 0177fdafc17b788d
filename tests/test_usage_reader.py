"""UsageReader, UsageCache and the `usage` CLI against the ProviderEmulator over real HTTP on loopback."""

from __future__ import annotations

import argparse
import asyncio
import json
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from controller.cli_usage import add_usage_parser, run_usage
from controller.providers.credentials import Login, parse_login, token_fingerprint
from controller.providers.parse import usage_to_json
from controller.providers.readers import (
    UsageCache,
    UsageReader,
    UsageReadError,
    UsageThrottled,
    UsageUnauthorized,
)
from agentbox_sim.provider import ProviderEmulator

pytestmark = pytest.mark.component

CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "usage-payloads.jsonl"
ENDPOINT_CASES = [
    c for c in (json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip())
    if c["kind"] == "usage_endpoint"
]
T0 = datetime(2026, 3, 10, 1, 0, 0, tzinfo=timezone.utc)

ANTHROPIC_TOKEN = "sk-ant-oat01-TOPSECRET-anthropic-0123456789"
OPENAI_TOKEN = "chatgpt-access-TOPSECRET-openai-0123456789"
OPENAI_ACCOUNT = "acct-0001"


def login_for(provider: str) -> Login:
    if provider == "anthropic":
        return Login(provider="anthropic", access_token=ANTHROPIC_TOKEN)
    return Login(provider="openai", access_token=OPENAI_TOKEN, account_id=OPENAI_ACCOUNT)


def login_file(provider: str) -> str:
    if provider == "anthropic":
        return json.dumps({"claudeAiOauth": {"accessToken": ANTHROPIC_TOKEN, "refreshToken": "r",
                                             "expiresAt": 1893456000000, "scopes": ["user:inference"],
                                             "subscriptionType": "max"}})
    return json.dumps({"auth_mode": "chatgpt", "tokens": {"access_token": OPENAI_TOKEN, "refresh_token": "r",
                                                          "id_token": "x", "account_id": OPENAI_ACCOUNT}})


class Clock:
    def __init__(self, t: datetime = T0) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t


@pytest.fixture
async def emu():
    e = ProviderEmulator(now=Clock())
    await e.start()
    e.add_login(ANTHROPIC_TOKEN, "claude-acct")
    e.add_login(OPENAI_TOKEN, OPENAI_ACCOUNT)
    yield e
    await e.stop()


def make_reader(emu: ProviderEmulator, **kw) -> UsageReader:
    opts = dict(anthropic_base_url=emu.url, openai_base_url=emu.url, attempts=3, backoff_initial_s=0.01,
                backoff_max_s=0.05, backoff_jitter_s=0.01, total_timeout_s=5.0, connect_timeout_s=2.0)
    opts.update(kw)
    return UsageReader(**opts)


@pytest.fixture
async def reader(emu):
    r = make_reader(emu)
    yield r
    await r.close()


def assert_no_token(exc: BaseException) -> None:
    text = str(exc) + repr(exc) + "".join(traceback.format_exception(exc))
    for tok in (ANTHROPIC_TOKEN, OPENAI_TOKEN, "TOPSECRET"):
        assert tok not in text


def _ids(cases):
    return [c["id"] for c in cases]


# ---------------------------------------------------------------------------------------------- corpus round trip


@pytest.mark.parametrize("case", ENDPOINT_CASES, ids=_ids(ENDPOINT_CASES))
async def test_corpus_payload_through_reader(emu, reader, case):
    provider = case["provider"]
    login = login_for(provider)
    emu.set_usage(login.access_token, case["payload"])
    usage = await reader.read(provider, login, Clock())
    assert usage_to_json(usage)["windows"] == case["expect"]
    assert usage.read_at == T0

    [req] = emu.requests
    assert req.method == "GET" and req.token_fp == token_fingerprint(login.access_token)
    if provider == "anthropic":
        assert req.path == "/api/oauth/usage"
        assert req.headers["user-agent"].startswith("claude-code/")
        assert req.headers["anthropic-beta"] == "oauth-2025-04-20"
    else:
        assert req.path == "/backend-api/wham/usage"
        assert req.headers["chatgpt-account-id"] == OPENAI_ACCOUNT
        assert req.headers["user-agent"].startswith("agentbox-controller/")


def _cli_ns(tmp_path: Path, provider: str, base_url: str, text: str | None = None, **kw) -> argparse.Namespace:
    path = tmp_path / f"{provider}-login.json"
    path.write_text(text if text is not None else login_file(provider))
    parser = argparse.ArgumentParser(prog="agentbox-controller")
    add_usage_parser(parser.add_subparsers(dest="cmd"))
    ns = parser.parse_args(["usage", "--provider", provider, "--credentials", str(path), "--base-url", base_url,
                            "--attempts", "2", "--retry-backoff", "0.01", "--timeout", "5"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


@pytest.mark.parametrize("case", ENDPOINT_CASES, ids=_ids(ENDPOINT_CASES))
async def test_corpus_payload_through_cli(emu, tmp_path, capsys, case):
    provider = case["provider"]
    emu.set_usage(login_for(provider).access_token, case["payload"])
    ns = _cli_ns(tmp_path, provider, emu.url)
    assert ns.func is run_usage
    rc = await asyncio.to_thread(run_usage, ns)  # run_usage owns its event loop
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["windows"] == case["expect"]
    assert doc["read_at"].endswith("Z")
    assert ANTHROPIC_TOKEN not in out + err and OPENAI_TOKEN not in out + err


async def test_set_windows_renders_both_shapes(emu, reader):
    five = (42.0, datetime(2026, 3, 10, 5, 0, tzinfo=timezone.utc))
    week = (100.0, datetime(2026, 3, 14, 9, 30, tzinfo=timezone.utc))
    for provider in ("anthropic", "openai"):
        login = login_for(provider)
        emu.set_windows(login.access_token, five_hour=five, weekly=week)
        usage = await reader.read(provider, login, Clock())
        assert usage_to_json(usage)["windows"] == {
            "five_hour": {"utilization": 42.0, "resets_at": "2026-03-10T05:00:00Z"},
            "weekly": {"utilization": 100.0, "resets_at": "2026-03-14T09:30:00Z"},
        }


async def test_set_windows_weekly_only_sits_in_primary_for_openai(emu, reader):
    emu.set_windows(OPENAI_ACCOUNT, weekly=(7.0, None), plan_type="pro")
    body = emu.render_openai(emu._account(OPENAI_ACCOUNT))
    assert body["rate_limit"]["primary_window"]["limit_window_seconds"] == 604800
    assert body["rate_limit"]["secondary_window"] is None
    usage = await reader.read("openai", login_for("openai"), Clock())
    assert set(usage.windows) == {"weekly"} and usage.windows["weekly"].resets_at is None


# ---------------------------------------------------------------------------------------------- failures


async def test_503_then_200_is_retried(emu, reader):
    emu.set_windows("claude-acct", five_hour=(10.0, None))
    emu.fail_next(1, 503)
    usage = await reader.read("anthropic", login_for("anthropic"), Clock())
    assert usage.windows["five_hour"].utilization == 10.0
    assert [r.status for r in emu.requests] == [503, 200]


async def test_5xx_exhausts_attempts(emu, reader):
    emu.fail_next(5, 502)
    with pytest.raises(UsageReadError) as ei:
        await reader.read("openai", login_for("openai"), Clock())
    assert not isinstance(ei.value, (UsageThrottled, UsageUnauthorized))
    assert "502" in str(ei.value) and "3 attempt" in str(ei.value)
    assert emu.count() == 3
    assert_no_token(ei.value)


async def test_429_with_retry_after_is_throttled_not_retried(emu, reader):
    emu.fail_next(1, 429, {"Retry-After": "30"})
    with pytest.raises(UsageThrottled) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert ei.value.retry_after_s == 30.0
    assert ei.value.status == 429
    assert emu.count() == 1
    assert_no_token(ei.value)


async def test_429_retry_after_http_date_and_missing(emu, reader):
    emu.fail_next(1, 429, {"Retry-After": "Tue, 10 Mar 2026 01:02:00 GMT"})
    with pytest.raises(UsageThrottled) as ei:
        await reader.read("openai", login_for("openai"), Clock())
    assert ei.value.retry_after_s == 120.0
    emu.fail_next(1, 429)
    with pytest.raises(UsageThrottled) as ei:
        await reader.read("openai", login_for("openai"), Clock())
    assert ei.value.retry_after_s is None


async def test_503_with_retry_after_is_throttled(emu, reader):
    emu.fail_next(1, 503, {"Retry-After": "5"})
    with pytest.raises(UsageThrottled) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert ei.value.retry_after_s == 5.0 and emu.count() == 1


async def test_401_is_unauthorized(emu, reader):
    emu.fail_next(1, 401)
    with pytest.raises(UsageUnauthorized) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert ei.value.status == 401 and emu.count() == 1
    assert_no_token(ei.value)


async def test_unknown_token_is_unauthorized(emu, reader):
    emu.revoke(OPENAI_TOKEN)
    with pytest.raises(UsageUnauthorized) as ei:
        await reader.read("openai", login_for("openai"), Clock())
    assert_no_token(ei.value)


async def test_account_mismatch_is_403(emu, reader):
    login = Login(provider="openai", access_token=OPENAI_TOKEN, account_id="someone-else")
    with pytest.raises(UsageUnauthorized) as ei:
        await reader.read("openai", login, Clock())
    assert ei.value.status == 403


async def test_other_status_is_read_error(emu, reader):
    emu.fail_next(1, 404)
    with pytest.raises(UsageReadError) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert type(ei.value) is UsageReadError and ei.value.status == 404 and emu.count() == 1


async def test_malformed_body_names_field(emu, reader):
    emu.set_usage("claude-acct", {"five_hour": {"utilization": "lots", "resets_at": None}})
    with pytest.raises(UsageReadError) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert "five_hour.utilization" in str(ei.value)


async def test_non_json_body(emu, reader):
    emu.fail_next(1, 200, body="not json")  # a JSON string: not an object
    with pytest.raises(UsageReadError) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert "not a JSON object" in str(ei.value)


async def test_timeout_is_retried_then_fails(emu):
    emu.latency_s = 0.5
    async with make_reader(emu, total_timeout_s=0.1, attempts=2) as r:
        with pytest.raises(UsageReadError) as ei:
            await r.read("anthropic", login_for("anthropic"), Clock())
    assert "timeout" in str(ei.value) and "2 attempt" in str(ei.value)
    assert_no_token(ei.value)


async def test_connection_refused(emu):
    url = emu.url
    await emu.stop()
    async with UsageReader(anthropic_base_url=url + "/?token=" + ANTHROPIC_TOKEN, attempts=2,
                           backoff_initial_s=0.01, backoff_max_s=0.01, backoff_jitter_s=0) as r:
        with pytest.raises(UsageReadError) as ei:
            await r.read("anthropic", login_for("anthropic"), Clock())
    assert "connection error" in str(ei.value)
    assert "?" not in str(ei.value)
    assert_no_token(ei.value)


async def test_wrong_provider_login_rejected(reader):
    with pytest.raises(ValueError):
        await reader.read("openai", login_for("anthropic"), Clock())


# ---------------------------------------------------------------------------------------------- cache


async def test_cache_coalesces_concurrent_gets(emu, reader):
    emu.set_windows("claude-acct", five_hour=(55.0, None))
    emu.latency_s = 0.05
    cache = UsageCache(reader)
    key = ("team-a", "sub-1")
    clock = Clock()
    results = await asyncio.gather(*[
        cache.get(key, "anthropic", login_for("anthropic"), max_age_s=0, now=clock) for _ in range(20)
    ])
    assert all(u is results[0] for u in results)
    assert cache.calls[key] == 1
    assert emu.count("/api/oauth/usage") == 1


async def test_cache_respects_max_age(emu, reader):
    emu.set_windows(OPENAI_ACCOUNT, five_hour=(1.0, None))
    cache = UsageCache(reader)
    key = ("team-a", "sub-2")
    clock = Clock()
    login = login_for("openai")
    assert cache.peek(key) is None
    u1 = await cache.get(key, "openai", login, max_age_s=60, now=clock)
    emu.set_windows(OPENAI_ACCOUNT, five_hour=(2.0, None))
    clock.t += timedelta(seconds=59)
    assert await cache.get(key, "openai", login, max_age_s=60, now=clock) is u1
    assert cache.calls[key] == 1
    clock.t += timedelta(seconds=2)
    u2 = await cache.get(key, "openai", login, max_age_s=60, now=clock)
    assert u2.windows["five_hour"].utilization == 2.0 and cache.calls[key] == 2
    assert cache.peek(key) is u2
    cache.invalidate(key)
    assert cache.peek(key) is None
    await cache.get(key, "openai", login, max_age_s=60, now=clock)
    assert cache.calls[key] == 3 and emu.count() == 3


async def test_cache_keys_are_independent_and_errors_not_cached(emu, reader):
    cache = UsageCache(reader)
    emu.fail_next(1, 401)
    waiters = [cache.get("k1", "anthropic", login_for("anthropic"), max_age_s=60, now=Clock()) for _ in range(5)]
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, UsageUnauthorized) for r in results)
    assert cache.calls["k1"] == 1 and cache.peek("k1") is None
    await cache.get("k1", "anthropic", login_for("anthropic"), max_age_s=60, now=Clock())
    await cache.get("k2", "anthropic", login_for("anthropic"), max_age_s=60, now=Clock())
    assert cache.calls == {"k1": 2, "k2": 1}


async def test_cache_counts_retried_requests(emu, reader):
    emu.fail_next(2, 500)
    cache = UsageCache(reader)
    await cache.get("k", "openai", login_for("openai"), max_age_s=60, now=Clock())
    assert cache.calls["k"] == 3 == emu.count()


async def test_cancelled_caller_does_not_cancel_shared_read(emu, reader):
    emu.latency_s = 0.1
    cache = UsageCache(reader)
    login = login_for("anthropic")
    t1 = asyncio.ensure_future(cache.get("k", "anthropic", login, max_age_s=60, now=Clock()))
    t2 = asyncio.ensure_future(cache.get("k", "anthropic", login, max_age_s=60, now=Clock()))
    await asyncio.sleep(0.02)
    t1.cancel()
    usage = await t2
    assert usage.read_at == T0 and cache.calls["k"] == 1


# ---------------------------------------------------------------------------------------------- CLI errors


async def test_cli_unauthorized_exit_1_no_token(emu, tmp_path, capsys):
    emu.fail_next(1, 401)
    rc = await asyncio.to_thread(run_usage, _cli_ns(tmp_path, "anthropic", emu.url))
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert "unauthorized" in err and len(err.strip().splitlines()) == 1
    assert ANTHROPIC_TOKEN not in err


async def test_cli_throttled_exit_1(emu, tmp_path, capsys):
    emu.fail_next(1, 429, {"Retry-After": "12"})
    rc = await asyncio.to_thread(run_usage, _cli_ns(tmp_path, "openai", emu.url))
    _, err = capsys.readouterr()
    assert rc == 1 and "throttled" in err and "12" in err and OPENAI_TOKEN not in err


def test_cli_bad_login_exit_2(tmp_path, capsys):
    ns = _cli_ns(tmp_path, "anthropic", "http://127.0.0.1:9", text=login_file("openai"))
    assert run_usage(ns) == 2
    _, err = capsys.readouterr()
    assert "Codex auth.json" in err and OPENAI_TOKEN not in err
    ns.credentials = str(tmp_path / "missing.json")
    assert run_usage(ns) == 2
    _, err = capsys.readouterr()
    assert "cannot read credentials file" in err


def test_cli_login_file_parses_with_parse_login():
    assert parse_login("anthropic", login_file("anthropic")).access_token == ANTHROPIC_TOKEN
    assert parse_login("openai", login_file("openai")).account_id == OPENAI_ACCOUNT


async def test_oversized_body_is_a_read_error_not_parsed(emu, reader):
    """A usage answer is about 1 KiB; one of 8 MiB (a valid payload with padding) is refused unread
    beyond the cap instead of being loaded whole into the controller."""
    from controller.providers.readers import MAX_USAGE_ANSWER

    emu.set_usage("claude-acct", {"five_hour": {"utilization": 10, "resets_at": None}, "padding": "x" * (8 << 20)})
    with pytest.raises(UsageReadError) as ei:
        await reader.read("anthropic", login_for("anthropic"), Clock())
    assert f"larger than {MAX_USAGE_ANSWER} bytes" in str(ei.value)


@pytest.mark.parametrize("provider,payload", [
    ("anthropic", {"five_hour": {"utilization": 10 ** 400, "resets_at": None}}),
    ("openai", {"rate_limit": {"primary_window": {"used_percent": 5, "reset_at": 10 ** 400,
                                                  "limit_window_seconds": 18000}}}),
])
async def test_a_400_digit_number_is_a_read_error_not_a_crash(emu, reader, provider: str, payload: dict):
    """JSON integers have no size limit; Python's `math.isfinite(10**400)` raises OverflowError. The
    answer is malformed (UsageReadError naming the field), never an exception that fails the pass."""
    emu.set_usage("claude-acct" if provider == "anthropic" else OPENAI_ACCOUNT, payload)
    with pytest.raises(UsageReadError) as ei:
        await reader.read(provider, login_for(provider), Clock())
    assert "malformed" in str(ei.value)
