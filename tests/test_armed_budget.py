"""The write budget of armed continues grows with the continues armed for the same instant (issue 20: 500 tabs
at one instant): the pure rule (`controller.domain.resume.write_budget_s`), the per-instant counts
(`controller.service.armed.ArmedInstants`) and the armed send's wait (`TabSender._armed_wait`), which types
earlier once more continues joined its instant."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from controller.domain.resume import write_budget_s
from controller.domain.resume.timing import WRITE_BUDGET_STEP_S
from controller.service.armed import KEEP_S, ArmedInstants
from controller.service.tabsend import TabSender
from controller.settings import Settings

pytestmark = pytest.mark.unit  # the two waits below (real time, under a second each) are component

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("sends, expected", [
    (0, 2.0), (1, 2.0), (250, 2.0), (251, 2.25), (400, 3.25), (500, 4.0), (600, 5.0), (750, 6.0), (5000, 6.0),
])
def test_the_budget_is_per_send_in_steps_between_the_least_and_the_most(sends, expected):
    assert write_budget_s(sends, 2.0, 0.008, 6.0) == expected


def test_no_growth_without_a_per_send_cost_and_never_under_the_least():
    assert write_budget_s(10_000, 2.0, 0.0, 6.0) == 2.0
    assert write_budget_s(10_000, 2.0, 0.008, 1.0) == 2.0, "a most below the least: the least"
    assert write_budget_s(3, 0.0, 0.1, 6.0) == WRITE_BUDGET_STEP_S * 2  # 0.3 s up to the step: 0.5 s


def test_the_defaults_give_500_sends_at_one_instant_4_s():
    s = Settings(metrics_port=0)
    armed = ArmedInstants.from_settings(s)
    for _ in range(500):
        armed.join(T0, T0 - timedelta(seconds=8))
    assert armed.sends(T0) == 500 and armed.budget_s(T0) == 4.0
    assert armed.budget_s(T0 + timedelta(minutes=1)) == s.resume_write_budget_s, "another instant: its own count"


async def test_the_waiting_sends_are_told_only_when_the_budget_moves_a_step():
    armed = ArmedInstants(lambda n: write_budget_s(n, 2.0, 0.008, 6.0))
    told = 0
    event = armed.moved(T0)
    for _ in range(500):
        armed.join(T0, T0)
        if event.is_set():
            told += 1
            event = armed.moved(T0)
    assert told == 8, "2 s -> 4 s in 0.25 s steps: 8 moves for 500 joins"


def test_instants_a_few_seconds_apart_count_together_and_their_waiters_are_told():
    s = Settings(metrics_port=0)
    armed = ArmedInstants.from_settings(s)  # near: resumeWriteBudgetMaxS (6 s)
    apart = T0 + timedelta(seconds=3)
    far = T0 + timedelta(seconds=s.resume_write_budget_max_s)
    waiting = armed.moved(apart)
    for i in range(500):
        armed.join(T0 if i % 2 else apart, T0)
    assert armed.sends(T0) == armed.sends(apart) == 500 and armed.budget_s(apart) == 4.0
    assert waiting.is_set(), "a send waiting for the other instant was told its budget moved"
    assert armed.sends(far) == 250 and armed.budget_s(far) == 2.0, "6 s from the other instant: not near"


def test_an_instant_long_past_is_forgotten_and_its_waiters_released():
    armed = ArmedInstants(lambda n: float(n))
    armed.join(T0, T0)
    event = armed.moved(T0)
    armed.join(T0 + timedelta(minutes=5), T0 + timedelta(seconds=KEEP_S + 1))
    assert armed.sends(T0) == 0 and event.is_set()


def sender(pause: float, least: float, per_send: float, most: float) -> tuple[TabSender, SimpleNamespace]:
    settings = Settings(metrics_port=0, send_pause_s=pause, resume_write_budget_s=least,
                        resume_write_budget_per_send_s=per_send, resume_write_budget_max_s=most)
    rt = SimpleNamespace(settings=settings, clock=lambda: datetime.now(timezone.utc),
                         wakeups={("ns", "box"): asyncio.Event()}, box_changes={},
                         armed=ArmedInstants.from_settings(settings))
    term = SimpleNamespace(send_pause_s=pause)
    return TabSender(rt, "ns", "box", None, term, None, {}, None), rt  # type: ignore[arg-type]


@pytest.mark.component
async def test_an_armed_send_types_earlier_once_more_sends_join_its_instant():
    """Armed for 1.2 s from now with a least budget of 0.25 s (pause 0.05): typed at +0.9 s alone; 100 more
    continues armed for the same instant (10 ms each: 1 s, the most) move it to +0.15 s, and the send already
    waiting types then, not at its first instant."""
    tab, rt = sender(0.05, 0.25, 0.01, 1.0)
    not_before = rt.clock() + timedelta(seconds=1.2)
    tab.arm(not_before)
    first = tab.type_at(not_before)
    assert first == not_before - timedelta(seconds=0.3)
    waiting = asyncio.ensure_future(tab._armed_wait(not_before))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    for _ in range(100):
        rt.armed.join(not_before, rt.clock())
    assert tab.type_at(not_before) == not_before - timedelta(seconds=1.05)
    started = time.monotonic()
    assert await asyncio.wait_for(waiting, 2.0) is False, "not cancelled: it waited for its (earlier) instant"
    assert rt.clock() >= tab.type_at(not_before), "never before the instant it types at"
    assert rt.clock() < first, "typed before the instant it would have alone"
    assert time.monotonic() - started < 0.5


@pytest.mark.component
async def test_a_box_change_still_cancels_a_send_waiting_on_a_grown_budget():
    tab, rt = sender(0.05, 0.2, 0.01, 1.0)
    not_before = rt.clock() + timedelta(seconds=1.5)
    tab.arm(not_before)
    waiting = asyncio.ensure_future(tab._armed_wait(not_before))
    await asyncio.sleep(0.05)
    rt.box_changes[("ns", "box")] = 1
    rt.wakeups[("ns", "box")].set()
    assert await asyncio.wait_for(waiting, 1.0) is True
