"""Parse the agents' login files into a `Login`. Pure, no I/O; token text never reaches messages or reprs.

Formats mirrored (field-pitfalls §9, real-agents.md):

- Claude Code 2.1.x ``~/.claude/.credentials.json``: ``{"claudeAiOauth": {"accessToken", "refreshToken",
  "expiresAt" (epoch ms), "scopes": [...], "subscriptionType", "rateLimitTier"}}``.
- Codex CLI 0.169 ``$CODEX_HOME/auth.json``: ``{"auth_mode": "chatgpt", "OPENAI_API_KEY": null,
  "tokens": {"id_token", "access_token", "refresh_token", "account_id"}, "last_refresh"}``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

__all__ = ["InvalidLogin", "Login", "parse_login", "token_fingerprint"]

Provider = Literal["anthropic", "openai"]


class InvalidLogin(ValueError):
    """A login file cannot be used. ``reason`` is a short human phrase; it never contains token text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def token_fingerprint(token: str | None) -> str:
    """First 8 hex digits of sha256(token): safe to log or compare, "" for no token."""
    if not token:
        return ""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:8]


@dataclass(frozen=True, repr=False)
class Login:
    """A parsed login.

    Attributes:
        provider: "anthropic" (Claude Code) or "openai" (Codex, ChatGPT mode).
        access_token: the OAuth access token (secret: never log it; ``repr`` hides it).
        account_id: ChatGPT account id (sent as ``ChatGPT-Account-Id``); None for Anthropic.
        expires_at: access token expiry (UTC, tz-aware) or None when unknown. Anthropic: ``expiresAt`` ms;
            Codex: the access token JWT's ``exp`` when it decodes.
        refresh_token: single-use refresh token (secret) or None.
        subscription_type: Claude ``subscriptionType`` ("max", "pro"…) or the ChatGPT plan type from the
            id_token claims, when known.
        scopes: Claude OAuth scopes (empty for Codex).
        auth_mode: Codex ``auth_mode`` ("chatgpt"); None for Anthropic.
    """

    provider: str
    access_token: str
    account_id: str | None = None
    expires_at: datetime | None = None
    refresh_token: str | None = None
    subscription_type: str | None = None
    scopes: tuple[str, ...] = field(default_factory=tuple)
    auth_mode: str | None = None

    @property
    def fingerprint(self) -> str:
        """sha256(access_token)[:8]: identifies the token in logs without revealing it."""
        return token_fingerprint(self.access_token)

    def __repr__(self) -> str:
        exp = self.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if self.expires_at else None
        return (
            f"Login(provider={self.provider!r}, account_id={self.account_id!r}, expires_at={exp!r}, "
            f"subscription_type={self.subscription_type!r}, token=sha256:{self.fingerprint})"
        )

    __str__ = __repr__


