"""The login keeper: one authoritative login per subscription, however many boxes use it.

The controller is the only refresher (docs/logins.md). Per subscription (it runs inside that
subscription's usage reader, so there is one keeper and at most one refresh at a time):

1. **Refresh early.** When the access token has less than ``login_refresh_before_s`` left (the
   agents act at about 5 minutes), spend the refresh token once at the provider's token endpoint
   (`controller.providers.oauth`).
2. **Store first.** Write the new login file into the Subscription's Secret (same format, every
   other field and every other key kept) before anything else, so the newest login is never only in
   memory or only in a pod.
3. **Propagate.** Push it to every box on the subscription (``status.switch.to`` while a switch moves
   the box, else ``status.subscription``, else ``spec.subscription``) whose agent uses that provider:
   the box credentials Secret, and the live login file in the pod **only where one exists** (a box
   stopped by the reserve has none and stays stopped). Claude Code re-reads its file before every request; a running Codex reloads it when its
   in-memory token gets within 5 minutes of expiry and adopts a newer token of the same account
   without refreshing (measured; docs/logins.md). Failed pushes are retried on the next tick.
4. **Read back (fallback), proven by the provider.** Before spending a refresh token (so also on the
   first tick after the controller was away past the refresh point), and while a refresh stays refused
   or its answer was lost, read the boxes' live files. A newer login there is only a candidate:
   nothing in a box is trusted (the ``agentbox.subscription`` marker and a Codex ``account_id`` can be
   copied). The provider is asked, with the candidate's own access token, whose login it is
   (`controller.providers.identity`); only when it names the identity recorded in
   ``status.account`` (from the Secret's own login) are its tokens grafted onto the Secret's file,
   stored and propagated (Event ``LoginAdopted`` naming the box). Otherwise one Warning
   ``LoginCandidateRefused`` names the box, and that box gets no pushes while it holds that login.
5. **Failures.** A refused refresh (400/401/403) with no confirmed newer login in any box: the
   Subscription becomes ``Disconnected`` with condition ``LoginRefreshed=False/RefreshRefused`` and an
   Event, rewritten every pass until the API server has it; the windows are kept; nothing is retried
   until the Secret changes. A 5xx/429/unreachable provider: retried with backoff (or the provider's
   ``Retry-After``), the old login kept (it is still valid: the refresh started long before expiry).
6. **Never twice.** ``status.refreshInFlight`` (the token's fingerprint) is written before a refresh
   request goes out. An answer lost after the request may have reached the provider, or a restart
   that finds the mark on the Secret's token: that token is never sent again; the current access token
   stays in use until it expires; ``LoginRefreshed=False/RefreshAnswerLost``, one Warning Event and the
   gauge ``agentbox_login_refresh_answer_lost`` ask a human to log in again.

Only objects a box controls are touched: pushes go to its own credentials Secret and pod
(`controller.kube.exec.owned_exec`; a squatter raises ``NotOwned``).

This module holds the tick (what is due, the ``LoginRefreshed`` condition, the Disconnected and answer-lost
states); each step is one part's job: :mod:`~controller.service.loginrefresh` (when a refresh is due, spending
the token once, backoff), :mod:`~controller.service.loginpush` (the Secret, then the boxes),
:mod:`~controller.service.loginidentity` (whose login it is, as the provider says) and
:mod:`~controller.service.loginadopt` (the read-back of the boxes). The tick itself touches only the
Subscription's status (through its one status writer) and the login metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from controller import constants as C
from controller import metrics
from controller.conditions import set_condition
from controller.providers.credentials import Login, token_fingerprint
from controller.service.loginadopt import UNDECIDED, LoginAdopter
from controller.service.loginidentity import AccountIdentity
from controller.service.loginload import LoadedLogin
from controller.service.loginpush import LoginPusher
from controller.service.loginrefresh import IN_FLIGHT_KEY, LoginRefresher
from controller.service.loginscope import LoginScope
from controller.service.status import StatusWriter

__all__ = ["COND_LOGIN_REFRESHED", "IN_FLIGHT_KEY", "KeepResult", "LoginKeeper"]

log = logging.getLogger("agentbox.logins")

COND_LOGIN_REFRESHED = "LoginRefreshed"


@dataclass
class KeepResult:
    """What the reader does after the keeper's tick.

    Attributes:
        login: the login to read usage with; None when the keeper set the state itself (Disconnected).
        status: the Subscription status with the keeper's condition set (the reader builds on it).
        delay: seconds until the keeper needs the next tick.
        conditions: the conditions the keeper set this tick (``LoginRefreshed``), for the reader's one
            write through the Subscription's status writer; types it did not set are left as stored.
    """

    login: Login | None
    status: dict[str, Any]
    delay: float
    conditions: tuple[dict[str, Any], ...] = ()


@dataclass
class LoginKeeper:
    """Keeps one subscription's login fresh and the same in the Secret and every box on it.

    Args:
        rt: runtime (settings, kube client, exec, clock).
        namespace, name: the subscription.
        post_event: posts an Event on the Subscription.
        session: aiohttp session for the token endpoint (None: one per refresh).
    Attributes:
        pusher, identity, refresher, adopter: the parts (see the module docstring), built from these.
    """

    rt: Any
    namespace: str
    name: str
    post_event: Callable[[str, str, str], None]
    session: Any = None
    scope: LoginScope = field(init=False)
    pusher: LoginPusher = field(init=False)
    identity: AccountIdentity = field(init=False)
    refresher: LoginRefresher = field(init=False)
    adopter: LoginAdopter = field(init=False)
    _marker_checked: bool = False
    _set_now: dict[str, dict[str, Any]] = field(default_factory=dict)  # conditions set by this tick, by type

    def __post_init__(self) -> None:
        self.scope = LoginScope(self.rt, self.namespace, self.name, self.post_event, self.session)
        refused_boxes: dict[str, str] = {}   # box -> refused candidate's access fp (kept by the adopter)
        self.pusher = LoginPusher(self.scope, refused_boxes)
        self.identity = AccountIdentity(self.scope)
        self.refresher = LoginRefresher(self.scope, self.pusher, self.identity)
        self.adopter = LoginAdopter(self.scope, self.pusher, self.identity, self.refresher, refused_boxes)

    @property
    def marker(self) -> str:
        """``"<namespace>/<name>"``: the Subscription in logs and in the login file's marker."""
        return self.scope.marker

    # ------------------------------------------------------------------ the tick
    async def tick(self, spec: Any, loaded: LoadedLogin, status: dict[str, Any]) -> KeepResult:
        """Refresh / adopt / propagate as due. Never raises: trouble (API server, pods) is logged and
        retried after ``login_retry_s`` with the current login kept for the usage read (none while the
        provider refuses this login: the subscription stays Disconnected).

        Args:
            spec: the Subscription's validated spec.
            loaded: its login as the one loader read it this pass (:func:`controller.service.loginload.load_login`;
                usable: ``text`` and ``login`` set). The keeper reads the Secret no second time.
            status: the Subscription's stored status.
        """
        if loaded.login is None or loaded.text is None:
            return KeepResult(loaded.login, status, self.rt.settings.usage_interval_s)
        login = loaded.login
        self._set_now = {}
        try:
            kept = await self._tick(spec, login, loaded.text, status)
            kept.conditions = tuple(self._set_now.values())
            return kept
        except Exception as exc:  # noqa: BLE001
            log.warning("Subscription %s: login keeping failed (%s); retrying", self.marker, type(exc).__name__)
            refused_fp = self.refresher.refused_fp
            refused = refused_fp is not None and token_fingerprint(login.refresh_token) == refused_fp
            return KeepResult(None if refused else login, status, self.rt.settings.login_retry_s)

    async def _tick(self, spec: Any, login: Login, text: str, status: dict[str, Any]) -> KeepResult:
        st = self.rt.settings
        now = self.rt.clock()
        far = st.usage_interval_s
        if not login.refresh_token or login.expires_at is None:
            return KeepResult(login, status, far)
        refresher, adopter, pusher = self.refresher, self.adopter, self.pusher
        provider = spec.provider
        ref = spec.credentials_secret_ref
        gen = status.get("observedGeneration")
        fp = token_fingerprint(login.refresh_token)
        refresher.secret_fp = fp
        if not self._marker_checked:
            # A refresh marked in flight by an earlier run whose answer never reached the Secret: the
            # provider may have spent the token; it is never sent again (a second use revokes the chain).
            self._marker_checked = True
            marked = status.get(IN_FLIGHT_KEY)
            if marked == f"sha256:{fp}":
                refresher.answer_lost(fp, ref, "the controller stopped while a login refresh was in flight")
            elif isinstance(marked, str) and marked.startswith("sha256:"):
                # Another token was in flight: a box's candidate being confirmed (or a mark left after a
                # success). Spent either way: never sent again.
                adopter.note_spent(marked[len("sha256:"):])
        status = await self.identity.record(provider, login, status, now)
        if refresher.refused_fp is not None:
            if fp == refresher.refused_fp:
                # Refused earlier and the Secret did not change: stay Disconnected (rewritten every
                # pass until the API server has it); still look for a box that holds a newer login of
                # this account (an agent that refreshed by itself).
                adopted = await adopter.adopt(provider, login, text, ref, now, status)
                if not isinstance(adopted, tuple):
                    status = await self._disconnected(status, ref, now, gen)
                    return KeepResult(None, status, far)
                login, text = adopted
            refresher.forget_refused()
        if refresher.lost_fp is not None:
            if fp == refresher.lost_fp:
                adopted = await adopter.adopt(provider, login, text, ref, now, status)
                if not isinstance(adopted, tuple):
                    return KeepResult(login, self._lost_status(login, status, ref, now, gen), far)
                login, text = adopted
            refresher.forget_lost()
        due = refresher.due_at(login)
        if now >= due and (refresher.retry_at is None or now >= refresher.retry_at):
            adopted = await adopter.adopt(provider, login, text, ref, now, status)
            if isinstance(adopted, tuple):
                login, text = adopted
            elif adopted == UNDECIDED:
                # A newer login sits in a box but the provider could not be asked whose it is: neither
                # adopt it nor spend our refresh token (it may be spent already); ask again soon.
                refresher.backoff(login, now)
                status = self._set(status, COND_LOGIN_REFRESHED, False, "IdentityCheckFailed",
                                   "A box holds a newer login; the provider could not confirm its account yet; "
                                   "retrying, the current login stays in use", now, gen)
                return KeepResult(login, status, self._retry_in(now, far))
            else:
                outcome = await refresher.refresh(provider, login, text, ref, now)
                metrics.LOGIN_REFRESHES.labels(self.namespace, self.name, outcome if isinstance(outcome, str)
                                               else "ok").inc()
                if outcome == "refused":              # Disconnected
                    status = await self._disconnected(status, ref, now, gen)
                    return KeepResult(None, status, far)
                if outcome == "lost":                 # keep the current access token until it expires
                    return KeepResult(login, self._lost_status(login, status, ref, now, gen), far)
                if outcome == "error":                # unavailable: keep the old login, retry later
                    status = self._set(status, COND_LOGIN_REFRESHED, False, "RefreshFailed",
                                       f"Login refresh failed {refresher.failures} time(s); retrying, the current "
                                       "login stays in use", now, gen)
                    return KeepResult(login, status, self._retry_in(now, far))
                assert isinstance(outcome, tuple)
                login, text = outcome
        elif pusher.unsynced:
            await pusher.propagate(provider, text, only=set(pusher.unsynced))
        elif self._renewed():  # before: the boxes hold what they were given
            await pusher.sync_stale(provider, login, text)
        if self._renewed():
            status = self._set(status, COND_LOGIN_REFRESHED, True, "Refreshed",
                               f"Login renewed by the controller; expires {login.expires_at:%Y-%m-%d %H:%M:%S} UTC",
                               now, gen)
        delay = (refresher.due_at(login) - self.rt.clock()).total_seconds()
        if pusher.unsynced:
            delay = min(delay, st.login_retry_s)
        if login.expires_at is not None:
            metrics.LOGIN_EXPIRY.labels(self.namespace, self.name).set(login.expires_at.timestamp())
        return KeepResult(login, status, max(0.5, min(delay, far)))

    def _renewed(self) -> bool:
        """This keeper renewed a login itself (a refresh, or a login adopted from a box)."""
        return bool(self.refresher.refreshes or self.adopter.adopted)

    def _retry_in(self, now: datetime, far: float) -> float:
        """Seconds until the refresher's ``retry_at`` (at least 1), ``far`` without one."""
        retry_at = self.refresher.retry_at
        return max(1.0, (retry_at - now).total_seconds()) if retry_at else far

    def _set(self, status: dict[str, Any], type_: str, ok: bool, reason: str, message: str, now: datetime,
             gen: Any) -> dict[str, Any]:
        """``status`` with the condition set, and the condition recorded as set by the keeper this tick."""
        conds = set_condition(status.get("conditions") or [], type_, ok, reason, message, now, gen)
        self._set_now[type_] = next(c for c in conds if c.get("type") == type_)
        return {**status, "conditions": conds}

    async def _disconnected(self, status: dict[str, Any], ref: Any, now: datetime, gen: Any) -> dict[str, Any]:
        """The refused state, written whenever the stored status differs (level-triggered: a failed
        patch is repeated at the next pass, so the Subscription never shows Available with a dead login).

        Raises:
            the API error of a failed patch (the tick retries after ``login_retry_s``).
        """
        msg = (self.refresher.refused_msg
               or f"The provider refused to renew the login; update the login Secret {ref.name!r}")
        current = status.get("conditions") or []
        conds = set_condition(current, COND_LOGIN_REFRESHED, False, "RefreshRefused", msg, now, gen)
        conds = set_condition(conds, C.COND_CREDENTIALS_VALID, False, "RefreshRefused",
                              f"The provider refused to renew the login; update the login Secret {ref.name!r}",
                              now, gen)
        want = {"state": "Disconnected", "conditions": conds, "message": "Login refresh refused by the provider"}
        if (status.get("state") != "Disconnected" or conds != current or status.get(IN_FLIGHT_KEY)
                or status.get("message") != want["message"]):
            writer = self._writer()
            writer.forget()  # level-triggered: written whenever the stored status differs, even if sent before
            await writer.write({"state": "Disconnected", "message": want["message"], IN_FLIGHT_KEY: None},
                               [c for c in conds if c.get("type") in (COND_LOGIN_REFRESHED, C.COND_CREDENTIALS_VALID)])
            metrics.set_subscription_state(self.namespace, self.name, "Disconnected")
        return {**status, **want, IN_FLIGHT_KEY: None}

    def _lost_status(self, login: Login, status: dict[str, Any], ref: Any, now: datetime, gen: Any) -> dict[str, Any]:
        until = f"{login.expires_at:%Y-%m-%d %H:%M:%S} UTC" if login.expires_at else "it expires"
        return self._set(status, COND_LOGIN_REFRESHED, False, "RefreshAnswerLost",
                         "The answer to a login refresh was lost; its refresh token is not sent again (a "
                         f"second use revokes every copy). The current access token works until {until}: "
                         f"log in again and update the login Secret {ref.name!r}", now, gen)

    def due_in(self, login: Login | None) -> float:
        """Seconds until ``login`` is due for a refresh (inf without a refresh token or expiry)."""
        if login is None or not login.refresh_token or login.expires_at is None:
            return float("inf")
        return (self.refresher.due_at(login) - self.rt.clock()).total_seconds()

    def _writer(self) -> StatusWriter:
        """The Subscription's one status writer (shared with its usage reader and validation)."""
        return self.scope.writer()
