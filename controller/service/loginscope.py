"""Whose login the login keeper's parts work on: one Subscription, its runtime, its Events and its status
writer. Holds no state of its own and touches nothing; :mod:`controller.service.logins` builds one per
keeper and hands it to each part (:mod:`~controller.service.loginpush`, :mod:`~controller.service.loginidentity`,
:mod:`~controller.service.loginrefresh`, :mod:`~controller.service.loginadopt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from controller.service.status import StatusWriter, subscription_writer


@dataclass(frozen=True)
class LoginScope:
    """One Subscription as the login keeper's parts see it.

    Attributes:
        rt: runtime (settings, kube client, exec, clock).
        namespace, name: the Subscription.
        post_event: posts an Event on the Subscription: ``(type, reason, message)``.
        session: aiohttp session for the provider's endpoints (None: one per request).
    """

    rt: Any
    namespace: str
    name: str
    post_event: Callable[[str, str, str], None]
    session: Any = None

    @property
    def marker(self) -> str:
        """``"<namespace>/<name>"``: the Subscription in logs and in the login file's marker."""
        return f"{self.namespace}/{self.name}"

    def writer(self) -> StatusWriter:
        """The Subscription's one status writer (shared with its usage reader and validation)."""
        return subscription_writer(self.rt, self.namespace, self.name)
