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

import aiohttp

from controller.providers.bounded import read_capped
from controller.providers.credentials import InvalidLogin, Login, parse_login
from controller.redact import url_for_message

__all__ = [
    "ANTHROPIC_CLIENT_ID", "DEFAULT_ANTHROPIC_TOKEN_URL", "DEFAULT_OPENAI_TOKEN_URL", "OPENAI_CLIENT_ID",
    "KNOWN_ERROR_CODES", "RefreshError", "RefreshLost", "RefreshRefused", "RefreshUnavailable", "apply_refresh",
    "refresh_login",
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
    """The provider answered 5xx or 429, or could not be reached at all (connection refused, connect
    timeout): the refresh token was not spent; try again later with it. ``retry_after_s``: the
    provider's ``Retry-After`` in seconds (shared parser), or None."""

    def __init__(self, message: str, status: int | None = None, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, status)


class RefreshLost(RefreshError):
    """The request reached the provider but no usable answer came back (timeout after sending, the
    connection dropped, a 200 whose body is not a usable token answer). The provider may have spent the
    refresh token: it must never be sent again (a second use revokes the whole chain)."""


# OAuth 2.0 (RFC 6749 §5.2) error codes and the providers' own ones (field-pitfalls §9). Anything else a
# token endpoint answers is reported as "unrecognized error code", never echoed.
KNOWN_ERROR_CODES = frozenset({
    "invalid_request", "invalid_client", "invalid_grant", "unauthorized_client", "unsupported_grant_type",
    "invalid_scope", "access_denied", "server_error", "temporarily_unavailable",
    "refresh_token_reused", "refresh_token_expired", "refresh_token_invalidated", "token_expired",
    "token_revoked", "rate_limit_exceeded",
})

MAX_EXPIRES_IN_S = 366 * 24 * 3600
"""Longest access-token lifetime believed from a token answer (seconds)."""
FALLBACK_EXPIRES_IN_S = 3600
"""Lifetime assumed when a token answer's ``expires_in`` is missing or unusable (short on purpose: an
early refresh costs one call, a late one logs every box out)."""


def _expires_in(value: Any) -> float | None:
    """``expires_in`` as seconds when it is a finite number (or a decimal string) in 1..MAX_EXPIRES_IN_S."""
    import math

    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 12:
        value = int(value.strip())
    if not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and not -MAX_EXPIRES_IN_S <= value <= MAX_EXPIRES_IN_S:
        return None  # a 400-digit JSON integer: float() would raise OverflowError
    secs = float(value)
    if not math.isfinite(secs) or secs < 1 or secs > MAX_EXPIRES_IN_S:
        return None
    return secs


def apply_refresh(provider: str, text: str, answer: dict[str, Any], now: datetime,
                  notes: list[str] | None = None) -> str:
    """The login file ``text`` with the token endpoint's ``answer`` applied; every other field kept.

    Numbers are validated: an ``expires_in`` that is not a finite number of seconds within
    1..`MAX_EXPIRES_IN_S` (``1e999``, negative, NaN, ``"soon"``) or is missing never throws the new
    tokens away: the login gets ``expiresAt`` = now + `FALLBACK_EXPIRES_IN_S` and a note naming the
    field is appended to ``notes`` (the caller reports it).

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
        expires_in = _expires_in(answer.get("expires_in"))
        if expires_in is None:
            expires_in = float(FALLBACK_EXPIRES_IN_S)
            if notes is not None:
                notes.append(f"{provider} token answer field expires_in is missing or not a number of seconds "
                             f"within 1..{MAX_EXPIRES_IN_S}; assumed {FALLBACK_EXPIRES_IN_S} s")
        oauth["expiresAt"] = int(now.timestamp() * 1000 + expires_in * 1000)
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
                        token_url: str, now: datetime, timeout_s: float = 15.0,
                        notes: list[str] | None = None) -> str:
    """Spend ``login``'s refresh token once; returns the new login file text (same format as ``text``).

    Args:
        notes: if given, receives a sentence per token-answer field that was unusable and replaced
            (see `apply_refresh`); never a value.
    Raises:
        RefreshRefused: 400/401/403 (the login cannot be renewed with this refresh token).
        RefreshUnavailable: 5xx, 429, or the provider was not reached (the token was not spent: a
            retry with it is safe), with the provider's ``Retry-After``.
        RefreshLost: the request may have reached the provider and no usable answer came back: the
            token may be spent and must not be sent again.
        RefreshError: the login has no refresh token.
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
    where = url_for_message(token_url)
    from controller.providers.retry_after import parse_retry_after

    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(5.0, timeout_s))
    try:
        async with session.post(token_url, json=body, headers={"Accept": "application/json"},
                                timeout=timeout, allow_redirects=False) as resp:
            status = resp.status
            retry_after = parse_retry_after(resp.headers.get("Retry-After"), now)
            raw = await read_capped(resp.content, _MAX_ANSWER)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
        # Never connected: the request did not reach the provider, the token is not spent.
        raise RefreshUnavailable(f"{provider} token endpoint not reached: {type(exc).__name__} ({where})") from None
    except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
        raise RefreshLost(f"{provider} token refresh answer lost: {type(exc).__name__} ({where})") from None
    if status in (400, 401, 403):
        code = _error_code(raw)
        raise RefreshRefused(f"{provider} token endpoint refused the refresh token: HTTP {status}"
                             f"{' ' + code if code else ''} ({where})", status)
    if status == 429 or status >= 500:
        raise RefreshUnavailable(f"{provider} token refresh failed: HTTP {status} ({where})", status, retry_after)
    if status != 200:
        raise RefreshUnavailable(f"{provider} token refresh failed: HTTP {status} ({where})", status, retry_after)
    try:
        answer = json.loads(raw) if len(raw) <= _MAX_ANSWER else None
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        raise RefreshLost(f"{provider} token endpoint answered 200 without a JSON object ({where})", status)
    try:
        return apply_refresh(provider, text, answer, now, notes)
    except RefreshError as exc:
        # A 200 means the provider took the token; an unusable answer loses the new one.
        raise RefreshLost(f"{exc} ({where})", status) from None


_MAX_ANSWER = 262144  # bytes of a token answer read at most


def _error_code(raw: bytes) -> str:
    """The provider's error code when it is one of `KNOWN_ERROR_CODES` (``invalid_grant``,
    ``refresh_token_reused``…); "(unrecognized error code)" for any other value; "" without one.
    Never the provider's text: it ends up in Events and status."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(body, dict):
        return ""
    err = body.get("error")
    code = err.get("code") if isinstance(err, dict) else err
    if not isinstance(code, str) or not code:
        return ""
    return code if code in KNOWN_ERROR_CODES else "(unrecognized error code)"
