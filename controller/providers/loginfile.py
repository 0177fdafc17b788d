"""What the login keeper changes in, and reads from, a provider's login file, per provider. Pure, no I/O.

The login keeper (:mod:`controller.service.logins`) knows no login format: it asks the provider's
:class:`LoginFile` (:func:`login_file`) to graft a box's newer tokens onto the Subscription's file, to mark a
file with the Subscription it belongs to, and whether a file found in a box claims the Subscription's account.

Formats (the same as :mod:`controller.providers.credentials` parses):

- ``anthropic``, Claude Code 2.1.x ``~/.claude/.credentials.json``: the tokens live in ``claudeAiOauth``
  (``accessToken``, ``refreshToken``, ``expiresAt`` epoch ms). The controller adds a top-level key
  ``agentbox``: ``{"subscription": "<namespace>/<name>"}`` (Claude Code keeps unknown keys when it rewrites
  the file after its own refresh), so a login read back from a box says which Subscription it came from.
- ``openai``, Codex CLI 0.169 ``auth.json``: the tokens live in ``tokens`` (``access_token``,
  ``refresh_token``, ``id_token``, ``account_id``) with ``last_refresh`` beside them. No marker: Codex
  rewrites the file; ``tokens.account_id`` names the ChatGPT account.

Nothing a box wrote is trusted by these functions' callers beyond a first filter: a marker or an account id
can be copied, so adoption is proven by the provider (:mod:`controller.providers.identity`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from controller.providers.credentials import InvalidLogin, Login, parse_login

__all__ = ["MARKER_KEY", "ClaudeLoginFile", "CodexLoginFile", "LoginFile", "UnknownProvider", "login_file"]

MARKER_KEY = "agentbox"
"""Top-level key of a Claude Code login file written by the controller: ``{"subscription": "<ns>/<name>"}``."""

LAST_REFRESH_MAX = 64
"""Longest ``last_refresh`` (characters) taken from a box's Codex file."""


class UnknownProvider(KeyError):
    """No login format is known for this provider (the message names the known ones)."""


class LoginFile(Protocol):
    """One provider's login file format, as the login keeper uses it.

    Every method takes and returns the file's whole text (JSON). The texts given are files that parsed as
    logins of this provider (:func:`controller.providers.credentials.parse_login`): a text that is not a JSON
    object raises ``ValueError`` (``json.JSONDecodeError``) or ``AttributeError``; token text never reaches a
    message of this module.
    """

    @property
    def provider(self) -> str:
        """The provider whose agent writes this format ("anthropic" | "openai")."""
        ...

    def graft(self, text: str, live: str) -> str:
        """``text`` (the Subscription's file) with the tokens and expiry of ``live`` (a box's file); every
        other field of ``text`` kept, nothing else taken from ``live``."""
        ...

    def mark(self, text: str, marker: str) -> str:
        """``text`` marked as the login of the Subscription ``marker`` ("<namespace>/<name>"); ``text``
        itself when it already is, or when the format has no marker."""
        ...

    def same_account(self, text: str, login: Login, marker: str) -> bool:
        """The file ``text`` (found in a box) claims to be a login of the same account as ``login`` (the
        Subscription's, marked ``marker``). A claim only: never proof of ownership. False for a text that
        does not parse."""
        ...


def _obj(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ClaudeLoginFile:
    """Claude Code's ``.credentials.json`` (provider ``anthropic``)."""

    provider: str = "anthropic"
    tokens_key: str = "claudeAiOauth"
    token_fields: tuple[str, ...] = ("accessToken", "refreshToken", "expiresAt")

    def graft(self, text: str, live: str) -> str:
        base, other = json.loads(text), json.loads(live)
        mine = _obj(base.get(self.tokens_key))
        theirs = _obj(other.get(self.tokens_key))
        for key in self.token_fields:
            if key in theirs:
                mine[key] = theirs[key]
        base[self.tokens_key] = mine
        return json.dumps(base)

    def mark(self, text: str, marker: str) -> str:
        data = json.loads(text)
        if data.get(MARKER_KEY) == {"subscription": marker}:
            return text
        data[MARKER_KEY] = {"subscription": marker}
        return json.dumps(data)

    def same_account(self, text: str, login: Login, marker: str) -> bool:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return False
        return isinstance(data, dict) and bool(data.get(MARKER_KEY) == {"subscription": marker})


@dataclass(frozen=True)
class CodexLoginFile:
    """Codex's ``auth.json`` in ChatGPT mode (provider ``openai``)."""

    provider: str = "openai"
    tokens_key: str = "tokens"
    token_fields: tuple[str, ...] = ("access_token", "refresh_token", "id_token")

    def graft(self, text: str, live: str) -> str:
        base, other = json.loads(text), json.loads(live)
        mine = _obj(base.get(self.tokens_key))
        theirs = _obj(other.get(self.tokens_key))
        for key in self.token_fields:
            if isinstance(theirs.get(key), str):
                mine[key] = theirs[key]
        base[self.tokens_key] = mine
        if isinstance(other.get("last_refresh"), str):
            base["last_refresh"] = other["last_refresh"][:LAST_REFRESH_MAX]
        return json.dumps(base)

    def mark(self, text: str, marker: str) -> str:
        return text

    def same_account(self, text: str, login: Login, marker: str) -> bool:
        try:
            held = parse_login(self.provider, text)
        except InvalidLogin:
            return False
        return held.account_id == login.account_id


_FORMATS: dict[str, LoginFile] = {f.provider: f for f in (ClaudeLoginFile(), CodexLoginFile())}


def login_file(provider: str) -> LoginFile:
    """The login file format of ``provider`` ("anthropic" | "openai").

    Raises:
        UnknownProvider: no format for that provider.
    """
    try:
        return _FORMATS[provider]
    except KeyError:
        raise UnknownProvider(f"no login file format for provider {provider!r}; known: "
                              f"{', '.join(sorted(_FORMATS))}") from None
