"""Subscription states against the provider emulator: every transition the reader makes, and the
rule that a throttled read is "not now" (last windows kept), never "exhausted"."""

from __future__ import annotations

import pytest

import pytest_asyncio

from agentbox_sim.world import World, claude_login, eventually, utc_in
from tests.harness.world_fixtures import FAST

pytestmark = pytest.mark.component


@pytest_asyncio.fixture
async def world(tmp_path):
    """A world whose subscription reader polls every 3 s far from thresholds (the cadence itself is
    unit-tested in test_usage_cadence.py), so transitions show quickly."""
    async with World(tmp_path / "world", FAST.model_copy(update={"usage_interval_s": 3.0})) as w:
        yield w


def sub(world: World) -> dict:
    return (world.kube.get("subscriptions", "default", "a") or {}).get("status") or {}


def cond(world: World, type_: str) -> dict:
    return next((c for c in sub(world).get("conditions", []) if c["type"] == type_), {})


async def test_transitions_available_reserved_exhausted_available_disconnected(world: World):
    world.start_operator()
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(40.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("a", "anthropic", "login", "credentials.json", reserve={"fiveHourPercent": 20})
    await eventually(lambda: sub(world).get("state") == "Available", 15)
    assert sub(world)["windows"]["fiveHour"]["utilization"] == 40.0 and sub(world)["readAt"]
    world.provider.set_windows("acct-a", five_hour=(85.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    await eventually(lambda: sub(world).get("state") == "Reserved", 45, what="Reserved")
    assert sub(world)["reservedUntil"]
    world.provider.set_windows("acct-a", five_hour=(100.0, utc_in(40)), weekly=(10.0, utc_in(86400)))
    await eventually(lambda: sub(world).get("state") == "Exhausted", 45, what="Exhausted")
    assert "reservedUntil" not in sub(world)
    await eventually(lambda: sub(world).get("state") == "Available", 60, what="Available after the reset")
    world.provider.revoke("tok-a")
    await eventually(lambda: sub(world).get("state") == "Disconnected", 40, what="Disconnected")
    assert cond(world, "UsageFetched")["reason"] == "Unauthorized"
    reasons = [e["reason"] for e in world.events("a")]
    for state in ("Available", "Reserved", "Exhausted", "Disconnected"):
        assert state in reasons, f"an Event on the change to {state}"
    assert any("5-hour window at 100%" in e["message"] for e in world.events("a") if e["reason"] == "Exhausted")


async def test_a_throttled_read_keeps_the_last_windows_and_is_never_exhausted(world: World):
    world.start_operator()
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(55.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("a", "anthropic", "login", "credentials.json")
    await eventually(lambda: sub(world).get("state") == "Available", 15)
    read_at = sub(world)["readAt"]
    world.provider.set_windows("acct-a", five_hour=(95.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    world.provider.fail_next(50, 429, {"Retry-After": "1"}, path="/api/oauth/usage")
    await eventually(lambda: cond(world, "UsageFetched").get("reason") == "Throttled", 40, what="Throttled")
    status = sub(world)
    assert status["state"] == "Available", "429 means 'not now', never 'exhausted'"
    assert status["windows"]["fiveHour"]["utilization"] == 55.0 and status["readAt"] == read_at, "last windows kept"
