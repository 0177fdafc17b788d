"""Spending a refresh token, once: when the Subscription's login is due, the write-ahead mark, the request to
the provider's token endpoint, and what its answer (or its absence) means for the next tries.

Touches: the Subscription's status field ``refreshInFlight`` (through its one status writer), the provider's
token endpoint (`controller.providers.oauth`), Events and the login metrics; a renewed login goes on through
:class:`controller.service.loginpush.LoginPusher` (stored first, then pushed). Tokens are only ever named by
fingerprint (``sha256:<8 hex>``), never in a log line, an Event or an exception.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from controller import metrics
from controller.providers.credentials import Login, parse_login, token_fingerprint
from controller.providers.loginfile import login_file
from controller.service.loginidentity import AccountIdentity
from controller.service.loginpush import LoginPusher
from controller.service.loginscope import LoginScope

log = logging.getLogger("agentbox.logins")

IN_FLIGHT_KEY = "refreshInFlight"  # status: "sha256:<8 hex>" of the refresh token being spent (write-ahead)


class LoginRefresher:
    """Refreshes the Subscription's login at the provider, never sending one refresh token twice.

    Args:
        scope: the Subscription.
        pusher: stores and propagates a renewed login.
        identity: told that a renewed login is of the recorded account (same refresh chain).
    Attributes:
        failures: refreshes failed in a row (provider unavailable); ``retry_at``: no refresh before it (UTC).
        refused_fp, refused_msg: the refresh token the provider refused (none is retried until the Secret
            holds another) and the message the Subscription shows for it.
        lost_fp: the refresh token whose answer was lost (never sent again).
        lifetime_s: the access tokens' lifetime (seconds) observed at the last refresh; None before one.
        refreshes: refreshes that succeeded.
        secret_fp: the refresh token of the Subscription's login at the keeper's current tick (set by it): a
            candidate's lost answer puts that one in the answer-lost state.
    """

    def __init__(self, scope: LoginScope, pusher: LoginPusher, identity: AccountIdentity) -> None:
        self.scope = scope
        self.pusher = pusher
        self.identity = identity
        self.failures = 0
        self.retry_at: datetime | None = None
        self.refused_fp: str | None = None
        self.refused_msg: str | None = None
        self.lost_fp: str | None = None
        self.lifetime_s: float | None = None
        self.refreshes = 0
        self.secret_fp: str | None = None

    # ------------------------------------------------------------------ when
    def due_at(self, login: Login) -> datetime:
        """When ``login`` (with an expiry) is due: ``login_refresh_before_s`` before it expires, or at half
        the observed lifetime for a provider whose tokens live shorter than that lead."""
        assert login.expires_at is not None
        margin = self.scope.rt.settings.login_refresh_before_s
        if self.lifetime_s and self.lifetime_s <= margin:
            # A provider issuing tokens shorter than the lead: refresh at half their life instead of
            # at once after every refresh (a loop).
            margin = self.lifetime_s / 2
        return login.expires_at - timedelta(seconds=margin)

    def backoff(self, login: Login, now: datetime) -> float:
        """Count a failure and set ``retry_at``; returns the backoff in seconds: doubling from
        ``login_retry_s`` up to 10 minutes, never past a quarter of the access token's remaining life (the
        agents refresh at 5 minutes)."""
        st = self.scope.rt.settings
        self.failures += 1
        backoff = min(st.login_retry_s * 2 ** min(self.failures - 1, 30), max(st.login_retry_s, 600.0))
        if login.expires_at is not None:
            backoff = min(backoff, max(1.0, (login.expires_at - now).total_seconds() / 4))
        self.retry_at = now + timedelta(seconds=backoff)
        return backoff

    def forget_refused(self) -> None:
        """The Secret holds another login than the refused one: refreshes are tried again, backoff reset."""
        self.refused_fp = None
        self.failures, self.retry_at = 0, None

    def forget_lost(self) -> None:
        """The Secret holds another login than the one whose answer was lost: the gauge back to 0."""
        self.lost_fp = None   # the Secret holds another login now (a human logged in again, or adopted)
        metrics.LOGIN_ANSWER_LOST.labels(self.scope.namespace, self.scope.name).set(0)

    def answer_lost(self, fp: str, ref: Any, why: str) -> None:
        """Enter the answer-lost state for refresh token ``fp``: one Warning Event, the metric set."""
        sc = self.scope
        if self.lost_fp == fp:
            return
        self.lost_fp = fp
        metrics.LOGIN_ANSWER_LOST.labels(sc.namespace, sc.name).set(1)
        sc.post_event("Warning", "RefreshAnswerLost",
                      f"The answer to a login refresh was lost ({why}); the provider may have spent the refresh "
                      "token, so it is not sent again. The current access token stays in use until it expires: "
                      f"log in again and update the login Secret {ref.name!r} before then")
        log.warning("Subscription %s: refresh answer lost (%s); refresh token sha256:%s is not sent again",
                    sc.marker, why, fp)

    # ------------------------------------------------------------------ spend
    async def refresh(self, provider: str, login: Login, text: str, ref: Any,
                      now: datetime, candidate: str | None = None) -> tuple[Login, str] | str:
        """Spend the refresh token once. (login, text) on success; "refused" (Disconnected), "lost" (the
        answer did not arrive: never resent) or "error" (not spent: retried after the backoff or the
        provider's Retry-After, whichever is longer).

        Write-ahead: ``status.refreshInFlight`` holds the token's fingerprint while the request is out, so
        a controller that dies before storing the answer never sends the token again after a restart.

        ``candidate`` (a box name): ``login`` is a login found in that box, being confirmed before it is
        adopted. A refusal then only refuses the candidate (returns "refused"; the caller reports it, the
        Subscription's own login is not marked refused); a lost answer puts the Subscription's current
        login in the answer-lost state (the agent that refreshed has spent it).

        Raises the API error of a failed write-ahead mark (nothing was sent), or of a failed box list
        while propagating a renewed login (already stored).
        """
        import aiohttp

        from controller.providers.oauth import (RefreshError, RefreshLost, RefreshRefused, RefreshUnavailable,
                                                refresh_login)

        sc = self.scope
        st = sc.rt.settings
        url = st.anthropic_token_url if provider == "anthropic" else st.openai_token_url
        fp = token_fingerprint(login.refresh_token)
        writer = sc.writer()
        writer.forget()  # the write-ahead mark is always sent, whatever was written before
        await writer.write({IN_FLIGHT_KEY: f"sha256:{fp}"})   # fails: nothing sent, the tick retries
        notes: list[str] = []
        try:
            if sc.session is not None:
                new_text = await refresh_login(sc.session, provider, text, login, token_url=url, now=now,
                                               notes=notes)
            else:  # refreshes are rare: a session per refresh, nothing left open when the daemon stops
                async with aiohttp.ClientSession() as session:
                    new_text = await refresh_login(session, provider, text, login, token_url=url, now=now,
                                                   notes=notes)
        except RefreshRefused as exc:
            if candidate is not None:
                log.warning("Subscription %s: the refresh token of the login in box %s was refused: %s", sc.marker,
                            candidate, exc)
                await self._clear_in_flight()
                return "refused"
            self.refused_fp = fp
            self.refused_msg = f"The provider refused to renew the login ({exc}); update the login Secret {ref.name!r}"
            sc.post_event("Warning", "LoginRefreshRefused", self.refused_msg)
            log.warning("Subscription %s: %s", sc.marker, exc)
            return "refused"
        except RefreshLost as exc:
            self.answer_lost(self.secret_fp if candidate is not None and self.secret_fp else fp, ref, str(exc))
            return "lost"
        except (RefreshUnavailable, RefreshError) as exc:
            backoff = self.backoff(login, now)
            wait = getattr(exc, "retry_after_s", None)
            if wait is not None and wait > backoff:
                # The provider said when: honoured in full (the current login stays in use meanwhile).
                backoff = wait
                self.retry_at = now + timedelta(seconds=wait)
            log.warning("Subscription %s: %s; retry in %.0f s", sc.marker, exc, backoff)
            if self.failures == 1:
                sc.post_event("Warning", "LoginRefreshFailed", f"{exc}; retrying, the current login stays in use")
            await self._clear_in_flight()
            return "error"
        self.failures, self.retry_at = 0, None
        new = parse_login(provider, new_text)
        if new.expires_at is not None:
            self.lifetime_s = max(1.0, (new.expires_at - now).total_seconds())
        self.refreshes += 1
        self.identity.note_renewed(new.fingerprint)   # same chain, same account
        new_text = login_file(provider).mark(new_text, sc.marker)
        await self.pusher.store(ref, new_text)
        await self._clear_in_flight()
        for note in notes:
            sc.post_event("Warning", "TokenAnswerInvalid", note)
        await self.pusher.propagate(provider, new_text)
        log.info("Subscription %s: login refreshed (token sha256:%s), pushed to %d box(es)", sc.marker,
                 new.fingerprint, len(self.pusher.last_boxes))
        return new, new_text

    async def _clear_in_flight(self) -> None:
        """Remove the write-ahead mark (best effort: a mark left behind names a token no longer in the
        Secret after a success, and only makes a restarted controller cautious after a failure)."""
        try:
            await self.scope.writer().write({IN_FLIGHT_KEY: None})
        except Exception as exc:  # noqa: BLE001
            log.warning("Subscription %s: clearing refreshInFlight failed (%s)", self.scope.marker,
                        type(exc).__name__)
