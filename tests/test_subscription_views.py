"""controller.service.subviews.SubscriptionViews: a namespace's Subscriptions are converted into rotation
candidates and reserves once per object version, not once per box pass (bench/scale.py: a thousand boxes
woken by one reset converted the same hundred objects a thousand times)."""

from __future__ import annotations

import copy

import pytest

from controller.domain.box import candidate_from, reserve_from
from controller.service.subviews import SubscriptionViews

pytestmark = pytest.mark.unit


def sub(name: str, rv: str, *, util: float = 40.0, state: str = "Available", reserve: int = 0,
        uid: str | None = None) -> dict:
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv},
        "spec": {"provider": "anthropic", "reserve": {"fiveHourPercent": reserve}},
        "status": {"state": state, "windows": {"fiveHour": {"utilization": util,
                                                            "resetsAt": "2026-12-01T18:00:00Z"}}},
    }


def direct(subs: list[dict]) -> tuple:
    return tuple(candidate_from(o) for o in subs), {o["metadata"]["name"]: reserve_from(o) for o in subs}


def test_same_as_converting_every_object() -> None:
    subs = [sub(f"s{i}", str(i), util=10.0 * i, reserve=i) for i in range(5)]
    candidates, reserves = SubscriptionViews().of("ns", subs)
    assert (candidates, dict(reserves)) == direct(subs)


def test_a_list_of_unchanged_objects_is_not_converted_again() -> None:
    views = SubscriptionViews()
    subs = [sub(f"s{i}", str(i)) for i in range(100)]
    first = views.of("ns", subs)
    assert views.conversions == 100
    for _ in range(1000):  # a thousand box passes on the same LIST result, or a new LIST of the same versions
        again = views.of("ns", copy.deepcopy(subs[:]) if _ == 0 else list(subs))
    assert views.conversions == 100
    assert again[0] is first[0] and again[1] is first[1]


def test_a_changed_object_is_converted_again_and_only_it() -> None:
    views = SubscriptionViews()
    subs = [sub(f"s{i}", str(i)) for i in range(10)]
    views.of("ns", subs)
    changed = list(subs)
    changed[3] = sub("s3", "99", util=100.0, state="Exhausted")  # a status write: new resourceVersion
    candidates, reserves = views.of("ns", changed)
    assert views.conversions == 11
    assert candidates[3].state == "Exhausted" and candidates[3].five_hour == 100.0
    assert (candidates, dict(reserves)) == direct(changed)


def test_a_recreated_object_with_the_same_version_string_is_converted_again() -> None:
    views = SubscriptionViews()
    views.of("ns", [sub("s0", "5", reserve=0)])
    candidates, reserves = views.of("ns", [sub("s0", "5", reserve=30, uid="another-uid")])
    assert views.conversions == 2 and reserves["s0"].five_hour == 30


def test_objects_without_a_version_are_never_memoized() -> None:
    views = SubscriptionViews()
    bare = sub("s0", "1")
    del bare["metadata"]["resourceVersion"]
    views.of("ns", [bare])
    bare["spec"]["reserve"]["fiveHourPercent"] = 20
    _, reserves = views.of("ns", [bare])
    assert views.conversions == 2 and reserves["s0"].five_hour == 20


def test_removed_objects_are_gone_and_namespaces_are_apart() -> None:
    views = SubscriptionViews()
    views.of("a", [sub("s0", "1"), sub("s1", "2")])
    candidates, reserves = views.of("a", [sub("s1", "2")])
    assert [c.name for c in candidates] == ["s1"] and set(reserves) == {"s1"}
    assert views.conversions == 2  # s1 kept its version: not converted again
    other, _ = views.of("b", [sub("s0", "1", util=90.0)])
    assert other[0].five_hour == 90.0


def test_the_shared_reserves_cannot_be_changed_by_a_caller() -> None:
    _, reserves = SubscriptionViews().of("ns", [sub("s0", "1")])
    with pytest.raises(TypeError):
        reserves["s0"] = None  # type: ignore[index]
