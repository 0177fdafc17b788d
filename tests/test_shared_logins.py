"""controller.service.loginload.SharedLogins: the boxes of one subscription woken together by a reset load
its login once (not one GET of the Subscription and one of its Secret per box), and each still gets a login
read after it asked; nothing is kept once they have it."""

from __future__ import annotations

import asyncio

import pytest

from agentbox_sim.world import claude_login
from controller.service.loginload import SharedLogins, load_login_of

pytestmark = pytest.mark.unit


class Store:
    """A Kubernetes store double holding one Subscription and its Secret; counts reads; a read of the
    Secret can be held at a gate (to arrive while a read is in flight)."""

    def __init__(self) -> None:
        self.login = claude_login("tok-1")
        self.gets = 0
        self.secret_reads = 0
        self.gate: asyncio.Event | None = None

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict | None:
        self.gets += 1
        if name != "sub-a":
            return None
        return {"metadata": {"name": name}, "spec": {
            "provider": "anthropic", "credentialsSecretRef": {"name": "login-a", "key": "credentials.json"}}}

    async def get_secret_value(self, namespace: str, name: str, key: str) -> tuple[bool, str | None]:
        self.secret_reads += 1
        value = self.login  # what the read returns: the Secret as it is when the read starts
        if self.gate is not None:
            await self.gate.wait()
        return True, value


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_simultaneous_loads_of_one_subscription_share_one_read() -> None:
    store, shared = Store(), SharedLogins()
    got = await asyncio.gather(*(shared.load(store, "ns", "sub-a") for _ in range(500)))
    assert store.gets == 1 and store.secret_reads == 1 and shared.reads == 1
    assert all(g == got[0] for g in got) and got[0].usable and got[0].text == store.login
    assert got[0] == await load_login_of(store, "ns", "sub-a"), "the same answer as the unshared loader"


async def test_no_caller_gets_a_login_read_before_it_asked() -> None:
    store, shared = Store(), SharedLogins()
    store.gate = asyncio.Event()
    first = asyncio.ensure_future(shared.load(store, "ns", "sub-a"))
    await settle()
    store.login = claude_login("tok-2")  # the login keeper rotated the Secret while that read was in flight
    later = [asyncio.ensure_future(shared.load(store, "ns", "sub-a")) for _ in range(50)]
    await settle()
    assert store.secret_reads == 1, "the later callers wait for the next read"
    store.gate.set()
    assert "tok-1" in (await first).text
    texts = [(await f).text for f in later]
    assert all("tok-2" in t for t in texts), "a caller never gets the read that predates its call"
    assert store.secret_reads == 2


async def test_nothing_is_kept_after_the_callers_have_their_login() -> None:
    store, shared = Store(), SharedLogins()
    await shared.load(store, "ns", "sub-a")
    store.login = claude_login("tok-3")
    assert "tok-3" in (await shared.load(store, "ns", "sub-a")).text, "a later call reads again"
    assert store.secret_reads == 2 and shared._reads == {}


async def test_subscriptions_are_apart_and_errors_reach_every_caller() -> None:
    store, shared = Store(), SharedLogins()
    a, missing = await asyncio.gather(shared.load(store, "ns", "sub-a"), shared.load(store, "ns", "sub-b"))
    assert a.usable and not missing.usable and missing.reason == "SubscriptionNotFound"

    async def broken(*_: object) -> None:
        raise ConnectionError("API server unavailable")
    store.get_custom = broken  # type: ignore[method-assign]
    results = await asyncio.gather(*(shared.load(store, "ns", "sub-a") for _ in range(10)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    assert shared._reads == {}
