"""The one login loader: every login the controller reads, from a Secret or out of a box, is read and parsed
here, with the reason it is unusable.

- :func:`load_login` / :func:`load_login_of`: a Subscription's login file from its Secret (the Subscription's
  validation, its usage reader and login keeper, the box reconcile, the tab watcher's rotation, reserve
  restore and usage re-read at a reset).
- :func:`load_box_login`: the login a box's credentials Secret holds (the keeper's check for stale boxes).
- :func:`parse_held_login`: a login file read out of a box's container (the keeper's read-back); untrusted.

Messages name the field and the Secret, never a value (:mod:`controller.providers.credentials` says why a
file is unusable without quoting it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from controller import constants as C
from controller.agents.registry import login_adapter
from controller.kube.objects import secret_name
from controller.models import SubscriptionSpec, validation_message
from controller.providers.credentials import InvalidLogin, Login, parse_login


@dataclass(frozen=True)
class LoadedLogin:
    """A Subscription's login as read now.

    Attributes:
        provider: the Subscription's provider ("anthropic" | "openai"), "" when its spec is invalid.
        text: the login file's text from the Secret, None when absent.
        login: the parsed login, None when unusable (then ``reason`` and ``message`` say why).
        reason: a condition reason: ``Reconciled`` when usable, else ``SubscriptionNotFound``,
            ``InvalidSpec``, ``SecretNotFound``, ``SecretKeyMissing`` or ``InvalidLogin``.
        message: one line naming the field (prefixed with the Subscription's name when loaded by name).
    """

    provider: str
    text: str | None
    login: Login | None
    reason: str
    message: str

    @property
    def usable(self) -> bool:
        """True when the login parsed (``text`` and ``login`` are set)."""
        return self.login is not None


async def load_login(kube: Any, namespace: str, spec: SubscriptionSpec, prefix: str = "") -> LoadedLogin:
    """Read and parse the login a Subscription ``spec`` names (``spec.credentialsSecretRef``).

    Args:
        kube: :class:`controller.kube.objects.Kube` (``get_secret_value``).
        namespace: the Subscription's namespace (its Secret is there).
        spec: the validated Subscription spec.
        prefix: text put before each message (e.g. "Subscription 'team-a' " when a box reports it).

    Raises:
        Whatever the Kubernetes store raises for errors other than 404.
    """
    ref = spec.credentials_secret_ref
    exists, text = await kube.get_secret_value(namespace, ref.name, ref.key)
    if not exists:
        return LoadedLogin(spec.provider, None, None, C.R_SECRET_NOT_FOUND,
                           f"{prefix}spec.credentialsSecretRef.name: Secret {ref.name!r} not found")
    if text is None:
        return LoadedLogin(spec.provider, None, None, C.R_SECRET_KEY_MISSING,
                           f"{prefix}spec.credentialsSecretRef.key: Secret {ref.name!r} has no key {ref.key!r}")
    try:
        login = parse_login(spec.provider, text)
    except InvalidLogin as exc:
        return LoadedLogin(spec.provider, text, None, C.R_INVALID_LOGIN,
                           f"{prefix}spec.credentialsSecretRef: the login file in Secret {ref.name!r} key "
                           f"{ref.key!r} is unusable: {exc}")
    return LoadedLogin(spec.provider, text, login, C.R_RECONCILED, "Login file is valid")


async def load_login_of(kube: Any, namespace: str, name: str) -> LoadedLogin:
    """Read the Subscription ``name`` and its login (:func:`load_login`, messages prefixed with its name).

    Raises:
        Whatever the Kubernetes store raises for errors other than 404.
    """
    sub = await kube.get_custom(C.SUBSCRIPTION_PLURAL, namespace, name)
    if sub is None:
        return LoadedLogin("", None, None, C.R_SUBSCRIPTION_NOT_FOUND,
                           f"spec.subscription: Subscription {name!r} not found in namespace {namespace}")
    try:
        spec = SubscriptionSpec.model_validate(sub.get("spec") or {})
    except ValidationError as exc:
        return LoadedLogin("", None, None, C.R_SUBSCRIPTION_NOT_FOUND,
                           f"Subscription {name!r} is invalid: {validation_message(exc)}")
    return await load_login(kube, namespace, spec, prefix=f"Subscription {name!r} ")


async def load_box_login(kube: Any, namespace: str, box: str, provider: str) -> LoadedLogin:
    """The login a box's credentials Secret (``<box>-credentials``, the key of ``provider``'s agent, e.g.
    ``credentials.json``) holds, parsed. The Secret is the controller's own copy, but what it holds may have
    been pushed from anywhere: it is parsed as untrusted (:func:`parse_held_login`).

    Returns:
        :class:`LoadedLogin` with ``reason`` ``Reconciled`` (usable), ``SecretNotFound``, ``SecretKeyMissing``
        or ``InvalidLogin``; messages name the Secret and key, never a value.

    Raises:
        UnknownAgent: no agent runs on ``provider``.
        Whatever the Kubernetes store raises for errors other than 404.
    """
    name, key = secret_name(box), login_adapter(provider).login_secret_key()
    exists, text = await kube.get_secret_value(namespace, name, key)
    if not exists:
        return LoadedLogin(provider, None, None, C.R_SECRET_NOT_FOUND, f"Secret {name!r} not found")
    if text is None:
        return LoadedLogin(provider, None, None, C.R_SECRET_KEY_MISSING, f"Secret {name!r} has no key {key!r}")
    login = parse_held_login(provider, text)
    if login is None:
        return LoadedLogin(provider, text, None, C.R_INVALID_LOGIN, f"the login file in Secret {name!r} key "
                           f"{key!r} is unusable")
    return LoadedLogin(provider, text, login, C.R_RECONCILED, "Login file is valid")


def parse_held_login(provider: str, text: str | None) -> Login | None:
    """A login file that came out of a box (its live file read back, its credentials Secret): parsed and
    validated as the Subscription's are (:func:`controller.providers.credentials.parse_login`), None when
    absent or unusable. Nothing in it is trusted beyond its shape: who owns it is for the provider to say.
    """
    if not text:
        return None
    try:
        return parse_login(provider, text)
    except InvalidLogin:
        return None


class SharedLogins:
    """:func:`load_login_of` where simultaneous loads of one Subscription share ONE read.

    A reset wakes every box of a subscription at the same instant, and each box's usage re-read needs
    the subscription's login (a GET of the Subscription and one of its Secret): a thousand boxes on a
    hundred subscriptions made two thousand GETs for a hundred logins. Here the loads of one
    ``(namespace, name)`` go through a :class:`controller.kube.objects.FreshRead`: every caller still
    gets a login read AFTER it asked (never an older answer than its own read would have been), and N
    simultaneous callers cost at most two reads. Nothing is kept once the callers have their answer: the
    login (a credential) is not cached beyond the read they shared.
    """

    def __init__(self) -> None:
        self._reads: dict[tuple[str, str], list[Any]] = {}  # key -> [FreshRead, callers waiting]
        self.reads = 0

    async def load(self, kube: Any, namespace: str, name: str) -> LoadedLogin:
        """As :func:`load_login_of` (same result and errors), shared with simultaneous callers."""
        from controller.kube.objects import FreshRead

        key = (namespace, name)
        entry = self._reads.get(key)
        if entry is None:
            async def fetch() -> LoadedLogin:
                self.reads += 1
                return await load_login_of(kube, namespace, name)
            entry = self._reads[key] = [FreshRead(fetch), 0]
        entry[1] += 1
        try:
            return await entry[0].get()
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._reads.get(key) is entry:
                del self._reads[key]
