"""A Subscription reader's world without an API server or a provider: one Subscription `shared` in namespace
`team` whose login Secret holds a Claude login, an in-memory Kube (`harness.memkube.MemKube`), a usage cache
that always answers 10 % of the 5-hour window, and a login keeper whose provider identity check answers
`acct-a` without a network. Shared by the unit tests of the login loader and of the Subscription writer."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from controller import constants as C
from controller.domain.types import Usage, Window
from controller.runtime import Runtime
from controller.service import loginidentity
from controller.settings import Settings
from harness.memkube import MemKube

T0 = datetime(2026, 3, 10, 1, 0, 0, tzinfo=timezone.utc)
NS = "team"


def claude_login(access: str, expires: datetime) -> str:
    """A Claude Code login file (`~/.claude/.credentials.json`) with `access`, its refresh token and expiry."""
    return json.dumps({"claudeAiOauth": {"accessToken": access, "refreshToken": "refresh-" + access,
                                         "expiresAt": int(expires.timestamp() * 1000),
                                         "scopes": ["user:inference"], "subscriptionType": "max"}})


class FixedUsage:
    """A usage cache answering 10 % of the 5-hour window, resetting 2 h after T0."""

    async def get(self, key, provider, login, max_age_s=None, now=None) -> Usage:
        return Usage({"five_hour": Window("five_hour", 10.0, T0 + timedelta(hours=2))}, read_at=T0)


def subscription(gen: int = 1) -> dict[str, Any]:
    """The Subscription as a handler or daemon first saw it (resourceVersion 1, empty status)."""
    return {"metadata": {"name": "shared", "namespace": NS, "generation": gen, "uid": "u1", "resourceVersion": "1"},
            "spec": {"provider": "anthropic",
                     "credentialsSecretRef": {"name": "login-shared", "key": "credentials.json"}},
            "status": {}}


def reader_runtime(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """The runtime of that world (clock fixed at T0)."""
    kube = MemKube()
    kube.secrets[(NS, "login-shared")] = {"credentials.json": claude_login("acc-1", T0 + timedelta(hours=8))}
    kube.objects[(C.SUBSCRIPTION_PLURAL, NS, "shared")] = subscription()

    async def identity(self, provider, login):  # the provider's answer, without a network
        return "acct-a"
    monkeypatch.setattr(loginidentity.AccountIdentity, "ask", identity)
    return Runtime(settings=Settings(), kube=kube, usage=FixedUsage(), clock=lambda: T0)  # type: ignore[arg-type]
