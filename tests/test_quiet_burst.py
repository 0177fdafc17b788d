"""Work that can wait keeps out of a burst of armed continues (issue 20: 500 tabs at one instant): the burst's
window (`ArmedInstants.busy_for`) and a Subscription reader whose far timer falls in it, which waits it out
instead of reading the provider while the API server and the boxes' streams carry the Enters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.runtime import Runtime
from controller.service.armed import QUIET_AFTER_S, ArmedInstants
from controller.service.subscriptions import SubscriptionReader
from harness.reader_world import NS, T0, FixedUsage, reader_runtime, subscription

pytestmark = pytest.mark.unit


def armed(sends: int, at_s: float) -> ArmedInstants:
    """`sends` continues armed for T0 + `at_s`, a budget of 4 s (500 sends at the defaults' rule: 8 ms each)."""
    a = ArmedInstants(lambda n: 4.0 if n >= 500 else 2.0)
    for _ in range(sends):
        a.join(T0 + timedelta(seconds=at_s), T0)
    return a


@pytest.mark.parametrize("now_s, busy", [
    (-5.5, 0.0),           # before the typing (budget 4 s + lead 1 s before the instant)
    (-5.0, 5.0 + QUIET_AFTER_S),
    (0.0, QUIET_AFTER_S),  # the instant
    (1.5, QUIET_AFTER_S - 1.5),
    (QUIET_AFTER_S, 0.0),  # the burst is over
])
def test_a_burst_lasts_from_its_typing_to_two_seconds_after_its_instant(now_s: float, busy: float):
    assert armed(500, 0.0).busy_for(T0 + timedelta(seconds=now_s)) == pytest.approx(busy)


def test_no_armed_continue_no_burst():
    assert ArmedInstants(lambda n: 2.0).busy_for(T0) == 0.0


class CountingUsage(FixedUsage):
    def __init__(self) -> None:
        self.reads = 0

    async def get(self, *args, **kwargs):
        self.reads += 1
        return await super().get(*args, **kwargs)


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    rt = reader_runtime(monkeypatch)
    rt.usage = CountingUsage()  # type: ignore[assignment]
    return rt


def at(rt: Runtime, seconds: float) -> None:
    rt.clock = lambda: T0 + timedelta(seconds=seconds)  # type: ignore[method-assign]


async def test_a_far_read_due_in_a_burst_waits_it_out_then_reads(rt: Runtime):
    reader = SubscriptionReader(rt, NS, "shared", lambda *a: None)
    delay = await reader.tick(subscription())
    assert rt.usage.reads == 1 and delay >= rt.settings.usage_near_interval_s  # type: ignore[attr-defined]
    rt.armed = armed(500, delay + 1.0)  # its timer falls 1 s before an instant with 500 continues
    at(rt, delay)
    assert await reader.tick(subscription()) == pytest.approx(1.0 + QUIET_AFTER_S)
    assert rt.usage.reads == 1, "no provider read inside the burst"  # type: ignore[attr-defined]
    at(rt, delay + 1.0 + QUIET_AFTER_S)
    await reader.tick(subscription())
    assert rt.usage.reads == 2, "read once the burst is over"  # type: ignore[attr-defined]


async def test_a_wake_up_in_a_burst_reads_at_once(rt: Runtime):
    """A pass a wake-up brought before its timer (a box asked, the spec changed) is not the far read: it reads."""
    reader = SubscriptionReader(rt, NS, "shared", lambda *a: None)
    delay = await reader.tick(subscription())
    rt.armed = armed(500, 10.0)
    at(rt, 9.0)
    assert delay > 10.0
    await reader.tick(subscription())
    assert rt.usage.reads == 2  # type: ignore[attr-defined]
