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
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from controller import constants as C
from controller import metrics
from controller.agents.adapter import LOGIN_FILE_MISSING_RC
from controller.agents.registry import login_adapter
from controller.conditions import set_condition
from controller.domain.rotation import subscription_of_box
from controller.providers.credentials import Login, parse_login, token_fingerprint
from controller.providers.loginfile import login_file
from controller.service.loginload import LoadedLogin, load_box_login, parse_held_login
from controller.service.status import StatusWriter, subscription_writer

log = logging.getLogger("agentbox.logins")

COND_LOGIN_REFRESHED = "LoginRefreshed"

IN_FLIGHT_KEY = "refreshInFlight"  # status: "sha256:<8 hex>" of the refresh token being spent (write-ahead)
_UNDECIDED = "undecided"   # a login in a box could not be checked with the provider (yet)


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
class _Box:
    name: str
    body: dict[str, Any]
    pod: str
    container: str | None = None


@dataclass
class LoginKeeper:
    """Keeps one subscription's login fresh and the same in the Secret and every box on it.

    Args:
        rt: runtime (settings, kube client, exec, clock).
        namespace, name: the subscription.
        post_event: posts an Event on the Subscription.
        session: aiohttp session for the token endpoint (None: one per refresh).
    """

    rt: Any
    namespace: str
    name: str
    post_event: Callable[[str, str, str], None]
    session: Any = None
    failures: int = 0
    retry_at: datetime | None = None
    refused_fp: str | None = None          # refresh token the provider refused (no retry until it changes)
    lifetime_s: float | None = None        # observed access token lifetime (after our first refresh)
    unsynced: set[str] = field(default_factory=set)   # boxes whose push failed
    refused_msg: str | None = None
    lost_fp: str | None = None             # refresh token whose answer was lost (never sent again)
    _marker_checked: bool = False
    refreshes: int = 0
    adopted: int = 0
    identity_fp: str | None = None         # access token whose account identity is recorded in status.account
    verdicts: dict[str, str | None] = field(default_factory=dict)   # candidate access fp -> identity (None: refused)
    refused_boxes: dict[str, str] = field(default_factory=dict)     # box -> refused candidate's access fp
    _last_boxes: list[_Box] = field(default_factory=list)
    sent_candidates: set[str] = field(default_factory=set)   # candidate refresh tokens sent (never sent twice)
    secret_fp: str | None = None           # refresh token of the Subscription's login at this tick
    _set_now: dict[str, dict[str, Any]] = field(default_factory=dict)  # conditions set by this tick, by type

    @property
    def marker(self) -> str:
        return f"{self.namespace}/{self.name}"

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
            refused = self.refused_fp is not None and token_fingerprint(login.refresh_token) == self.refused_fp
            return KeepResult(None if refused else login, status, self.rt.settings.login_retry_s)

    async def _tick(self, spec: Any, login: Login, text: str, status: dict[str, Any]) -> KeepResult:
        st = self.rt.settings
        now = self.rt.clock()
        far = st.usage_interval_s
        if not login.refresh_token or login.expires_at is None:
            return KeepResult(login, status, far)
        provider = spec.provider
        ref = spec.credentials_secret_ref
        gen = status.get("observedGeneration")
        fp = token_fingerprint(login.refresh_token)
        self.secret_fp = fp
        if not self._marker_checked:
            # A refresh marked in flight by an earlier run whose answer never reached the Secret: the
            # provider may have spent the token; it is never sent again (a second use revokes the chain).
            self._marker_checked = True
            marked = status.get(IN_FLIGHT_KEY)
            if marked == f"sha256:{fp}":
                self._answer_lost(fp, ref, "the controller stopped while a login refresh was in flight")
            elif isinstance(marked, str) and marked.startswith("sha256:"):
                # Another token was in flight: a box's candidate being confirmed (or a mark left after a
                # success). Spent either way: never sent again.
                self.sent_candidates.add(marked[len("sha256:"):])
        status = await self._record_identity(provider, login, status, now)
        if self.refused_fp is not None:
            if fp == self.refused_fp:
                # Refused earlier and the Secret did not change: stay Disconnected (rewritten every
                # pass until the API server has it); still look for a box that holds a newer login of
                # this account (an agent that refreshed by itself).
                adopted = await self._adopt_from_boxes(provider, login, text, ref, now, status)
                if not isinstance(adopted, tuple):
                    status = await self._disconnected(status, ref, now, gen)
                    return KeepResult(None, status, far)
                login, text = adopted
            self.refused_fp = None
            self.failures, self.retry_at = 0, None
        if self.lost_fp is not None:
            if fp == self.lost_fp:
                adopted = await self._adopt_from_boxes(provider, login, text, ref, now, status)
                if not isinstance(adopted, tuple):
                    return KeepResult(login, self._lost_status(login, status, ref, now, gen), far)
                login, text = adopted
            self.lost_fp = None   # the Secret holds another login now (a human logged in again, or adopted)
            metrics.LOGIN_ANSWER_LOST.labels(self.namespace, self.name).set(0)
        due = self._due_at(login)
        if now >= due and (self.retry_at is None or now >= self.retry_at):
            adopted = await self._adopt_from_boxes(provider, login, text, ref, now, status)
            if isinstance(adopted, tuple):
                login, text = adopted
            elif adopted == _UNDECIDED:
                # A newer login sits in a box but the provider could not be asked whose it is: neither
                # adopt it nor spend our refresh token (it may be spent already); ask again soon.
                self._backoff(login, now)
                status = self._set(status, COND_LOGIN_REFRESHED, False, "IdentityCheckFailed",
                                   "A box holds a newer login; the provider could not confirm its account yet; "
                                   "retrying, the current login stays in use", now, gen)
                return KeepResult(login, status,
                                  max(1.0, (self.retry_at - now).total_seconds()) if self.retry_at else far)
            else:
                outcome = await self._refresh(provider, login, text, ref, now)
                metrics.LOGIN_REFRESHES.labels(self.namespace, self.name, outcome if isinstance(outcome, str)
                                               else "ok").inc()
                if outcome == "refused":              # Disconnected
                    status = await self._disconnected(status, ref, now, gen)
                    return KeepResult(None, status, far)
                if outcome == "lost":                 # keep the current access token until it expires
                    return KeepResult(login, self._lost_status(login, status, ref, now, gen), far)
                if outcome == "error":                # unavailable: keep the old login, retry later
                    status = self._set(status, COND_LOGIN_REFRESHED, False, "RefreshFailed",
                                       f"Login refresh failed {self.failures} time(s); retrying, the current login "
                                       "stays in use", now, gen)
                    return KeepResult(login, status,
                                      max(1.0, (self.retry_at - now).total_seconds()) if self.retry_at else far)
                assert isinstance(outcome, tuple)
                login, text = outcome
        elif self.unsynced:
            await self.propagate(provider, text, only=set(self.unsynced))
        else:
            await self._sync_stale(provider, login, text)
        if self.refreshes or self.adopted:
            status = self._set(status, COND_LOGIN_REFRESHED, True, "Refreshed",
                               f"Login renewed by the controller; expires {login.expires_at:%Y-%m-%d %H:%M:%S} UTC",
                               now, gen)
        delay = (self._due_at(login) - self.rt.clock()).total_seconds()
        if self.unsynced:
            delay = min(delay, st.login_retry_s)
        if login.expires_at is not None:
            metrics.LOGIN_EXPIRY.labels(self.namespace, self.name).set(login.expires_at.timestamp())
        return KeepResult(login, status, max(0.5, min(delay, far)))

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
        msg = self.refused_msg or f"The provider refused to renew the login; update the login Secret {ref.name!r}"
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

    def _answer_lost(self, fp: str, ref: Any, why: str) -> None:
        """Enter the answer-lost state for refresh token ``fp``: one Warning Event, the metric set."""
        if self.lost_fp == fp:
            return
        self.lost_fp = fp
        metrics.LOGIN_ANSWER_LOST.labels(self.namespace, self.name).set(1)
        self.post_event("Warning", "RefreshAnswerLost",
                        f"The answer to a login refresh was lost ({why}); the provider may have spent the refresh "
                        "token, so it is not sent again. The current access token stays in use until it expires: "
                        f"log in again and update the login Secret {ref.name!r} before then")
        log.warning("Subscription %s: refresh answer lost (%s); refresh token sha256:%s is not sent again",
                    self.marker, why, fp)

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
        return (self._due_at(login) - self.rt.clock()).total_seconds()

    def _due_at(self, login: Login) -> datetime:
        from datetime import timedelta

        assert login.expires_at is not None
        margin = self.rt.settings.login_refresh_before_s
        if self.lifetime_s and self.lifetime_s <= margin:
            # A provider issuing tokens shorter than the lead: refresh at half their life instead of
            # at once after every refresh (a loop).
            margin = self.lifetime_s / 2
        return login.expires_at - timedelta(seconds=margin)

    # ------------------------------------------------------------------ refresh
    async def _refresh(self, provider: str, login: Login, text: str, ref: Any,
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
        """
        import aiohttp

        from controller.providers.oauth import (RefreshError, RefreshLost, RefreshRefused, RefreshUnavailable,
                                                refresh_login)

        st = self.rt.settings
        url = st.anthropic_token_url if provider == "anthropic" else st.openai_token_url
        fp = token_fingerprint(login.refresh_token)
        writer = self._writer()
        writer.forget()  # the write-ahead mark is always sent, whatever was written before
        await writer.write({IN_FLIGHT_KEY: f"sha256:{fp}"})   # fails: nothing sent, the tick retries
        notes: list[str] = []
        try:
            if self.session is not None:
                new_text = await refresh_login(self.session, provider, text, login, token_url=url, now=now,
                                               notes=notes)
            else:  # refreshes are rare: a session per refresh, nothing left open when the daemon stops
                async with aiohttp.ClientSession() as session:
                    new_text = await refresh_login(session, provider, text, login, token_url=url, now=now,
                                                   notes=notes)
        except RefreshRefused as exc:
            if candidate is not None:
                log.warning("Subscription %s: the refresh token of the login in box %s was refused: %s", self.marker,
                            candidate, exc)
                await self._clear_in_flight()
                return "refused"
            self.refused_fp = fp
            self.refused_msg = f"The provider refused to renew the login ({exc}); update the login Secret {ref.name!r}"
            self.post_event("Warning", "LoginRefreshRefused", self.refused_msg)
            log.warning("Subscription %s: %s", self.marker, exc)
            return "refused"
        except RefreshLost as exc:
            self._answer_lost(self.secret_fp if candidate is not None and self.secret_fp else fp, ref, str(exc))
            return "lost"
        except (RefreshUnavailable, RefreshError) as exc:
            from datetime import timedelta

            backoff = self._backoff(login, now)
            wait = getattr(exc, "retry_after_s", None)
            if wait is not None and wait > backoff:
                # The provider said when: honoured in full (the current login stays in use meanwhile).
                backoff = wait
                self.retry_at = now + timedelta(seconds=wait)
            log.warning("Subscription %s: %s; retry in %.0f s", self.marker, exc, backoff)
            if self.failures == 1:
                self.post_event("Warning", "LoginRefreshFailed", f"{exc}; retrying, the current login stays in use")
            await self._clear_in_flight()
            return "error"
        self.failures, self.retry_at = 0, None
        new = parse_login(provider, new_text)
        if new.expires_at is not None:
            self.lifetime_s = max(1.0, (new.expires_at - now).total_seconds())
        self.refreshes += 1
        self.identity_fp = new.fingerprint   # same chain, same account
        new_text = login_file(provider).mark(new_text, self.marker)
        await self._store(ref, new_text)
        await self._clear_in_flight()
        for note in notes:
            self.post_event("Warning", "TokenAnswerInvalid", note)
        await self.propagate(provider, new_text)
        log.info("Subscription %s: login refreshed (token sha256:%s), pushed to %d box(es)", self.marker,
                 new.fingerprint, len(self._last_boxes))
        return new, new_text

    async def _clear_in_flight(self) -> None:
        """Remove the write-ahead mark (best effort: a mark left behind names a token no longer in the
        Secret after a success, and only makes a restarted controller cautious after a failure)."""
        try:
            await self._writer().write({IN_FLIGHT_KEY: None})
        except Exception as exc:  # noqa: BLE001
            log.warning("Subscription %s: clearing refreshInFlight failed (%s)", self.marker, type(exc).__name__)

    def _backoff(self, login: Login, now: datetime) -> float:
        """Count a failure and set ``retry_at``: doubling from ``login_retry_s`` up to 10 minutes, never
        past a quarter of the access token's remaining life (the agents refresh at 5 minutes)."""
        from datetime import timedelta

        st = self.rt.settings
        self.failures += 1
        backoff = min(st.login_retry_s * 2 ** min(self.failures - 1, 30), max(st.login_retry_s, 600.0))
        if login.expires_at is not None:
            backoff = min(backoff, max(1.0, (login.expires_at - now).total_seconds() / 4))
        self.retry_at = now + timedelta(seconds=backoff)
        return backoff

    # ------------------------------------------------------------------ identity
    async def _identity(self, provider: str, login: Login) -> str:
        """The provider-confirmed account identity of ``login`` (`controller.providers.identity`)."""
        import aiohttp

        from controller.providers.identity import account_identity

        st = self.rt.settings
        base = st.anthropic_base_url if provider == "anthropic" else st.openai_base_url
        if self.session is not None:
            return await account_identity(self.session, provider, login, base_url=base)
        async with aiohttp.ClientSession() as session:
            return await account_identity(session, provider, login, base_url=base)

    async def _record_identity(self, provider: str, login: Login, status: dict[str, Any],
                               now: datetime) -> dict[str, Any]:
        """Record in ``status.account`` whose login the Subscription's Secret holds, as the provider says
        (once per access token, while it is valid). The Secret is written by the Subscription owner or by
        this keeper (only with logins of the same account), so its login defines the account; a login
        found in a box is adopted only when the provider names the same account (`_verify`)."""
        from controller.providers.identity import IdentityRefused, IdentityUnavailable

        fp = login.fingerprint
        if fp == self.identity_fp or (login.expires_at is not None and login.expires_at <= now):
            return status
        try:
            ident = await self._identity(provider, login)
        except IdentityUnavailable as exc:
            log.info("Subscription %s: %s; asking again at the next read", self.marker, exc)
            return status
        except IdentityRefused:
            self.identity_fp = fp  # the usage read reports the refused login
            return status
        if status.get("account") != ident:
            await self._writer().write({"account": ident})
            log.info("Subscription %s: account identity %s recorded", self.marker, ident)
        self.identity_fp = fp
        return {**status, "account": ident}

    async def _verify(self, provider: str, held: Login, recorded: str | None, now: datetime) -> str | None:
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
                self.verdicts[fp] = await self._identity(provider, held)
            except IdentityUnavailable as exc:
                log.info("Subscription %s: %s", self.marker, exc)
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

    # ------------------------------------------------------------------ store / propagate
    async def _store(self, ref: Any, text: str) -> None:
        """Write the login into the Subscription's Secret key (other keys untouched), retrying a few times."""
        data = {ref.key: base64.b64encode(text.encode()).decode()}
        for attempt in range(5):
            try:
                await self.rt.kube.patch_secret_data(self.namespace, ref.name, data)
                return
            except Exception as exc:  # noqa: BLE001 - the boxes still get it; retried below
                log.warning("Subscription %s: storing the login failed (%s)", self.marker, type(exc).__name__)
                await asyncio.sleep(0.5 * (attempt + 1))
        self.post_event("Warning", "LoginStoreFailed", f"Could not store the renewed login in Secret {ref.name!r}; "
                        "the boxes hold it")

    async def _boxes(self, provider: str) -> list[_Box]:
        """Boxes currently on this subscription whose agent uses its provider."""
        out = []
        for body in await self.rt.kube.list_custom(C.AGENTBOX_PLURAL, self.namespace):
            spec = body.get("spec") or {}
            status = body.get("status") or {}
            if spec.get("agent") != login_adapter(provider).name:
                continue
            switch = status.get("switch") if isinstance(status.get("switch"), dict) else {}
            if subscription_of_box(spec.get("subscription"), status.get("subscription"),
                                   switch.get("to")) != self.name:
                continue  # another subscription's box, or being switched away from this one
            name = body["metadata"]["name"]
            out.append(_Box(name, body, name, spec.get("container")))
        self._last_boxes = out
        return out

    async def _exec(self, box: _Box, argv: list[str], stdin: str | None = None) -> Any:
        """Run argv in the box's own pod; None when it has no running pod.

        Raises:
            NotOwned: the pod under the box's name is not controlled by the box (never exec'd into).
        """
        from controller.kube.exec import owned_exec
        from controller.kube.objects import box_container

        pod = await self.rt.kube.get_pod(self.namespace, box.pod)
        if not pod or ((pod.get("status") or {}).get("phase")) != "Running":
            return None
        container = box_container(pod.get("spec") or {}, box.container)
        if container is None:
            return None
        run = owned_exec(self.rt.exec, pod, (box.body.get("metadata") or {}).get("uid"), box.name, container)
        return await (run(argv) if stdin is None else run(argv, stdin=stdin))

    async def push(self, provider: str, box: _Box, text: str) -> bool:
        """The login into one box: its credentials Secret, then its live file where one exists.

        Only into objects the box owns: a squatting Secret or pod (NotOwned) gets nothing; the box's
        reconcile and tab watcher report it (SecretNotOwned / PodNotOwned). Returns False when the
        push should be retried.
        """
        from controller.kube.objects import NotOwned, make_box_secret

        try:
            await self.rt.kube.ensure_secret(make_box_secret(box.body, login_adapter(provider).login_secret_key(), text))
            # Only where a file exists: a box stopped by the reserve is left without one.
            res = await self._exec(box, login_adapter(provider).login_replace_argv(), stdin=text)
        except NotOwned as exc:
            log.warning("Subscription %s: not pushing the login to box %s: %s is not the box's", self.marker,
                        box.name, exc.kind)
            return True  # nothing to retry until the squatter goes; the read-back compares again
        except Exception as exc:  # noqa: BLE001
            log.warning("Subscription %s: pushing the login to box %s failed (%s)", self.marker, box.name,
                        type(exc).__name__)
            return False
        if res is not None and res.rc not in (0, LOGIN_FILE_MISSING_RC):
            log.warning("Subscription %s: writing the login file in box %s exited %s", self.marker, box.name, res.rc)
            return False
        return True

    async def propagate(self, provider: str, text: str, only: set[str] | None = None) -> None:
        """Push ``text`` to every box on the subscription (or the boxes in ``only``), except boxes that
        hold a login the keeper refused to adopt (`refused_boxes`)."""
        boxes = [b for b in await self._boxes(provider)
                 if (only is None or b.name in only) and b.name not in self.refused_boxes]
        results = await asyncio.gather(*(self.push(provider, b, text) for b in boxes))
        for box, ok in zip(boxes, results):
            if ok:
                self.unsynced.discard(box.name)
            else:
                self.unsynced.add(box.name)

    async def _sync_stale(self, provider: str, login: Login, text: str) -> None:
        """Boxes whose credentials Secret holds another token than the subscription's (a rotation that
        raced a refresh, a push that failed before a restart) get the current login."""
        if not self.refreshes and not self.adopted:
            return  # nothing renewed by this keeper yet: the boxes hold what they were given
        stale = []
        for box in await self._boxes(provider):
            current = await load_box_login(self.rt.kube, self.namespace, box.name, provider)
            held = current.login
            if held is None or held.access_token != login.access_token:
                if held is not None and self._newer(held, login) and \
                        login_file(provider).same_account(current.text or "", login, self.marker):
                    continue  # newer than ours: the read-back adopts it before the next refresh
                stale.append(box.name)
        if stale:
            await self.propagate(provider, text, only=set(stale))

    # ------------------------------------------------------------------ read back
    @staticmethod
    def _newer(a: Login, b: Login) -> bool:
        return a.expires_at is not None and b.expires_at is not None and a.expires_at > b.expires_at

    async def _adopt_from_boxes(self, provider: str, login: Login, text: str, ref: Any, now: datetime,
                                status: dict[str, Any]) -> tuple[Login, str] | str | None:
        """Adopt the newest login found in a box's live file, if the provider confirms it is this account's.

        A candidate is a login with a refresh token and a later expiry than the Secret's. Nothing in the
        file decides (markers and account ids can be copied): the candidate's access token is shown to
        the provider (`_verify`) and must belong to the identity in ``status.account``; then its refresh
        token (and expiry, still the box's word) is confirmed by spending it once (`_refresh` with
        ``candidate``), and only the provider's answer is grafted onto the Secret's login file and stored
        (nothing else from the box reaches the Secret). Every
        adoption is a Normal Event naming the box; a refused candidate is a Warning naming the box, once
        per login, and that box gets no pushes while it holds it.

        Returns:
            (login, text) adopted and propagated; `_UNDECIDED` when a candidate could not be checked
            (provider unreachable); None when there is nothing to adopt.
        """
        boxes = await self._boxes(provider)
        names = {b.name for b in boxes}
        for gone in [b for b in self.refused_boxes if b not in names]:
            self.refused_boxes.pop(gone)

        async def read(box: _Box) -> str | None:
            try:
                res = await self._exec(box, login_adapter(provider).login_read_argv())
            except Exception:  # noqa: BLE001 - not running, not owned (NotOwned), transport: no candidate
                return None
            return res.stdout if res is not None and res.rc == 0 else None

        candidates: list[tuple[_Box, Login, str]] = []
        for box, live in zip(boxes, await asyncio.gather(*(read(b) for b in boxes))):
            held = parse_held_login(provider, live)
            if held is None or held.access_token == login.access_token:
                if held is not None:
                    self.refused_boxes.pop(box.name, None)  # holds the subscription's login again
                continue
            if self.refused_boxes.get(box.name) not in (None, held.fingerprint):
                self.refused_boxes.pop(box.name)  # no longer holds the refused login
            if held.refresh_token and self._newer(held, login):
                candidates.append((box, held, live or ""))
        candidates.sort(key=lambda c: c[1].expires_at or now, reverse=True)
        undecided = False
        for box, held, live in candidates:
            why = await self._verify(provider, held, status.get("account"), now)
            if why is None:
                undecided = True
                continue
            if why:
                metrics.LOGIN_CANDIDATES.labels(self.namespace, self.name, "refused").inc()
                if self.refused_boxes.get(box.name) != held.fingerprint:
                    self.refused_boxes[box.name] = held.fingerprint
                    self.post_event("Warning", "LoginCandidateRefused",
                                    f"Box {box.name} holds a newer login that was not adopted: {why}. The Secret "
                                    f"{ref.name!r} and the other boxes are untouched; box {box.name} gets no login "
                                    "pushes while it holds it")
                    log.warning("Subscription %s: login in box %s refused: %s", self.marker, box.name, why)
                continue
            # The provider confirmed the access token's account, nothing else: the refresh token and the
            # expiry are still the box's word. The candidate's refresh token is spent once, here, and only
            # the provider's answer (new tokens, its own expires_in) is stored and passed on.
            fmt = login_file(provider)
            cand_text = fmt.mark(fmt.graft(text, live), self.marker)
            cand = parse_login(provider, cand_text)
            cfp = token_fingerprint(cand.refresh_token)
            if cfp in self.sent_candidates:
                continue  # sent once already: a second use would revoke the chain
            if len(self.sent_candidates) > 256:
                self.sent_candidates.pop()
            self.sent_candidates.add(cfp)
            outcome = await self._refresh(provider, cand, cand_text, ref, now, candidate=box.name)
            if outcome == "error":  # not spent: may be sent again later
                self.sent_candidates.discard(cfp)
                undecided = True
                continue
            if outcome == "lost":
                return None
            if outcome == "refused":
                metrics.LOGIN_CANDIDATES.labels(self.namespace, self.name, "refused").inc()
                self.refused_boxes[box.name] = held.fingerprint
                self.post_event("Warning", "LoginCandidateRefused",
                                f"Box {box.name} holds a newer login that was not adopted: the provider refused its "
                                f"refresh token. The Secret {ref.name!r} and the other boxes are untouched; box "
                                f"{box.name} gets no login pushes while it holds it")
                continue
            assert isinstance(outcome, tuple)
            self.adopted += 1
            metrics.LOGIN_CANDIDATES.labels(self.namespace, self.name, "adopted").inc()
            self.post_event("Normal", "LoginAdopted",
                            f"Box {box.name} held a newer login of this account (an agent refreshed it; the "
                            f"provider confirmed the account and renewed it); stored it in Secret {ref.name!r} and "
                            "passed it to the other boxes")
            return outcome
        return _UNDECIDED if undecided else None

    def _writer(self) -> StatusWriter:
        """The Subscription's one status writer (shared with its usage reader and validation)."""
        return subscription_writer(self.rt, self.namespace, self.name)

