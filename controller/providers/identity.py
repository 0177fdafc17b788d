"""Ask the provider who a login belongs to: the proof a box cannot forge.

A login file found in a box says whatever its author wrote (account ids, markers); only the provider
can say which account an access token belongs to. Endpoints (the ones the CLIs themselves call):

- Anthropic: ``GET {api}/api/oauth/profile`` with the OAuth Bearer token and ``anthropic-beta:
  oauth-2025-04-20`` -> ``{"account": {"uuid", "email", …}, "organization": {"uuid", …}}`` (Claude Code
  2.1.x reads it after a login).
- ChatGPT (Codex): ``GET {chatgpt}/backend-api/me`` -> ``{"id": "user-…", …}`` (the signed-in user) and
  ``GET {chatgpt}/backend-api/wham/accounts/check`` -> ``{"accounts": [{"id", …}]}`` (the accounts the
  token may act for; Codex 0.169 calls it at start). The login's ``account_id`` must be among them.

The identity is ``"sha256:" + 16 hex digits`` of the provider's ids: it can be kept in a Subscription's
status and compared, and it reveals neither a token nor an e-mail address. Errors never carry token
text: messages name the provider, host, path and status only; response bodies are read up to 64 KiB.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import aiohttp

from controller.providers.bounded import read_capped
from controller.providers.credentials import Login
from controller.redact import url_for_message


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else {} (untrusted input: any shape may come)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else []."""
    return value if isinstance(value, list) else []


__all__ = ["IdentityRefused", "IdentityUnavailable", "account_identity"]

MAX_BODY = 65536
ANTHROPIC_PROFILE = "/api/oauth/profile"
OPENAI_ME = "/backend-api/me"
OPENAI_ACCOUNTS = "/backend-api/wham/accounts/check"


class IdentityUnavailable(Exception):
    """The provider could not be asked (timeout, connection error, 5xx, 429, malformed answer): try later."""


class IdentityRefused(Exception):
    """The provider does not accept the access token (401/403), or it does not act for the login's
    account: the login proves nothing."""


def _digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str], provider: str,
               timeout_s: float) -> dict[str, Any]:
    try:
        async with session.get(url, headers=headers, allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            status = resp.status
            raw = await read_capped(resp.content, MAX_BODY)
    except (asyncio.TimeoutError, aiohttp.ClientError):
        raise IdentityUnavailable(f"{provider} identity check failed: no answer ({url_for_message(url)})") from None
    if status in (401, 403):
        raise IdentityRefused(f"{provider} identity check: HTTP {status} ({url_for_message(url)})")
    if status != 200:
        raise IdentityUnavailable(f"{provider} identity check failed: HTTP {status} ({url_for_message(url)})")
    if len(raw) > MAX_BODY:
        raise IdentityUnavailable(f"{provider} identity answer too large ({url_for_message(url)})")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise IdentityUnavailable(f"{provider} identity answer is not JSON ({url_for_message(url)})") from None
    if not isinstance(body, dict):
        raise IdentityUnavailable(f"{provider} identity answer is not an object ({url_for_message(url)})")
    return body


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


async def account_identity(session: aiohttp.ClientSession, provider: str, login: Login, *, base_url: str,
                           timeout_s: float = 10.0) -> str:
    """The provider-confirmed identity of ``login``'s account: ``"sha256:<16 hex>"``.

    Anthropic: the account uuid and organization uuid of ``/api/oauth/profile``. ChatGPT: the user id of
    ``/backend-api/me`` and the login's ``account_id``, which ``/backend-api/wham/accounts/check`` must list.

    Args:
        session: aiohttp session.
        provider: "anthropic" | "openai".
        login: the login to check (its access token is sent, to the provider only).
        base_url: the provider's API base (settings ``anthropic_base_url`` / ``openai_base_url``).
        timeout_s: per request.
    Raises:
        IdentityRefused: 401/403, or the account is not one the token acts for.
        IdentityUnavailable: any other failure (retry later; proves nothing).
    """
    base = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {login.access_token}", "Accept": "application/json"}
    if provider == "anthropic":
        body = await _get(session, base + ANTHROPIC_PROFILE, {**headers, "anthropic-beta": "oauth-2025-04-20"},
                          provider, timeout_s)
        account = _dict(body.get("account"))
        org = _dict(body.get("organization"))
        acc_id, org_id = _id(account.get("uuid")), _id(org.get("uuid"))
        if acc_id is None:
            raise IdentityUnavailable(f"anthropic identity answer has no account.uuid ({url_for_message(base_url)})")
        return _digest("anthropic", acc_id, org_id or "")
    if provider != "openai":
        raise ValueError(f"unknown provider {provider!r}")
    if not login.account_id:
        raise IdentityRefused("openai login names no account")
    headers["ChatGPT-Account-Id"] = login.account_id
    me = await _get(session, base + OPENAI_ME, headers, provider, timeout_s)
    user = _id(me.get("id"))
    if user is None:
        raise IdentityUnavailable(f"openai identity answer has no id ({url_for_message(base_url)})")
    check = await _get(session, base + OPENAI_ACCOUNTS, headers, provider, timeout_s)
    accounts = _list(check.get("accounts"))
    ids = {a.get("id") for a in accounts if isinstance(a, dict)}
    if login.account_id not in ids:
        raise IdentityRefused("openai token does not act for the login's account")
    return _digest("openai", user, login.account_id)