def parse_login(provider: str, text: str) -> Login:
    """Parse a login file's text for ``provider``.

    Args:
        provider: "anthropic" for Claude Code's ``.credentials.json``, "openai" for Codex's ``auth.json``.
        text: the file content.

    Returns:
        Login with the access token and, where the file has them, account id, expiry (UTC) and refresh token.

    Raises:
        InvalidLogin: with reasons such as "not valid JSON", "missing claudeAiOauth.accessToken",
            "this is a Codex auth.json, not a Claude Code login", "this is a Claude Code .credentials.json,
            not a Codex auth.json", "missing tokens.access_token", "unknown provider".
    """
    if provider not in ("anthropic", "openai"):
        raise InvalidLogin("unknown provider (expected anthropic or openai)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidLogin("not valid UTF-8") from None
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        # `from None`: JSONDecodeError keeps the whole document (tokens included) in `.doc`.
        # RecursionError: deeply nested brackets (a box's file is untrusted).
        raise InvalidLogin("not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidLogin("not a JSON object")
    if provider == "anthropic":
        return _parse_claude(data)
    return _parse_codex(data)


def _looks_codex(data: dict[str, Any]) -> bool:
    return "tokens" in data or "auth_mode" in data or "OPENAI_API_KEY" in data


def _str(obj: dict[str, Any], key: str, where: str, *, required: bool) -> str | None:
    v = obj.get(key)
    if v is None or v == "":
        if required:
            raise InvalidLogin(f"missing {where}")
        return None
    if not isinstance(v, str):
        raise InvalidLogin(f"{where} is not a string")
    return v


def _parse_claude(data: dict[str, Any]) -> Login:
    oauth = data.get("claudeAiOauth")
    if oauth is None:
        if _looks_codex(data):
            raise InvalidLogin("this is a Codex auth.json, not a Claude Code login")
        raise InvalidLogin("missing claudeAiOauth")
    if not isinstance(oauth, dict):
        raise InvalidLogin("claudeAiOauth is not an object")
    access = _str(oauth, "accessToken", "claudeAiOauth.accessToken", required=True)
    refresh = _str(oauth, "refreshToken", "claudeAiOauth.refreshToken", required=False)
    expires_at = None
    exp = oauth.get("expiresAt")
    if exp is not None:
        if isinstance(exp, bool) or not isinstance(exp, (int, float)):
            raise InvalidLogin("claudeAiOauth.expiresAt is not a number (epoch ms)")
        try:
            expires_at = datetime.fromtimestamp(int(exp) // 1000, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise InvalidLogin("claudeAiOauth.expiresAt is out of range") from None
    scopes = oauth.get("scopes") or []
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise InvalidLogin("claudeAiOauth.scopes is not a list of strings")
    sub = oauth.get("subscriptionType")
    return Login(
        provider="anthropic",
        access_token=access or "",
        expires_at=expires_at,
        refresh_token=refresh,
        subscription_type=sub if isinstance(sub, str) else None,
        scopes=tuple(scopes),
    )


def _jwt_claims(token: str | None) -> dict[str, Any]:
    """Claims of a JWT without verifying it (only to read exp / account id); {} when it does not decode."""
    if not token or token.count(".") != 2:
        return {}
    part = token.split(".")[1]
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        claims = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _parse_codex(data: dict[str, Any]) -> Login:
    if "claudeAiOauth" in data:
        raise InvalidLogin("this is a Claude Code .credentials.json, not a Codex auth.json")
    auth_mode = data.get("auth_mode")
    if auth_mode is not None and not isinstance(auth_mode, str):
        raise InvalidLogin("auth_mode is not a string")
    tokens = data.get("tokens")
    if tokens is None:
        if data.get("OPENAI_API_KEY"):
            raise InvalidLogin("this Codex auth.json holds an API key, not a ChatGPT login")
        raise InvalidLogin("missing tokens")
    if not isinstance(tokens, dict):
        raise InvalidLogin("tokens is not an object")
    access = _str(tokens, "access_token", "tokens.access_token", required=True)
    refresh = _str(tokens, "refresh_token", "tokens.refresh_token", required=False)
    id_token = _str(tokens, "id_token", "tokens.id_token", required=False)
    account_id = _str(tokens, "account_id", "tokens.account_id", required=False)

    id_auth = _jwt_claims(id_token).get("https://api.openai.com/auth")
    id_auth = id_auth if isinstance(id_auth, dict) else {}
    access_claims = _jwt_claims(access)
    if account_id is None:
        acc_auth = access_claims.get("https://api.openai.com/auth")
        for src in (id_auth, acc_auth if isinstance(acc_auth, dict) else {}):
            cand = src.get("chatgpt_account_id")
            if isinstance(cand, str) and cand:
                account_id = cand
                break
    if account_id is None:
        raise InvalidLogin("missing tokens.account_id")

    expires_at = None
    exp = access_claims.get("exp")
    if isinstance(exp, (int, float)) and not isinstance(exp, bool):
        try:
            expires_at = datetime.fromtimestamp(int(exp), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            expires_at = None
    plan = id_auth.get("chatgpt_plan_type")
    return Login(
        provider="openai",
        access_token=access or "",
        account_id=account_id,
        expires_at=expires_at,
        refresh_token=refresh,
        subscription_type=plan if isinstance(plan, str) else None,
        auth_mode=auth_mode,
    )
