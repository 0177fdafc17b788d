"""The `disconnected` webhook notification with the real operator: when the provider refuses a
subscription's login, one notification names the subscription (a human must log in again); it is not
repeated while the state stays Disconnected."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from test_notify import Hook, hook  # noqa: F401 -- the webhook receiver fixture

from agentbox_sim.world import World, claude_login, eventually, utc_in
from tests.harness.world_fixtures import FAST

pytestmark = pytest.mark.component


@pytest_asyncio.fixture
async def world(tmp_path, hook: Hook, monkeypatch: pytest.MonkeyPatch):  # noqa: F811
    monkeypatch.setenv("AGENTBOX_WEBHOOK_URL", hook.url)   # read by Notifier.from_env at the operator's start
    monkeypatch.setenv("AGENTBOX_WEBHOOK_KINDS", "disconnected,needs_attention")
    async with World(tmp_path / "world", FAST.model_copy(update={"usage_interval_s": 2.0})) as w:
        yield w


def state(world: World) -> str | None:
    return ((world.kube.get("subscriptions", "default", "a") or {}).get("status") or {}).get("state")


@pytest.mark.timeout(60)
async def test_a_refused_login_is_notified_once_naming_the_subscription(world: World, hook: Hook):  # noqa: F811
    world.start_operator()
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(10.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("a", "anthropic", "login", "credentials.json")
    await eventually(lambda: state(world) == "Available", 20, what="Available")
    assert hook.bodies == []
    world.provider.revoke("tok-a")
    await eventually(lambda: state(world) == "Disconnected", 30, what="Disconnected")
    await eventually(lambda: len(hook.bodies) >= 1, 10, what="the notification")
    body = hook.bodies[0]
    assert body["kind"] == "disconnected" and body["namespace"] == "default" and body["subscription"] == "a"
    assert "box" not in body and "tok-a" not in str(body)
    reads = world.provider.count("/api/oauth/usage")
    await eventually(lambda: world.provider.count("/api/oauth/usage") >= reads + 2, 20, what="two more reads")
    await asyncio.sleep(0)  # let a (wrong) second notification task run
    assert [b["kind"] for b in hook.bodies] == ["disconnected"], "posted on the change only"
