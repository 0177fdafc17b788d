"""Finalizers and uninstall: the emulator deletes as an API server does (deletionTimestamp, finalizers,
Terminating namespaces), the controller puts no finalizer on its objects (its daemons stop themselves),
and a namespace with boxes goes away whether the controller runs or is gone (docs/operations.md)."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.exceptions import ApiException

from controller import constants as C
from controller.handlers import REGISTRY
from agentbox_sim.kube import KubeEmulator
from agentbox_sim.world import TabSpec, World, claude_login, eventually

NS = "team-a"


def test_no_handler_requires_a_finalizer():
    spawning = REGISTRY._spawning._handlers  # noqa: SLF001 - what kopf reads to add its finalizer
    changing = REGISTRY._changing._handlers  # noqa: SLF001
    assert {h.id for h in spawning} == {"watch-tabs", "read-usage"}
    assert not any(h.requires_finalizer for h in [*spawning, *changing])


def _cm(name: str, ns: str = "default", finalizers: list[str] | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": ns, **({"finalizers": finalizers} if finalizers else {})},
            "data": {"k": "v"}}


async def test_emulator_delete_with_finalizers_marks_then_removes(kube: KubeEmulator, core_v1):
    await asyncio.to_thread(core_v1.create_namespaced_config_map, "default", _cm("held", finalizers=["x.dev/keep"]))
    await asyncio.to_thread(core_v1.delete_namespaced_config_map, "held", "default")
    held = await asyncio.to_thread(core_v1.read_namespaced_config_map, "held", "default")
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:  # no new finalizer on an object being deleted
        await asyncio.to_thread(core_v1.patch_namespaced_config_map, "held", "default",
                                {"metadata": {"finalizers": ["x.dev/keep", "x.dev/more"]}})
    assert err.value.status == 422
    await asyncio.to_thread(core_v1.patch_namespaced_config_map, "held", "default", {"metadata": {"finalizers": None}})
    assert kube.get("v1/configmaps", "default", "held") is None


async def test_emulator_namespace_terminates_after_its_content(kube: KubeEmulator, core_v1):
    await asyncio.to_thread(core_v1.create_namespace, {"metadata": {"name": NS}})
    ns = await asyncio.to_thread(core_v1.read_namespace, NS)
    assert ns.spec.finalizers == ["kubernetes"]
    await asyncio.to_thread(core_v1.create_namespaced_config_map, NS, _cm("held", NS, ["x.dev/keep"]))
    await asyncio.to_thread(core_v1.create_namespaced_config_map, NS, _cm("free", NS))
    await asyncio.to_thread(core_v1.delete_namespace, NS)
    ns = await asyncio.to_thread(core_v1.read_namespace, NS)
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None
    assert kube.get("v1/configmaps", NS, "free") is None
    assert kube.get("v1/configmaps", NS, "held")["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as err:
        await asyncio.to_thread(core_v1.create_namespaced_config_map, NS, _cm("new", NS))
    assert err.value.status == 403 and "being terminated" in err.value.body
    await asyncio.to_thread(core_v1.patch_namespaced_config_map, "held", NS, {"metadata": {"finalizers": None}})
    assert kube.get("v1/namespaces", None, NS) is None


async def _box_world(world: World) -> None:
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a")
    world.start_operator()
    await world.run_pod("box-a", [TabSpec("main", ["sleep", "600"])])
    await eventually(lambda: any(c["type"] == C.COND_READY and c["status"] == "True"
                                 for c in ((world.box("box-a") or {}).get("status") or {}).get("conditions") or []),
                     20, what="box Ready")


def _left(world: World) -> list[tuple[str, str]]:
    return [(r.plural, name) for (r, ns, name) in world.kube._store if ns == NS]  # noqa: SLF001


@pytest.fixture
def ns_world(tmp_path):
    from harness.world_fixtures import FAST
    return World(tmp_path / "world", FAST, namespace=NS)


async def test_namespace_with_boxes_deleted_while_the_controller_runs(ns_world: World, caplog):
    caplog.set_level("INFO")
    async with ns_world as world:
        await _box_world(world)
        box, sub = world.box("box-a"), world.kube.get(C.SUBSCRIPTION_PLURAL, NS, "claude-a")
        assert not box["metadata"].get("finalizers") and not sub["metadata"].get("finalizers")
        await world.delete(f"/api/v1/namespaces/{NS}")
        await eventually(lambda: world.kube.get("v1/namespaces", None, NS) is None, 15,
                         what=f"namespace gone; left: {_left(world)}")
        assert _left(world) == []
        # The daemons noticed their objects are gone and stopped by themselves (no finalizer, no leak).
        # Usually within a second (the deletion wakes them: tests/test_daemon_loop.py); at the latest at
        # their next pass, after a pass in flight (bounded by exec_timeout_s) and the usage interval.
        bound = world.settings.usage_interval_s + world.settings.exec_timeout_s + 5
        await eventually(lambda: {"Tab watch", "Usage read"} <= {
            r.args[0] for r in caplog.records if r.msg == "%s stopped: the object is gone"}, bound,
            what="daemons stopped")


async def test_namespace_with_boxes_deleted_after_the_controller_is_gone(ns_world: World):
    async with ns_world as world:
        await _box_world(world)
        await world.stop_operator()  # helm uninstall
        await world.delete(f"/api/v1/namespaces/{NS}")
        assert world.kube.get("v1/namespaces", None, NS) is None and _left(world) == []


async def test_a_finalizer_left_by_an_older_controller(ns_world: World):
    """Objects still carrying `agentbox.dev/finalizer` (put by versions before this one): the running
    controller removes it; without a controller the documented patch releases them."""
    async with ns_world as world:
        await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
        await world.create(world.sub_path(), {
            "apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND,
            "metadata": {"name": "old", "finalizers": [C.FINALIZER]},
            "spec": {"provider": "anthropic", "credentialsSecretRef": {"name": "claude-login", "key": "credentials.json"}}})
        await world.create(world.sub_path(), {
            "apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND,
            "metadata": {"name": "orphan", "finalizers": [C.FINALIZER]},
            "spec": {"provider": "anthropic", "credentialsSecretRef": {"name": "claude-login", "key": "credentials.json"}}})
        # Controller gone: deleting the namespace leaves it Terminating on the finalized objects.
        await world.delete(f"/api/v1/namespaces/{NS}")
        assert world.kube.namespace_terminating(NS)
        assert {n for _, n in _left(world)} == {"old", "orphan"}
        # docs/operations.md: kubectl patch subscriptions.agentbox.dev orphan --type=merge -p '{"metadata":{"finalizers":null}}'
        await world.patch(world.sub_path("orphan"), {"metadata": {"finalizers": None}})
        assert world.kube.get(C.SUBSCRIPTION_PLURAL, NS, "orphan") is None
        # A running controller removes the finalizer itself (no handler requires it any more).
        world.start_operator()
        await eventually(lambda: world.kube.get("v1/namespaces", None, NS) is None, 15,
                         what=f"namespace gone once the controller released 'old'; left: {_left(world)}")
