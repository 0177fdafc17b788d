"""The provider's usage API misbehaving (issue 9 finding 6, provider parts), against the real operator:

* `Retry-After` is honoured in full by every reader of a subscription's usage (the subscription's own
  reader and every box's resume check share it), not cut to the usage interval;
* with the usage API down at a reset, the resume waits until the end of the printed minute plus the
  margin and the tab is never parked because the API was down.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.types import Usage
from controller.providers.credentials import Login
from controller.providers.readers import UsageCache, UsageThrottled
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in

USAGE = "/api/oauth/usage"


def submits(world: World, pod: str) -> list[dict]:
    return [e for e in world.agent_log(pod, "main") if e["event"] == "submit"]


def tab(world: World, box: str) -> dict:
    tabs = ((world.box(box) or {}).get("status") or {}).get("tabs") or []
    return next((t for t in tabs if t["name"] == "main"), {})


async def limited_boxes(world: World, resets: list[float]) -> None:
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, datetime.fromtimestamp(max(resets), timezone.utc)),
                               weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    for i, reset in enumerate(resets):
        await world.add_box(f"box{i}", "claude-code", "claude-a")
        await world.run_pod(f"box{i}", [TabSpec("main", fake_agent_argv("claude-code", reset))])


@pytest.mark.unit
async def test_usage_cache_holds_every_caller_for_the_whole_retry_after():
    now = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    calls = []

    class Reader:
        async def read(self, provider, login, clock, on_request=None):
            calls.append(clock())
            if len(calls) == 1:
                raise UsageThrottled("429", retry_after_s=3600.0, provider=provider, status=429)
            return Usage({}, read_at=clock())

    cache = UsageCache(Reader())
    login = Login("anthropic", "tok")
    with pytest.raises(UsageThrottled):
        await cache.get("k", "anthropic", login, max_age_s=0, now=lambda: now[0])
    for step in (1, 600, 3598):
        now[0] = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=step)
        with pytest.raises(UsageThrottled) as exc:
            await cache.get("k", "anthropic", login, max_age_s=0, now=lambda: now[0])
        assert exc.value.retry_after_s == pytest.approx(3600 - step)
    assert len(calls) == 1, "no request while the provider's Retry-After runs"
    now[0] = datetime(2026, 1, 1, 1, 0, 1, tzinfo=timezone.utc)
    await cache.get("k", "anthropic", login, max_age_s=0, now=lambda: now[0])
    assert len(calls) == 2
    # Another subscription is not held.
    await cache.get("other", "anthropic", login, max_age_s=0, now=lambda: now[0])
    assert len(calls) == 3


@pytest.mark.component
@pytest.mark.timeout(150)
async def test_retry_after_is_honoured_by_the_reader_and_every_box(world: World):
    """Before: the subscription reader re-read at its own pace and each box's resume check read again."""
    world.settings = world.settings.model_copy(update={"usage_interval_s": 3.0, "usage_near_interval_s": 2.0})
    world.provider.fail_next(1000, 429, {"Retry-After": "3600"}, path=USAGE)
    world.start_operator()
    now = time.time()
    await limited_boxes(world, [float(math.ceil(now + 3)), float(math.ceil(now + 5))])

    def checked(box: str) -> bool:  # the box's resume check ran (and found the API unavailable)
        return bool(submits(world, box)) or "could not confirm" in (tab(world, box).get("message") or "")

    # The resume check runs at the reset; the "could not confirm" message then stays until the end of the
    # printed minute + the margin, when the continue comes.
    await eventually(lambda: checked("box0") and checked("box1"), 75 + world.settings.resume_margin_s,
                     what="both boxes checked usage at their reset")
    await eventually(lambda: time.time() > now + 12, 15)  # several reader intervals (3 s) later
    assert world.provider.count(USAGE) == 1, [(r.path, r.status) for r in world.provider.requests if r.path == USAGE]


@pytest.mark.component
@pytest.mark.timeout(180)
async def test_usage_api_down_at_the_reset_never_parks_the_tab(world: World):
    """The screen prints the reset to the minute; the real reset is 20 s into that minute and the usage
    API is down. Before: continues were sent from reset + margin, each hit the limit again, and after
    `max_attempts` (3 in these settings) the tab was parked for a human."""
    world.provider.fail_next(10000, 503, path=USAGE)
    world.start_operator()
    minute = math.ceil((time.time() + 8) / 60) * 60   # the next whole minute at least 8 s away
    real_reset = float(minute + 20)
    await limited_boxes(world, [real_reset])
    await eventually(lambda: tab(world, "box0").get("state") == "RateLimited", 20, what="limit detected")
    await eventually(lambda: submits(world, "box0"), minute + 100 - time.time(), what="continue sent")
    sent = submits(world, "box0")
    assert sent[0]["t"] >= real_reset, "the first continue waited for the end of the printed minute"
    assert sent[0]["t"] >= minute + 60 + world.settings.resume_margin_s - 0.5
    await eventually(lambda: any(e["event"] == "working" for e in world.agent_log("box0", "main")), 15,
                     what="the agent working again")
    assert len(submits(world, "box0")) == 1
    assert tab(world, "box0").get("state") != "NeedsAttention"
    assert not any(e["reason"] == "ResumeNotTakingEffect" for e in world.events("box0"))
