"""Whose login it is, as the provider says: the account identity of the Subscription's own login (recorded in
``status.account``) and the check of a login found in a box against it.

Touches: the provider's identity endpoint (`controller.providers.identity`, with the login's own access
token) and the Subscription's status field ``account`` (through its one status writer). Nothing in a box is
trusted here: a box's login is only shown to the provider. Tokens are only ever named by fingerprint.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from controller.providers.credentials import Login
from controller.service.loginscope import LoginScope

log = logging.getLogger("agentbox.logins")


class AccountIdentity:
    """The provider-confirmed account of the Subscription's login, and verdicts on logins found in boxes.

    Args:
        scope: the Subscription.
    Attributes:
        identity_fp: fingerprint of the access token whose account is recorded in ``status.account`` (or
            whose login the provider refused: the usage read reports that); None until the first answer.
        verdicts: a box login's access-token fingerprint -> the account the provider named (None: refused);
            at most 256 entries, the oldest dropped first.
    """

    def __init__(self, scope: LoginScope) -> None:
        self.scope = scope
        self.identity_fp: str | None = None
        self.verdicts: dict[str, str | None] = {}

    def note_renewed(self, fingerprint: str) -> None:
        """A login the keeper renewed itself (same refresh chain, same account): its identity is known."""
        self.identity_fp = fingerprint

    async def ask(self, provider: str, login: Login) -> str:
        """The provider-confirmed account identity of ``login`` (`controller.providers.identity`).

        Raises:
            IdentityUnavailable: the provider could not be asked (decide later).
            IdentityRefused: the provider does not accept the login's access token.
        """
        import aiohttp

        from controller.providers.identity import account_identity

        st = self.scope.rt.settings
        base = st.anthropic_base_url if provider == "anthropic" else st.openai_base_url
        if self.scope.session is not None:
            return await account_identity(self.scope.session, provider, login, base_url=base)
        async with aiohttp.ClientSession() as session:
            return await account_identity(session, provider, login, base_url=base)

    async def record(self, provider: str, login: Login, status: dict[str, Any], now: datetime) -> dict[str, Any]:
        """Record in ``status.account`` whose login the Subscription's Secret holds, as the provider says
        (once per access token, while it is valid). The Secret is written by the Subscription owner or by
        the keeper (only with logins of the same account), so its login defines the account; a login
        found in a box is adopted only when the provider names the same account (:meth:`verify`).

        Returns ``status`` with ``account`` set (unchanged when the provider could not be asked or refused).
        Raises the API error of a failed status write."""
        from controller.providers.identity import IdentityRefused, IdentityUnavailable

        fp = login.fingerprint
        if fp == self.identity_fp or (login.expires_at is not None and login.expires_at <= now):
            return status
        try:
            ident = await self.ask(provider, login)
        except IdentityUnavailable as exc:
            log.info("Subscription %s: %s; asking again at the next read", self.scope.marker, exc)
            return status
        except IdentityRefused:
            self.identity_fp = fp  # the usage read reports the refused login
            return status
        if status.get("account") != ident:
            await self.scope.writer().write({"account": ident})
            log.info("Subscription %s: account identity %s recorded", self.scope.marker, ident)
        self.identity_fp = fp
        return {**status, "account": ident}

    async def verify(self, provider: str, held: Login, recorded: str | None, now: datetime) -> str | None:
        """Why the login ``held`` (found in a box) must not be adopted; "" when the provider confirmed it
        belongs to the recorded account; None when the provider could not be asked (decide later)."""
        from controller.providers.identity import IdentityRefused, IdentityUnavailable

        if not recorded:
            return ("the Subscription's account identity is not recorded yet (it is recorded while the "
                    "Secret's own login is valid), so no login from a box can be proven")
        if held.expires_at is not None and held.expires_at <= now:
            return "its access token has expired, so the provider cannot confirm its account"
        fp = held.fingerprint
        if fp not in self.verdicts:
            try:
                self.verdicts[fp] = await self.ask(provider, held)
            except IdentityUnavailable as exc:
                log.info("Subscription %s: %s", self.scope.marker, exc)
                return None
            except IdentityRefused:
                self.verdicts[fp] = None
            if len(self.verdicts) > 256:  # bounded: a box cannot grow it without limit
                self.verdicts.pop(next(iter(self.verdicts)))
        ident = self.verdicts[fp]
        if ident is None:
            return "the provider does not accept its access token"
        if ident != recorded:
            return "the provider says it belongs to another account"
        return ""
