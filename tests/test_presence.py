"""The daemons' existence check is answered from the watch (controller.service.presence), not by a GET of the
object before every pass; a GET only when the watch has not vouched for the object for
`existence_recheck_s` (a watch can miss a DELETED across a re-list) or has never seen it."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import pytest

from controller import constants as C
from controller.handlers.daemons import existence_check
from controller.service.presence import Presence

P = C.AGENTBOX_PLURAL


def box(uid: str, name: str = "box-a") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid}, "spec": {"huge": "x" * 10}}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.unit
def test_the_record_answers_from_the_watch_and_says_when_it_does_not_know() -> None:
    clock = Clock()
    p = Presence(recheck_s=60.0, clock=clock)
    assert p.alive(P, "ns", "box-a", "u1") is None, "never seen: unknown (GET it)"
    p.observe(P, None, box("u1"))  # kopf's listing
    assert p.alive(P, "ns", "box-a", "u1") is True
    assert p.alive(P, "ns", "box-a", "u0") is False, "the name holds another object now"
    assert p.alive(C.SUBSCRIPTION_PLURAL, "ns", "box-a", "u1") is None, "kinds are apart"
    assert p.alive(P, "ns", "box-a", None) is None, "no uid: cannot tell"
    clock.t += 59.0
    assert p.alive(P, "ns", "box-a", "u1") is True
    clock.t += 2.0
    assert p.alive(P, "ns", "box-a", "u1") is None, "not vouched for 61 s: GET it"
    p.confirm(P, "ns", "box-a", "u1")  # the GET found it
    assert p.alive(P, "ns", "box-a", "u1") is True
    p.observe(P, "MODIFIED", box("u1"))
    p.observe(P, "DELETED", box("u1"))
    assert p.alive(P, "ns", "box-a", "u1") is False
    p.confirm(P, "ns", "box-a", "u1")  # a GET answered before the deletion must not revive it
    assert p.alive(P, "ns", "box-a", "u1") is False
    p.observe(P, "ADDED", box("u2"))  # re-created under the same name
    assert p.alive(P, "ns", "box-a", "u2") is True and p.alive(P, "ns", "box-a", "u1") is False
    p.forget(P, "ns", "box-a", "u1")  # the old object's daemon ends: the new one's record stays
    assert p.alive(P, "ns", "box-a", "u2") is True
    p.forget(P, "ns", "box-a", "u2")
    assert p.alive(P, "ns", "box-a", "u2") is None and len(p) == 0
    for junk in (None, "x", {"metadata": {"name": "p"}}, {"metadata": None}):
        p.observe(P, "ADDED", junk)  # type: ignore[arg-type]
    assert len(p) == 0


@pytest.mark.unit
def test_deletion_marks_of_objects_without_a_daemon_do_not_pile_up() -> None:
    clock = Clock()
    p = Presence(recheck_s=1.0, clock=clock)
    for i in range(2000):
        p.observe(P, "DELETED", box(f"u{i}", f"b{i}"))
        clock.t += 0.1
    assert len(p._gone) <= 300  # noqa: SLF001


class _Kube:
    def __init__(self, stored: dict[str, Any] | None) -> None:
        self.stored, self.gets = stored, 0

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.stored


class _Rt:
    def __init__(self, stored: dict[str, Any] | None, clock: Clock) -> None:
        self.kube = _Kube(stored)
        self.presence = Presence(recheck_s=60.0, clock=clock)


@pytest.mark.unit
async def test_the_existence_check_gets_only_what_the_watch_does_not_vouch_for() -> None:
    clock = Clock()
    rt = _Rt(box("u1"), clock)
    alive = existence_check(rt, P, "ns", "box-a", "u1")
    assert await alive() is True and rt.kube.gets == 1, "not seen by the watch yet: one GET"
    for _ in range(5):
        assert await alive() is True
    assert rt.kube.gets == 1, "the GET vouches for recheck_s"
    clock.t += 61.0
    assert await alive() is True and rt.kube.gets == 2
    rt.presence.observe(P, "DELETED", box("u1"))
    assert await alive() is False and rt.kube.gets == 2, "the watch said DELETED: no GET"

    rt = _Rt(box("u2"), clock)  # a GET finding another object of the name
    assert await existence_check(rt, P, "ns", "box-a", "u1")() is False
    rt = _Rt(None, clock)  # a GET finding nothing
    assert await existence_check(rt, P, "ns", "box-a", "u1")() is False
    assert rt.presence.alive(P, "ns", "box-a", "u1") is None, "a miss is not recorded as seen"


# ------------------------------------------------------------------------------------ the real operator
def _box_gets(world: Any, name: str = "box-a", status: int | None = None) -> int:
    """GETs of the one box by the controller (the test's own client is aiohttp's `Python/...`), all or
    those answered with `status`."""
    return sum(1 for e in world.kube.journal if e.method == "GET" and e.path.endswith(f"/{C.AGENTBOX_PLURAL}/{name}")
               and not e.user_agent.startswith("Python/") and status in (None, e.status))


def _stopped(caplog: pytest.LogCaptureFixture, what: str) -> bool:
    return any(r.msg == "%s stopped: the object is gone" and r.args and r.args[0] == what for r in caplog.records)


@pytest.mark.component
async def test_passes_do_not_get_their_box_and_a_deleted_box_stops_its_watcher_at_once(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    """The real operator: passes of a watched box make no GET of the box (the watch vouches for it); the box
    deleted, its watcher stops within seconds (the DELETED event wakes it and says it is gone), again with no
    GET."""
    from harness.world_fixtures import FAST, watcher_passes
    from test_stream_watcher import streaming_box

    from agentbox_sim.world import World, eventually

    caplog.set_level(logging.INFO)
    async with World(tmp_path / "world", FAST.model_copy(update={"stream_rescan_s": 1.0})) as world:
        world.start_operator()
        await streaming_box(world)
        passes = watcher_passes(world, "box-a")
        await eventually(lambda: watcher_passes(world, "box-a") > passes, 10, what="a pass")
        gets, passes = _box_gets(world), watcher_passes(world, "box-a")
        await eventually(lambda: watcher_passes(world, "box-a") >= passes + 3, 15, what="three passes")
        assert _box_gets(world) == gets, "passes answered their existence check from the watch"

        await world.kube.delete_object(C.AGENTBOX_PLURAL, world.namespace, "box-a")
        await eventually(lambda: _stopped(caplog, "Tab watch"), 10, what="the watcher stopped")
        assert _box_gets(world) == gets, "the deletion came from the watch: no GET"


@pytest.mark.component
async def test_a_deletion_the_watch_missed_is_found_by_the_recheck_get(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    """The box is deleted while the watch history is compacted (the operator resumes its watch with "410
    Gone" and re-lists: no DELETED ever comes). Its watcher still stops: after `existence_recheck_s` without
    word from the watch, a pass GETs the box and finds it gone."""
    from harness.world_fixtures import FAST
    from test_stream_watcher import streaming_box

    from agentbox_sim.world import World, eventually

    caplog.set_level(logging.INFO)
    settings = FAST.model_copy(update={"stream_rescan_s": 1.0, "existence_recheck_s": 3.0})
    async with World(tmp_path / "world", settings) as world:
        world.start_operator()
        await streaming_box(world)
        assert _box_gets(world, status=404) == 0
        # No await between the two: the open watch streams never get to send the DELETED.
        await world.kube.delete_object(C.AGENTBOX_PLURAL, world.namespace, "box-a")
        world.kube.expire_watches()
        await eventually(lambda: _stopped(caplog, "Tab watch"), 20, what="the watcher stopped")
        assert _box_gets(world, status=404) >= 1, "found gone by the recheck GET, not told by the watch"
