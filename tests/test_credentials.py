"""Login file parsing: Claude Code .credentials.json and Codex auth.json; errors and reprs never show tokens."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest

from controller.providers.credentials import InvalidLogin, Login, parse_login, token_fingerprint

pytestmark = pytest.mark.unit

CLAUDE_ACCESS = "sk-ant-oat01-ACCESS-abcdefghijklmnop"
CLAUDE_REFRESH = "sk-ant-ort01-REFRESH-qrstuvwxyz"
CODEX_ACCESS = "codex-access-TOKEN-1234567890"
CODEX_REFRESH = "codex-refresh-TOKEN-0987654321"
SECRETS = (CLAUDE_ACCESS, CLAUDE_REFRESH, CODEX_ACCESS, CODEX_REFRESH)


def _jwt(claims: dict) -> str:
    def b64(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}.sig"


def claude_file(**over) -> str:
    oauth = {
        "accessToken": CLAUDE_ACCESS,
        "refreshToken": CLAUDE_REFRESH,
        "expiresAt": 1893456000000,  # 2030-01-01T00:00:00Z in ms
        "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
        "subscriptionType": "max",
        "rateLimitTier": "default_claude_max_20x",
    }
    oauth.update(over)
    return json.dumps({"claudeAiOauth": oauth})


def codex_file(tokens_over: dict | None = None, **over) -> str:
    tokens = {
        "id_token": _jwt({"https://api.openai.com/auth": {"chatgpt_plan_type": "plus",
                                                          "chatgpt_account_id": "acct-from-jwt"}}),
        "access_token": CODEX_ACCESS,
        "refresh_token": CODEX_REFRESH,
        "account_id": "acct-123",
    }
    tokens.update(tokens_over or {})
    data = {"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "tokens": tokens, "last_refresh": "2026-05-01T00:00:00Z"}
    data.update(over)
    return json.dumps(data)


def _no_secret(text: str) -> None:
    for s in SECRETS:
        assert s not in text


def test_claude_login():
    login = parse_login("anthropic", claude_file())
    assert login.provider == "anthropic"
    assert login.access_token == CLAUDE_ACCESS
    assert login.refresh_token == CLAUDE_REFRESH
    assert login.account_id is None
    assert login.expires_at == datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert login.subscription_type == "max"
    assert "user:inference" in login.scopes


def test_claude_login_without_expiry():
    login = parse_login("anthropic", claude_file(expiresAt=None))
    assert login.expires_at is None


def test_codex_login():
    login = parse_login("openai", codex_file())
    assert login.provider == "openai"
    assert login.access_token == CODEX_ACCESS
    assert login.account_id == "acct-123"
    assert login.auth_mode == "chatgpt"
    assert login.subscription_type == "plus"
    assert login.expires_at is None  # access token is not a JWT here


def test_codex_expiry_from_access_jwt_and_account_from_id_token():
    access = _jwt({"exp": 1893456000})
    login = parse_login("openai", codex_file({"access_token": access, "account_id": None}))
    assert login.expires_at == datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert login.account_id == "acct-from-jwt"


@pytest.mark.parametrize(
    ("provider", "text", "reason"),
    [
        ("anthropic", "{not json " + CLAUDE_ACCESS, "not valid JSON"),
        ("openai", "", "not valid JSON"),
        ("anthropic", json.dumps([CLAUDE_ACCESS]), "not a JSON object"),
        ("anthropic", claude_file(accessToken=None), "missing claudeAiOauth.accessToken"),
        ("anthropic", claude_file(accessToken=""), "missing claudeAiOauth.accessToken"),
        ("anthropic", claude_file(expiresAt="soon"), "claudeAiOauth.expiresAt is not a number (epoch ms)"),
        ("anthropic", json.dumps({"other": CLAUDE_ACCESS}), "missing claudeAiOauth"),
        ("anthropic", codex_file(), "this is a Codex auth.json, not a Claude Code login"),
        ("openai", claude_file(), "this is a Claude Code .credentials.json, not a Codex auth.json"),
        ("openai", codex_file({"access_token": None}), "missing tokens.access_token"),
        ("openai", codex_file({"account_id": None, "id_token": None}), "missing tokens.account_id"),
        ("openai", json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": "sk-proj-" + CODEX_ACCESS, "tokens": None}),
         "this Codex auth.json holds an API key, not a ChatGPT login"),
        ("gemini", claude_file(), "unknown provider (expected anthropic or openai)"),
    ],
)
def test_invalid_login(provider, text, reason):
    with pytest.raises(InvalidLogin) as ei:
        parse_login(provider, text)
    assert ei.value.reason == reason
    assert str(ei.value) == reason
    _no_secret(str(ei.value))
    assert ei.value.__cause__ is None
    assert ei.value.__context__ is None or ei.value.__suppress_context__  # no chained JSON doc


def test_repr_hides_tokens():
    for login in (parse_login("anthropic", claude_file()), parse_login("openai", codex_file())):
        for text in (repr(login), str(login), f"{login}", repr([login])):
            _no_secret(text)
            assert login.fingerprint in text
        assert login.fingerprint == token_fingerprint(login.access_token)
        assert len(login.fingerprint) == 8


def test_login_dataclass_shape():
    login = Login(provider="openai", access_token="x", account_id="a")
    assert login.expires_at is None and login.refresh_token is None
