"""A watcher pass on the live stream reads its pod from the pod watch (controller.service.podcache) instead of
a GET, and only then: with no stream, a stream down, a stream attached to another pod, or a pod the watch has
not delivered, it reads the pod with a GET; ownership is checked on either the same way."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from controller.service.podcache import WatchedPods
from controller.service.tabs import BoxWatcher


def pod(uid: str, rv: str, phase: str = "Running", owner: str = "box-uid") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "box-a", "uid": uid, "resourceVersion": rv,
                         "ownerReferences": [{"uid": owner, "controller": True}]},
            "status": {"phase": phase}}


@pytest.mark.unit
def test_the_store_keeps_the_latest_body_of_each_pod() -> None:
    pods = WatchedPods()
    pods.observe(None, pod("u1", "5"))  # kopf's initial listing
    assert pods.get("ns", "box-a", "u1")["metadata"]["resourceVersion"] == "5"
    pods.observe("MODIFIED", pod("u1", "7", phase="Failed"))
    pods.observe("MODIFIED", pod("u1", "6"))  # an older event never replaces a newer body
    assert pods.get("ns", "box-a", "u1")["status"]["phase"] == "Failed"
    assert pods.get("ns", "box-a", "u2") is None, "another pod of the same name is not this one"
    pods.observe("ADDED", pod("u2", "9"))  # replaced under the same name
    assert pods.get("ns", "box-a", "u1") is None and pods.get("ns", "box-a", "u2") is not None
    pods.observe("DELETED", pod("u1", "10"))  # the old pod's deletion does not remove the new one
    assert pods.get("ns", "box-a", "u2") is not None
    pods.observe("DELETED", pod("u2", "11"))
    assert pods.get("ns", "box-a", "u2") is None and len(pods) == 0
    for junk in (None, "x", {"metadata": {"name": "p"}}, {"metadata": None}):
        pods.observe("ADDED", junk)  # type: ignore[arg-type]
    assert len(pods) == 0


class Kube:
    def __init__(self, stored: dict[str, Any] | None) -> None:
        self.stored, self.gets = stored, 0

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.stored


def watcher(stored: dict[str, Any] | None, cached: dict[str, Any] | None, stream_pod: str | None,
            connected: bool) -> BoxWatcher:
    w = BoxWatcher.__new__(BoxWatcher)
    w.namespace, w.name = "ns", "box-a"
    w.rt = SimpleNamespace(kube=Kube(stored), pods=WatchedPods())  # type: ignore[assignment]
    if cached is not None:
        w.rt.pods.observe("ADDED", cached)
    w.stream = SimpleNamespace(connected=connected) if stream_pod else None  # type: ignore[assignment]
    w._stream_pod = stream_pod
    return w


@pytest.mark.unit
@pytest.mark.parametrize("case, cached, stream_pod, connected, gets", [
    ("stream attached to the watched pod", pod("u1", "5"), "u1", True, 0),
    ("no stream", pod("u1", "5"), None, False, 1),
    ("stream down", pod("u1", "5"), "u1", False, 1),
    ("the watch has not delivered the pod", None, "u1", True, 1),
    ("the watch holds another pod of that name", pod("u2", "8"), "u1", True, 1),
])
def test_a_pass_reads_its_pod_from_the_watch_only_while_its_stream_proves_that_pod(
        case: str, cached: dict | None, stream_pod: str | None, connected: bool, gets: int) -> None:
    stored = pod("u1", "6")
    w = watcher(stored, cached, stream_pod, connected)
    got = asyncio.run(w._read_pod())
    assert w.rt.kube.gets == gets, case
    assert got is (cached if gets == 0 else stored), case


@pytest.mark.unit
def test_a_deleted_pod_falls_back_to_a_get() -> None:
    """The watch said DELETED while the stream has not noticed yet: the GET answers (here: gone)."""
    w = watcher(None, pod("u1", "5"), "u1", True)
    w.rt.pods.observe("DELETED", pod("u1", "6"))
    assert asyncio.run(w._read_pod()) is None and w.rt.kube.gets == 1


@pytest.mark.component
async def test_on_the_stream_passes_read_no_pod_and_a_deleted_pod_is_read_again(tmp_path) -> None:
    """The real operator on the live stream: passes of a box whose stream is attached make no pod GET (the
    pod watch has it); the pod deleted (the stream ends, the watch says DELETED), the next pass reads it
    with a GET, finds it gone and creates the box's pod again."""
    from harness.world_fixtures import FAST, watcher_passes
    from test_stream_watcher import streaming_box

    from agentbox_sim.world import World, eventually

    async with World(tmp_path / "world", FAST.model_copy(update={"tmux_stream": True, "stream_rescan_s": 1.0})) as world:
        world.start_operator()
        await streaming_box(world)

        def pod_gets() -> int:
            return sum(1 for e in world.kube.journal if e.method == "GET" and e.path.endswith("/pods/box-a")
                       and not e.user_agent.startswith("Python/"))
        # the pass that attached the stream read the pod; from the next one on, the watch has it
        passes = watcher_passes(world, "box-a")
        await eventually(lambda: watcher_passes(world, "box-a") > passes, 10, what="a pass")
        gets, passes = pod_gets(), watcher_passes(world, "box-a")
        await eventually(lambda: watcher_passes(world, "box-a") >= passes + 3, 15, what="three passes")
        assert pod_gets() == gets, "passes on the attached stream read the pod from the watch"

        old_uid = world.kube.get("v1/pods", world.namespace, "box-a")["metadata"]["uid"]
        await world.kube.delete_object("v1/pods", world.namespace, "box-a")
        await eventually(lambda: (world.kube.get("v1/pods", world.namespace, "box-a") or {}).get(
            "metadata", {}).get("uid") not in (None, old_uid), 20, what="the pod created again")
        assert pod_gets() > gets, "with the stream gone the pass read its pod with a GET"
