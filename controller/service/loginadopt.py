"""Adopting an agent's own refresh: the read-back of the boxes' live login files, and a newer login found
there taken into the Subscription only once the provider proved it is the Subscription's account.

Touches: the boxes' live login files (read only, through :meth:`controller.service.loginpush.LoginPusher.exec`,
so only pods the boxes control), the provider (identity, then one refresh of the candidate through
:class:`controller.service.loginrefresh.LoginRefresher`), Events and the candidate metric. Nothing read from
a box reaches the Secret except the provider's own answer grafted onto the Secret's file; box logins are
only ever named by the box that holds them.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from controller import metrics
from controller.agents.registry import login_adapter
from controller.providers.credentials import Login, parse_login, token_fingerprint
from controller.providers.loginfile import login_file
from controller.service.loginidentity import AccountIdentity
from controller.service.loginload import parse_held_login
from controller.service.loginpush import LoginPusher, TargetBox, newer
from controller.service.loginrefresh import LoginRefresher
from controller.service.loginscope import LoginScope

log = logging.getLogger("agentbox.logins")

UNDECIDED = "undecided"   # a login in a box could not be checked with the provider (yet)


class LoginAdopter:
    """Finds a newer login of the Subscription's account in its boxes and adopts it.

    Args:
        scope: the Subscription.
        pusher: lists the boxes and reads their files.
        identity: the recorded account and the provider's verdicts on box logins.
        refresher: confirms a candidate by spending its refresh token once.
        refused_boxes: box name -> fingerprint of the refused login it holds (no pushes while it holds it);
            kept here, shared with the pusher, which leaves those boxes out.
    Attributes:
        adopted: logins adopted from boxes.
        sent_candidates: fingerprints of candidate refresh tokens already sent (never sent twice; bounded).
    """

    def __init__(self, scope: LoginScope, pusher: LoginPusher, identity: AccountIdentity,
                 refresher: LoginRefresher, refused_boxes: dict[str, str]) -> None:
        self.scope = scope
        self.pusher = pusher
        self.identity = identity
        self.refresher = refresher
        self.refused_boxes = refused_boxes
        self.adopted = 0
        self.sent_candidates: set[str] = set()

    def note_spent(self, fp: str) -> None:
        """Refresh token ``fp`` was (or may have been) sent already (a restart found it marked in flight)."""
        self.sent_candidates.add(fp)

    async def adopt(self, provider: str, login: Login, text: str, ref: Any, now: datetime,
                    status: dict[str, Any]) -> tuple[Login, str] | str | None:
        """Adopt the newest login found in a box's live file, if the provider confirms it is this account's.

        A candidate is a login with a refresh token and a later expiry than the Secret's. Nothing in the
        file decides (markers and account ids can be copied): the candidate's access token is shown to
        the provider (`AccountIdentity.verify`) and must belong to the identity in ``status.account``; then
        its refresh token (and expiry, still the box's word) is confirmed by spending it once
        (`LoginRefresher.refresh` with ``candidate``), and only the provider's answer is grafted onto the
        Secret's login file and stored (nothing else from the box reaches the Secret). Every
        adoption is a Normal Event naming the box; a refused candidate is a Warning naming the box, once
        per login, and that box gets no pushes while it holds it.

        Returns:
            (login, text) adopted and propagated; `UNDECIDED` when a candidate could not be checked
            (provider unreachable); None when there is nothing to adopt.
        """
        sc = self.scope
        boxes = await self.pusher.boxes(provider)
        names = {b.name for b in boxes}
        for gone in [b for b in self.refused_boxes if b not in names]:
            self.refused_boxes.pop(gone)

        async def read(box: TargetBox) -> str | None:
            try:
                res = await self.pusher.exec(box, login_adapter(provider).login_read_argv())
            except Exception:  # noqa: BLE001 - not running, not owned (NotOwned), transport: no candidate
                return None
            return res.stdout if res is not None and res.rc == 0 else None

        candidates: list[tuple[TargetBox, Login, str]] = []
        for box, live in zip(boxes, await asyncio.gather(*(read(b) for b in boxes))):
            held = parse_held_login(provider, live)
            if held is None or held.access_token == login.access_token:
                if held is not None:
                    self.refused_boxes.pop(box.name, None)  # holds the subscription's login again
                continue
            if self.refused_boxes.get(box.name) not in (None, held.fingerprint):
                self.refused_boxes.pop(box.name)  # no longer holds the refused login
            if held.refresh_token and newer(held, login):
                candidates.append((box, held, live or ""))
        candidates.sort(key=lambda c: c[1].expires_at or now, reverse=True)
        undecided = False
        for box, held, live in candidates:
            why = await self.identity.verify(provider, held, status.get("account"), now)
            if why is None:
                undecided = True
                continue
            if why:
                metrics.LOGIN_CANDIDATES.labels(sc.namespace, sc.name, "refused").inc()
                if self.refused_boxes.get(box.name) != held.fingerprint:
                    self.refused_boxes[box.name] = held.fingerprint
                    sc.post_event("Warning", "LoginCandidateRefused",
                                  f"Box {box.name} holds a newer login that was not adopted: {why}. The Secret "
                                  f"{ref.name!r} and the other boxes are untouched; box {box.name} gets no login "
                                  "pushes while it holds it")
                    log.warning("Subscription %s: login in box %s refused: %s", sc.marker, box.name, why)
                continue
            # The provider confirmed the access token's account, nothing else: the refresh token and the
            # expiry are still the box's word. The candidate's refresh token is spent once, here, and only
            # the provider's answer (new tokens, its own expires_in) is stored and passed on.
            fmt = login_file(provider)
            cand_text = fmt.mark(fmt.graft(text, live), sc.marker)
            cand = parse_login(provider, cand_text)
            cfp = token_fingerprint(cand.refresh_token)
            if cfp in self.sent_candidates:
                continue  # sent once already: a second use would revoke the chain
            if len(self.sent_candidates) > 256:
                self.sent_candidates.pop()
            self.sent_candidates.add(cfp)
            outcome = await self.refresher.refresh(provider, cand, cand_text, ref, now, candidate=box.name)
            if outcome == "error":  # not spent: may be sent again later
                self.sent_candidates.discard(cfp)
                undecided = True
                continue
            if outcome == "lost":
                return None
            if outcome == "refused":
                metrics.LOGIN_CANDIDATES.labels(sc.namespace, sc.name, "refused").inc()
                self.refused_boxes[box.name] = held.fingerprint
                sc.post_event("Warning", "LoginCandidateRefused",
                              f"Box {box.name} holds a newer login that was not adopted: the provider refused its "
                              f"refresh token. The Secret {ref.name!r} and the other boxes are untouched; box "
                              f"{box.name} gets no login pushes while it holds it")
                continue
            assert isinstance(outcome, tuple)
            self.adopted += 1
            metrics.LOGIN_CANDIDATES.labels(sc.namespace, sc.name, "adopted").inc()
            sc.post_event("Normal", "LoginAdopted",
                          f"Box {box.name} held a newer login of this account (an agent refreshed it; the "
                          f"provider confirmed the account and renewed it); stored it in Secret {ref.name!r} and "
                          "passed it to the other boxes")
            return outcome
        return UNDECIDED if undecided else None
