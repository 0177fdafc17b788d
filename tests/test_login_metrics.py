"""Login metrics with the real operator: `agentbox_login_refreshes_total` counts each refresh by result and
`agentbox_login_expiry_timestamp_seconds` and the Subscription's `status.loginExpiresAt` follow the login the
Secret holds (the AgentboxLoginExpiringSoon alert and `kubectl agentbox status` read them)."""

from __future__ import annotations

import pytest
from test_login_lifecycle import KEY, TOKEN_PATH, access, secret_text, settings, shared, sub_status

from controller import metrics
from controller.providers.credentials import parse_login
from agentbox_sim.world import World, eventually

pytestmark = pytest.mark.component


def _value(metric, *labels: str) -> float:
    return metric.labels(*labels)._value.get()


@pytest.mark.timeout(60)
async def test_refreshes_are_counted_by_result_and_the_expiry_follows_the_secret(world: World):
    settings(world, login_refresh_before_s=6.0)
    world.provider.token_ttl_s["openai"] = 12.0
    world.provider.fail_next(1, 503, path=TOKEN_PATH["openai"])
    first = None
    try:
        await shared(world, "openai", boxes=1, ttl=12.0)
        first = access("openai", secret_text(world, "login-shared", KEY["openai"]))
        await eventually(lambda: _value(metrics.LOGIN_REFRESHES, "default", "shared", "ok") >= 1, 30,
                         what="a refresh")
        assert _value(metrics.LOGIN_REFRESHES, "default", "shared", "error") == 1
        assert _value(metrics.LOGIN_REFRESHES, "default", "shared", "refused") == 0

        def expiry_is_the_secrets() -> bool:
            text = secret_text(world, "login-shared", KEY["openai"])
            login = parse_login("openai", text)
            return access("openai", text) != first and login.expires_at is not None and \
                _value(metrics.LOGIN_EXPIRY, "default", "shared") == login.expires_at.timestamp()

        await eventually(expiry_is_the_secrets, 15, what="the expiry gauge follows the renewed login")

        def status_shows_it() -> bool:
            login = parse_login("openai", secret_text(world, "login-shared", KEY["openai"]))
            return sub_status(world, "shared").get("loginExpiresAt") == login.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")

        await eventually(status_shows_it, 15, what="status.loginExpiresAt (shown by `status`)")
        assert sub_status(world, "shared").get("state") == "Available"
    finally:
        metrics.forget_subscription("default", "shared")
