"""Where a Subscription's login goes once the keeper has it: the Subscription's own Secret first, then every
box on the Subscription (its credentials Secret, and its live login file where one exists).

Touches: the Subscription's credentials Secret (one key, the other keys kept), the AgentBox list, and per
box only objects the box controls: its credentials Secret and its pod (`controller.kube.exec.owned_exec`; a
squatter raises ``NotOwned`` and gets nothing). Decides nothing about which login is current: that is the
keeper's (:mod:`controller.service.logins`). Login texts never reach a log line or an Event.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass
from typing import Any

from controller import constants as C
from controller.agents.adapter import LOGIN_FILE_MISSING_RC
from controller.agents.registry import login_adapter
from controller.domain.rotation import subscription_of_box
from controller.providers.credentials import Login
from controller.providers.loginfile import login_file
from controller.service.loginload import load_box_login
from controller.service.loginscope import LoginScope

log = logging.getLogger("agentbox.logins")


@dataclass
class TargetBox:
    """A box on the Subscription whose agent uses its provider.

    Attributes:
        name: the AgentBox's name; ``pod``: its pod's name (the same).
        body: the AgentBox object as listed (its uid proves the pod and Secret are the box's).
        container: the container named by the box's spec (None: the pod's agent container).
    """

    name: str
    body: dict[str, Any]
    pod: str
    container: str | None = None


def newer(a: Login, b: Login) -> bool:
    """True when login ``a`` expires later than ``b`` (False when either has no expiry)."""
    return a.expires_at is not None and b.expires_at is not None and a.expires_at > b.expires_at


class LoginPusher:
    """Stores a login in the Subscription's Secret and pushes it to the Subscription's boxes.

    Args:
        scope: the Subscription.
        refused_boxes: box name -> fingerprint of a login in it the keeper refused to adopt; those boxes get
            no pushes. The same dict the adopter (:class:`controller.service.loginadopt.LoginAdopter`) keeps;
            only read here.
    Attributes:
        unsynced: boxes whose last push failed (retried at the keeper's next tick).
        last_boxes: the boxes found by the last :meth:`boxes`.
    """

    def __init__(self, scope: LoginScope, refused_boxes: dict[str, str]) -> None:
        self.scope = scope
        self.refused_boxes = refused_boxes
        self.unsynced: set[str] = set()
        self.last_boxes: list[TargetBox] = []

    async def store(self, ref: Any, text: str) -> None:
        """Write the login into the Subscription's Secret key ``ref.key`` of Secret ``ref.name`` (other keys
        untouched), up to 5 attempts 0.5 s, 1 s, ... apart; then a Warning ``LoginStoreFailed`` (the boxes
        still get it). Never raises."""
        sc = self.scope
        data = {ref.key: base64.b64encode(text.encode()).decode()}
        for attempt in range(5):
            try:
                await sc.rt.kube.patch_secret_data(sc.namespace, ref.name, data)
                return
            except Exception as exc:  # noqa: BLE001 - the boxes still get it; retried below
                log.warning("Subscription %s: storing the login failed (%s)", sc.marker, type(exc).__name__)
                await asyncio.sleep(0.5 * (attempt + 1))
        sc.post_event("Warning", "LoginStoreFailed", f"Could not store the renewed login in Secret {ref.name!r}; "
                      "the boxes hold it")

    async def boxes(self, provider: str) -> list[TargetBox]:
        """Boxes currently on this subscription whose agent uses its provider (a box being switched belongs
        to the switch's target). Raises the API error of a failed list."""
        sc = self.scope
        out = []
        for body in await sc.rt.kube.list_custom(C.AGENTBOX_PLURAL, sc.namespace):
            spec = body.get("spec") or {}
            status = body.get("status") or {}
            if spec.get("agent") != login_adapter(provider).name:
                continue
            switch = status.get("switch") if isinstance(status.get("switch"), dict) else {}
            if subscription_of_box(spec.get("subscription"), status.get("subscription"),
                                   switch.get("to")) != sc.name:
                continue  # another subscription's box, or being switched away from this one
            name = body["metadata"]["name"]
            out.append(TargetBox(name, body, name, spec.get("container")))
        self.last_boxes = out
        return out

    async def exec(self, box: TargetBox, argv: list[str], stdin: str | None = None) -> Any:
        """Run argv in the box's own pod; None when it has no running pod.

        Raises:
            NotOwned: the pod under the box's name is not controlled by the box (never exec'd into).
        """
        from controller.kube.exec import owned_exec
        from controller.kube.objects import box_container

        sc = self.scope
        pod = await sc.rt.kube.get_pod(sc.namespace, box.pod)
        if not pod or ((pod.get("status") or {}).get("phase")) != "Running":
            return None
        container = box_container(pod.get("spec") or {}, box.container)
        if container is None:
            return None
        run = owned_exec(sc.rt.exec, pod, (box.body.get("metadata") or {}).get("uid"), box.name, container)
        return await (run(argv) if stdin is None else run(argv, stdin=stdin))

    async def push(self, provider: str, box: TargetBox, text: str) -> bool:
        """The login into one box: its credentials Secret, then its live file where one exists.

        Only into objects the box owns: a squatting Secret or pod (NotOwned) gets nothing; the box's
        reconcile and tab watcher report it (SecretNotOwned / PodNotOwned). Returns False when the
        push should be retried.
        """
        from controller.kube.objects import NotOwned, make_box_secret

        marker = self.scope.marker
        try:
            await self.scope.rt.kube.ensure_secret(make_box_secret(box.body, login_adapter(provider).login_secret_key(),
                                                                   text))
            # Only where a file exists: a box stopped by the reserve is left without one.
            res = await self.exec(box, login_adapter(provider).login_replace_argv(), stdin=text)
        except NotOwned as exc:
            log.warning("Subscription %s: not pushing the login to box %s: %s is not the box's", marker,
                        box.name, exc.kind)
            return True  # nothing to retry until the squatter goes; the read-back compares again
        except Exception as exc:  # noqa: BLE001
            log.warning("Subscription %s: pushing the login to box %s failed (%s)", marker, box.name,
                        type(exc).__name__)
            return False
        if res is not None and res.rc not in (0, LOGIN_FILE_MISSING_RC):
            log.warning("Subscription %s: writing the login file in box %s exited %s", marker, box.name, res.rc)
            return False
        return True

    async def propagate(self, provider: str, text: str, only: set[str] | None = None) -> None:
        """Push ``text`` to every box on the subscription (or the boxes in ``only``), all at once, except boxes
        that hold a login the keeper refused to adopt (`refused_boxes`); a failed push lands in `unsynced`.
        Raises the API error of a failed box list."""
        boxes = [b for b in await self.boxes(provider)
                 if (only is None or b.name in only) and b.name not in self.refused_boxes]
        results = await asyncio.gather(*(self.push(provider, b, text) for b in boxes))
        for box, ok in zip(boxes, results):
            if ok:
                self.unsynced.discard(box.name)
            else:
                self.unsynced.add(box.name)

    async def sync_stale(self, provider: str, login: Login, text: str) -> None:
        """Boxes whose credentials Secret holds another token than the subscription's (a rotation that
        raced a refresh, a push that failed before a restart) get the current login; a box holding a newer
        login of the same account is left for the keeper's read-back. Only called once the keeper renewed
        a login (before that the boxes hold what they were given)."""
        sc = self.scope
        stale = []
        for box in await self.boxes(provider):
            current = await load_box_login(sc.rt.kube, sc.namespace, box.name, provider)
            held = current.login
            if held is None or held.access_token != login.access_token:
                if held is not None and newer(held, login) and \
                        login_file(provider).same_account(current.text or "", login, sc.marker):
                    continue  # newer than ours: the read-back adopts it before the next refresh
                stale.append(box.name)
        if stale:
            await self.propagate(provider, text, only=set(stale))
