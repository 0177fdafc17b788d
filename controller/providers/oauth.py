"""Refresh a subscription's login with the provider's OAuth token endpoint, as the agents themselves do.

Endpoints mirrored (notes/real-agents.md "Logins, refresh…", measured with Claude Code 2.1.328 and
Codex CLI 0.169.0):

- Anthropic: ``POST https://platform.claude.com/v1/oauth/token``, JSON ``{grant_type: "refresh_token",
  refresh_token, client_id, scope}`` -> ``{access_token, refresh_token, expires_in, scope, …}``.
  The login file keeps every other field; ``expiresAt`` = now + ``expires_in`` (ms).
- OpenAI (ChatGPT): ``POST https://auth.openai.com/oauth/token``, JSON ``{client_id, grant_type,
  refresh_token, scope}`` -> ``{id_token, access_token, refresh_token}``; ``last_refresh`` = now.

Refresh tokens are single-use: a refresh token presented twice is refused and the provider revokes
the whole chain (field-pitfalls §9). Callers must therefore hold one refresh at a time per
subscription and store the answer before anything else uses the login.

Errors never carry token text: messages name the provider, host, path and status only.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from controller.providers.credentials import InvalidLogin, Login, parse_login

__all__ = [
    "ANTHROPIC_CLIENT_ID", "DEFAULT_ANTHROPIC_TOKEN_URL", "DEFAULT_OPENAI_TOKEN_URL", "OPENAI_CLIENT_ID",
    "RefreshError", "RefreshRefused", "RefreshUnavailable", "apply_refresh", "refresh_login",
]

DEFAULT_ANTHROPIC_TOKEN_URL = "https://platform.claude.com/v1/oauth/token"
DEFAULT_OPENAI_TOKEN_URL = "https://auth.openai.com/oauth/token"
# The public OAuth client ids of the CLIs (the refresh tokens were issued to them).
ANTHROPIC_CLIENT_ID = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
OPENAI_CLIENT_ID = "app_EMoamEEZ73f0CkXaXp7hrann"
OPENAI_SCOPE = "openid profile email"
ANTHROPIC_SCOPES = ("user:inference", "user:profile", "user:sessions:claude_code")


class RefreshError(Exception):
    """A refresh failed. ``status``: HTTP status or None (connection error, timeout, bad body)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class RefreshRefused(RefreshError):
    """400/401/403: the provider refused the refresh token (spent, revoked or unknown). The login is dead
    unless a newer one exists somewhere (a box that refreshed by itself)."""


class RefreshUnavailable(RefreshError):
    """5xx, 429, timeout or connection error: try again later with the same refresh token."""


def _where(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}{':' + str(parts.port) if parts.port else ''}{parts.path}"


def apply_refresh(provider: str, text: str, answer: dict[str, Any], now: datetime) -> str:
    """The login file ``text`` with the token endpoint's ``answer`` applied; every other field kept.

    Raises:
        RefreshError: the answer lacks an access token (or the new file does not parse).
    """
    data = json.loads(text)
    access = answer.get("access_token")
    if not isinstance(access, str) or not access:
        raise RefreshError(f"{provider} token endpoint answered without access_token", 200)
    refresh = answer.get("refresh_token")
    if provider == "anthropic":
        oauth = dict(data.get("claudeAiOauth") or {})
        oauth["accessToken"] = access
        if isinstance(refresh, str) and refresh:
            oauth["refreshToken"] = refresh
        expires_in = answer.get("expires_in")
        if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
            oauth["expiresAt"] = int(now.timestamp() * 1000 + float(expires_in) * 1000)
        scope = answer.get("scope")
        if isinstance(scope, str) and scope.strip():
            oauth["scopes"] = scope.split()
        data["claudeAiOauth"] = oauth
    else:
        tokens = dict(data.get("tokens") or {})
        tokens["access_token"] = access
        if isinstance(refresh, str) and refresh:
            tokens["refresh_token"] = refresh
        id_token = answer.get("id_token")
        if isinstance(id_token, str) and id_token:
            tokens["id_token"] = id_token
        data["tokens"] = tokens
        data["last_refresh"] = now.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    out = json.dumps(data)
    try:
        parse_login(provider, out)
    except InvalidLogin as exc:
        raise RefreshError(f"{provider} refreshed login does not parse: {exc.reason}", 200) from None
    return out


async def refresh_login(session: aiohttp.ClientSession, provider: str, text: str, login: Login, *,
                        token_url: str, now: datetime, timeout_s: float = 15.0) -> str:
    """Spend ``login``'s refresh token once; returns the new login file text (same format as ``text``).

    Raises:
        RefreshRefused: 400/401/403 (the login cannot be renewed with this refresh token).
        RefreshUnavailable: 5xx, 429, timeout, connection error (the refresh token may or may not have
            been spent: a retry with it is what the agents do too).
        RefreshError: the login has no refresh token, or the answer is not usable.
    """
    if not login.refresh_token:
        raise RefreshError(f"{provider} login has no refresh token")
    if provider == "anthropic":
        body: dict[str, Any] = {"grant_type": "refresh_token", "refresh_token": login.refresh_token,
                                "client_id": ANTHROPIC_CLIENT_ID,
                                "scope": " ".join(login.scopes or ANTHROPIC_SCOPES)}
    else:
        body = {"client_id": OPENAI_CLIENT_ID, "grant_type": "refresh_token",
                "refresh_token": login.refresh_token, "scope": OPENAI_SCOPE}
    where = _where(token_url)
    try:
        async with session.post(token_url, json=body, headers={"Accept": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False) as resp:
            status = resp.status
            raw = await resp.read()
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        raise RefreshUnavailable(f"{provider} token refresh timed out ({where})") from None
    except aiohttp.ClientError as exc:
        raise RefreshUnavailable(f"{provider} token refresh failed: {type(exc).__name__} ({where})") from None
    if status in (400, 401, 403):
        code = _error_code(raw)
        raise RefreshRefused(f"{provider} token endpoint refused the refresh token: HTTP {status}"
                             f"{' ' + code if code else ''} ({where})", status)
    if status == 429 or status >= 500:
        raise RefreshUnavailable(f"{provider} token refresh failed: HTTP {status} ({where})", status)
    if status != 200:
        raise RefreshError(f"{provider} token refresh failed: HTTP {status} ({where})", status)
    try:
        answer = json.loads(raw)
    except ValueError:
        raise RefreshUnavailable(f"{provider} token endpoint answered non-JSON ({where})", status) from None
    if not isinstance(answer, dict):
        raise RefreshUnavailable(f"{provider} token endpoint answered a non-object ({where})", status)
    return apply_refresh(provider, text, answer, now)


def _error_code(raw: bytes) -> str:
    """The provider's short error code (``invalid_grant``, ``refresh_token_reused``…), never free text."""
    try:
        body = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    err = body.get("error")
    code = err.get("code") if isinstance(err, dict) else err
    if isinstance(code, str) and code.replace("_", "").isalnum() and len(code) < 64:
        return code
    return ""
