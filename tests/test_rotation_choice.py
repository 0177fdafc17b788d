"""Rotation choice rules (DESIGN §3), table-tested on the pure domain."""

from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.rotation import Candidate, choose_next, first_to_reset, group_members, must_leave

pytestmark = pytest.mark.unit
T0 = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)


def c(name, state="Available", five=None, week=None, reset_in=None, provider="anthropic", until=None):
    return Candidate(name, provider, state, five, week,
                     T0 + timedelta(minutes=reset_in) if reset_in is not None else None, until)


@pytest.mark.parametrize("members, expected", [
    ([c("a", five=100), c("b", five=20), c("c", five=50)], "b"),                       # most 5-hour headroom
    ([c("a", five=100), c("b", five=20, week=80), c("c", five=20, week=30)], "c"),     # then weekly headroom
    ([c("a"), c("b", five=20, week=30, reset_in=90), c("c", five=20, week=30, reset_in=30)], "c"),  # then earliest reset
    ([c("a"), c("b", "Exhausted", five=0), c("c", five=90)], "c"),                     # skip Exhausted
    ([c("a"), c("b", "Reserved", five=0), c("c", five=90)], "c"),                      # skip Reserved
    ([c("a"), c("b", "Disconnected", five=0), c("c", five=90)], "c"),                  # skip Disconnected
    ([c("a"), c("b", "Unknown"), c("c", five=90)], "c"),                               # never-read never chosen
    ([c("a", five=0), c("b", "Exhausted")], None),                                     # only the current is usable
    ([c("a", five=0)], None),
])
def test_choice(members, expected):
    got = choose_next("a", members)
    assert (got.name if got else None) == expected


def test_choice_never_returns_the_current_even_if_best():
    assert choose_next("a", [c("a", five=0), c("b", five=60)]).name == "b"


def test_group_all_includes_every_subscription_of_the_provider():
    subs = [c("a"), c("b"), c("x", provider="openai")]
    assert [m.name for m in group_members("All", [], "anthropic", subs)] == ["a", "b"]


def test_group_selected_keeps_listed_same_provider_only():
    subs = [c("a"), c("b"), c("d"), c("x", provider="openai")]
    assert [m.name for m in group_members("Selected", ["a", "b", "x"], "anthropic", subs)] == ["a", "b"]


@pytest.mark.parametrize("current, limited, leave, reason", [
    (None, False, True, "subscription deleted"),
    (c("a", "Exhausted", five=100), False, True, "5-hour window at 100 %"),
    (c("a", "Exhausted", five=40, week=100), False, True, "weekly window at 100 %"),
    (c("a", "Reserved", five=85), False, True, "reserve reached"),
    (c("a", "Disconnected"), False, True, "login disconnected"),
    (c("a", five=40), True, True, "usage limit reached in a tab"),
    (c("a", five=40), False, False, ""),
    (c("a", "Unknown"), False, False, ""),
])
def test_triggers(current, limited, leave, reason):
    got = must_leave(current, limited)
    assert (got.leave, got.reason) == (leave, reason)
    assert got.trigger in ({"limit", "exhausted", "reserve", "disconnected", "deleted"} if leave else {""})


def test_sticky_no_flip_flop():
    """After switching a->b, a's reset makes a the best by headroom, but b stays while usable."""
    members = [c("a", five=0), c("b", five=60)]
    assert not must_leave(members[1], False).leave


def test_first_to_reset_when_all_exhausted():
    members = [c("a", "Exhausted", until=T0 + timedelta(hours=2)), c("b", "Reserved", until=T0 + timedelta(hours=1))]
    assert first_to_reset(members, T0).name == "b"
