"""Usage read cadence (issue: subscriptions): near thresholds, burn rate, reset instants (pure)."""

from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.subscription import evaluate, next_read_in, threshold_sentence
from controller.domain.types import Usage, Window

pytestmark = pytest.mark.unit
T0 = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)
FAR = T0 + timedelta(hours=4)


def u(five, at=T0, week=10.0, reset=FAR):
    return Usage({"five_hour": Window("five_hour", five, reset), "weekly": Window("weekly", week, T0 + timedelta(days=3))},
                 read_at=at)


def test_far_from_thresholds_reads_every_five_minutes():
    assert next_read_in(u(30), None, 0, 0, T0) == 300


def test_within_ten_points_of_100_reads_every_minute():
    assert next_read_in(u(92), None, 0, 0, T0) == 60


def test_within_ten_points_of_the_reserve_reads_every_minute():
    assert next_read_in(u(72), None, 20, 0, T0) == 60     # threshold 80


def test_burn_rate_reads_before_the_predicted_crossing():
    prev, now = u(60, T0 - timedelta(seconds=60)), u(66, T0)   # 6 points a minute, 14 to go: ~140 s
    assert next_read_in(now, prev, 20, 0, T0) == pytest.approx(0.9 * 140, rel=0.01)


def test_fast_burn_is_bounded_below():
    prev, now = u(20, T0 - timedelta(seconds=10), ), u(70, T0)
    assert next_read_in(now, prev, 20, 0, T0) == 5


def test_reset_instant_comes_first():
    soon = T0 + timedelta(seconds=42)
    assert next_read_in(u(100, reset=soon), None, 0, 0, T0) == 43


def test_a_reset_between_reads_is_not_a_burn_rate():
    prev = u(90, T0 - timedelta(seconds=60), reset=T0 - timedelta(seconds=1))
    assert next_read_in(u(5), prev, 0, 0, T0) == 300


def test_states_and_sentence():
    assert evaluate(None, 0, 0, T0).state == "Unknown"
    assert evaluate(u(100), 0, 0, T0).state == "Exhausted"
    r = evaluate(u(81), 20, 0, T0)
    assert r.state == "Reserved" and r.until == FAR and "keeping 20% of the 5-hour limit" in r.message
    assert evaluate(u(79), 20, 0, T0).state == "Available"
    assert threshold_sentence(20, 0) == "Boxes stop at 80% of the 5-hour limit; the weekly limit has no reserve."
