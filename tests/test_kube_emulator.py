"""The emulated API server (agentbox_sim.kube) and its pod exec, driven by the controller's exec client
(controller.kube.aexec.AsyncExec).

Everything goes over real HTTP on loopback: the official client (blocking, so through asyncio.to_thread:
the emulator serves on the test's loop), aiohttp for exact content types and watch streams, the exec client
over websockets, and the real kopf operator in its own thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import kubernetes.client
import pytest
import pytest_asyncio
from harness.kube_fixtures import run_operator
from kubernetes.client.rest import ApiException

from controller.kube.aexec import AsyncExec
from controller.kube.exec import ExecError, ExecResult
from agentbox_sim.kube import KubeEmulator, LocalExec, TmuxSockets, parse_label_selector

pytestmark = pytest.mark.component

GROUP, VERSION, PLURAL = "emulator.agentbox.dev", "v1alpha1", "widgets"
WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
PODS = "/api/v1/namespaces/default/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


@pytest.fixture
def crd_paths() -> list[pathlib.Path]:
    return [pathlib.Path(__file__).parent / "fixtures" / "crds" / "widgets.yaml"]


@pytest_asyncio.fixture
async def http(kube: KubeEmulator) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=kube.url) as session:
        yield session


async def call(session: aiohttp.ClientSession, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request; returns (status, parsed JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    async with session.request(method, path, data=data, headers=hdrs) as resp:
        return resp.status, await resp.json(content_type=None)


def widget(name: str, size: int = 3, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget",
            "metadata": {"name": name, **meta}, "spec": {"size": size}}


def pod(name: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "spec": {"containers": [{"name": "box", "image": "x"}]}}


# ------------------------------------------------------------------------------------------ API semantics

async def test_discovery_and_namespace_paths(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    status, core = await call(http, "GET", "/api/v1")
    assert status == 200 and core["groupVersion"] == "v1"
    assert {"namespaces", "pods", "pods/exec", "secrets", "events"} <= {r["name"] for r in core["resources"]}
    status, apis = await call(http, "GET", "/apis")
    assert GROUP in {g["name"] for g in apis["groups"]}
    assert "events.k8s.io" in {g["name"] for g in apis["groups"]}
    status, group = await call(http, "GET", f"/apis/{GROUP}/{VERSION}")
    names = {r["name"]: r for r in group["resources"]}
    assert set(names) == {"widgets", "widgets/status"}
    assert {"list", "watch", "patch"} <= set(names["widgets"]["verbs"]) and names["widgets"]["namespaced"]
    assert group["groupVersion"] == f"{GROUP}/{VERSION}" and names["widgets"]["kind"] == "Widget"
    # Short names belong to the kind, not its status subresource (kmock gave both: kubectl then warned
    # 'short name "abox" could also match lower priority resource agentboxes/status' on every get).
    assert names["widgets"]["shortNames"] == ["wdg"] and "shortNames" not in names["widgets/status"]
    # kmock 0.8 answers 500 here; the emulator parses namespace paths itself.
    status, nss = await call(http, "GET", "/api/v1/namespaces")
    assert status == 200 and [n["metadata"]["name"] for n in nss["items"]] == ["default"]
    status, ns = await call(http, "GET", "/api/v1/namespaces/default")
    assert status == 200 and ns["status"]["phase"] == "Active"
    status, crd = await call(http, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}")
    assert status == 200 and crd["spec"]["group"] == GROUP
    status, _ = await call(http, "GET", "/apis/nope.example.com/v1/things")
    assert status == 404


async def test_create_get_list_with_the_official_client(
        kube: KubeEmulator, custom_api: kubernetes.client.CustomObjectsApi) -> None:
    created = await asyncio.to_thread(
        custom_api.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, widget("w1"))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0 and meta["namespace"] == "default"
    got = await asyncio.to_thread(custom_api.get_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, "w1")
    assert got == created == kube.get(PLURAL, "default", "w1")
    listed = await asyncio.to_thread(custom_api.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["w1"]
    assert int(listed["metadata"]["resourceVersion"]) >= int(meta["resourceVersion"])
    with pytest.raises(ApiException) as exc:
        await asyncio.to_thread(custom_api.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                widget("w1"))
    assert exc.value.status == 409
    with pytest.raises(ApiException) as exc:
        await asyncio.to_thread(custom_api.get_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, "nope")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:  # the namespace must exist
        await asyncio.to_thread(custom_api.create_namespaced_custom_object, GROUP, VERSION, "ghost", PLURAL,
                                widget("w2"))
    assert exc.value.status == 404


async def test_watch_resumes_from_resource_version(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    await call(http, "POST", WIDGETS, widget("before"))
    status, listing = await call(http, "GET", WIDGETS)
    rv = listing["metadata"]["resourceVersion"]
    events: list[tuple[str, str]] = []

    async def watch() -> None:
        async with http.get(WIDGETS, params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "5"}) as resp:
            async for line in resp.content:
                event = json.loads(line)
                events.append((event["type"], event["object"]["metadata"]["name"]))
                if event["type"] == "DELETED":
                    return

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.05)
    await call(http, "POST", WIDGETS, widget("w"))
    await call(http, "PATCH", f"{WIDGETS}/w", {"spec": {"size": 4}}, MERGE)
    await call(http, "DELETE", f"{WIDGETS}/w")
    await asyncio.wait_for(task, 5)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]  # "before" is older than rv

    # Without a resourceVersion, existing objects come first as ADDED; timeoutSeconds ends the stream.
    started = time.monotonic()
    async with http.get(WIDGETS, params={"watch": "true", "timeoutSeconds": "0.3"}) as resp:
        lines = [json.loads(line) async for line in resp.content]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "before")]
    assert 0.25 < time.monotonic() - started < 2


async def test_watch_from_a_trimmed_resource_version_is_gone() -> None:
    async with KubeEmulator([], event_log_size=2) as kube, aiohttp.ClientSession(base_url=kube.url) as http:
        for i in range(8):
            status, _ = await call(http, "POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": f"s{i}"}})
            assert status == 201
        async with http.get("/api/v1/namespaces/default/secrets", params={"watch": "1", "resourceVersion": "1"}) as resp:
            events = [json.loads(line) async for line in resp.content]
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
        assert not kube.server_errors


async def test_stale_resource_version_conflicts(
        kube: KubeEmulator, http: aiohttp.ClientSession, custom_api: kubernetes.client.CustomObjectsApi) -> None:
    _, created = await call(http, "POST", WIDGETS, widget("w"))
    old_rv = created["metadata"]["resourceVersion"]
    status, patched = await call(http, "PATCH", f"{WIDGETS}/w",
                                 {"metadata": {"resourceVersion": old_rv}, "spec": {"size": 5}}, MERGE)
    assert status == 200 and patched["metadata"]["resourceVersion"] != old_rv
    status, body = await call(http, "PATCH", f"{WIDGETS}/w",
                              {"metadata": {"resourceVersion": old_rv}, "spec": {"size": 6}}, MERGE)
    assert status == 409 and body["reason"] == "Conflict"
    stale = dict(created, spec={"size": 7})
    with pytest.raises(ApiException) as exc:
        await asyncio.to_thread(custom_api.replace_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                "w", stale)
    assert exc.value.status == 409
    fresh = dict(kube.get(PLURAL, "default", "w") or {}, spec={"size": 7})
    replaced = await asyncio.to_thread(custom_api.replace_namespaced_custom_object, GROUP, VERSION, "default",
                                       PLURAL, "w", fresh)
    assert replaced["spec"] == {"size": 7} and replaced["metadata"]["generation"] == 3


async def test_failed_json_patch_test_is_422(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", WIDGETS, widget("w"))
    rv = created["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "999999"},
           {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}]
    status, body = await call(http, "PATCH", f"{WIDGETS}/w", ops, JSONPATCH)
    assert status == 422 and body["reason"] == "Invalid"
    ops[0]["value"] = rv
    status, body = await call(http, "PATCH", f"{WIDGETS}/w", ops, JSONPATCH)
    assert status == 200 and body["metadata"]["finalizers"] == ["x/y"]
    status, _ = await call(http, "PATCH", f"{WIDGETS}/w", {"spec": {}}, {"Content-Type": "application/apply-patch+yaml"})
    assert status == 415


async def test_generate_name(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    body = {"metadata": {"generateName": "kopf-event-"}, "reason": "Test", "message": "m",
            "involvedObject": {"kind": "Widget", "name": "w", "namespace": "default"}}
    names = set()
    for _ in range(3):
        status, event = await call(http, "POST", "/api/v1/namespaces/default/events", body)
        assert status == 201
        names.add(event["metadata"]["name"])
    assert len(names) == 3 and all(n.startswith("kopf-event-") and len(n) == len("kopf-event-") + 5 for n in names)
    status, _ = await call(http, "POST", WIDGETS, {"spec": {"size": 1}})
    assert status == 422


async def test_label_selectors(kube: KubeEmulator, http: aiohttp.ClientSession,
                               core_v1: kubernetes.client.CoreV1Api) -> None:
    for name, labels in [("a", {"app": "box", "tier": "x"}), ("b", {"app": "box", "tier": "y"}),
                         ("c", {"app": "other"}), ("d", {})]:
        await call(http, "POST", PODS, pod(name, labels=labels))

    async def names(selector: str) -> list[str]:
        pods = await asyncio.to_thread(core_v1.list_namespaced_pod, "default", label_selector=selector)
        return sorted(p.metadata.name for p in pods.items)

    assert await names("app=box,tier!=y") == ["a"]
    assert await names("app==box") == ["a", "b"]
    assert await names("tier in (x, y),app=box") == ["a", "b"]
    assert await names("app notin (box)") == ["c", "d"]
    assert await names("tier") == ["a", "b"]
    assert await names("!tier") == ["c", "d"]
    assert await names("") == ["a", "b", "c", "d"]
    status, _ = await call(http, "GET", PODS + "?labelSelector=a%20in%20b%20c")
    assert status == 400
    assert parse_label_selector("x!=1")({}) is True


async def test_owner_cascade_and_finalizers(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    _, owner = await call(http, "POST", WIDGETS, widget("owner", finalizers=["emulator.agentbox.dev/f"]))
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "name": "owner",
           "uid": owner["metadata"]["uid"], "controller": True}
    await call(http, "POST", PODS, pod("child-pod", ownerReferences=[ref]))
    await call(http, "POST", "/api/v1/namespaces/default/secrets",
               {"metadata": {"name": "child-secret", "ownerReferences": [ref]}, "stringData": {"token": "t"}})
    await call(http, "POST", PODS, pod("unrelated"))
    assert kube.get("secrets", "default", "child-secret")["data"] == {"token": "dA=="}  # stringData folded

    status, marked = await call(http, "DELETE", f"{WIDGETS}/owner")
    assert status == 200 and marked["metadata"]["deletionTimestamp"]
    assert kube.get("pods", "default", "child-pod") is not None  # the owner still exists
    status, body = await call(http, "PATCH", f"{WIDGETS}/owner", {"metadata": {"finalizers": ["new/one"]}}, MERGE)
    assert status == 422  # no new finalizers while deleting

    status, _ = await call(http, "PATCH", f"{WIDGETS}/owner", {"metadata": {"finalizers": None}}, MERGE)
    assert status == 200
    assert kube.get(PLURAL, "default", "owner") is None
    assert kube.get("pods", "default", "child-pod") is None
    assert kube.get("secrets", "default", "child-secret") is None
    assert kube.get("pods", "default", "unrelated") is not None

    await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "other"}})
    await call(http, "POST", "/api/v1/namespaces/other/pods", pod("p"))
    status, _ = await call(http, "DELETE", "/api/v1/namespaces/other")
    assert status == 200 and kube.objects("pods", "other") == [] and kube.get("namespaces", None, "other") is None


async def test_status_isolation_and_generation(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    body = widget("w")
    body["status"] = {"ignored": True}
    _, created = await call(http, "POST", WIDGETS, body)
    assert "status" not in created and created["metadata"]["generation"] == 1

    _, after = await call(http, "PATCH", f"{WIDGETS}/w", {"status": {"phase": "x"}, "metadata": {"labels": {"a": "b"}}},
                          MERGE)
    assert "status" not in after and after["metadata"]["labels"] == {"a": "b"}
    assert after["metadata"]["generation"] == 1  # metadata-only change

    _, after = await call(http, "PATCH", f"{WIDGETS}/w/status", {"status": {"phase": "Ready"}, "spec": {"size": 9}},
                          MERGE)
    assert after["status"] == {"phase": "Ready"} and after["spec"] == {"size": 3}
    assert after["metadata"]["generation"] == 1

    rv = after["metadata"]["resourceVersion"]
    _, same = await call(http, "PATCH", f"{WIDGETS}/w/status", {"status": {"phase": "Ready"}}, MERGE)
    assert same["metadata"]["resourceVersion"] == rv  # no-op writes do not bump the RV

    _, after = await call(http, "PATCH", f"{WIDGETS}/w", {"spec": {"size": 8}}, MERGE)
    assert after["metadata"]["generation"] == 2 and after["status"] == {"phase": "Ready"}

    replaced = dict(after, status={"phase": "Replaced"}, spec={"size": 0})
    status, after = await call(http, "PUT", f"{WIDGETS}/w/status", replaced)
    assert status == 200 and after["status"] == {"phase": "Replaced"} and after["spec"] == {"size": 8}


async def test_schema_validation(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    status, body = await call(http, "POST", WIDGETS, widget("w", size="two"))  # type: ignore[arg-type]
    assert status == 422 and body["reason"] == "Invalid"
    assert "spec.size" in body["message"] and body["details"]["causes"][0]["field"] == "spec.size"
    status, body = await call(http, "POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"color": "pink"}})
    assert status == 422 and "spec.color" in body["message"] and "'size' is a required property" in body["message"]
    status, _ = await call(http, "POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": 1, "note": None}})
    assert status == 201  # nullable
    status, body = await call(http, "PATCH", f"{WIDGETS}/w", {"spec": {"size": 101}}, MERGE)
    assert status == 422 and kube.get(PLURAL, "default", "w")["spec"]["size"] == 1


async def test_date_time_format_and_list_map_keys_are_enforced(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    """As the API server: `format: date-time` takes only RFC 3339 instants; an `x-kubernetes-list-type: map`
    list refuses two items with the same key."""
    for good in ("2026-03-01T17:05:00Z", "2026-03-01T17:05:00.123+01:00"):
        status, _ = await call(http, "POST", WIDGETS, {**widget("t"), "spec": {"size": 1, "since": good}})
        assert status == 201, good
        await call(http, "DELETE", f"{WIDGETS}/t")
    for bad in ("2026-03-01", "tomorrow", "2026-13-01T00:00:00Z", "2026-03-01T17:05:00"):
        status, body = await call(http, "POST", WIDGETS, {**widget("t"), "spec": {"size": 1, "since": bad}})
        assert status == 422 and body["details"]["causes"][0]["field"] == "spec.since", bad
    parts = [{"name": "a", "count": 1}, {"name": "b"}]
    status, _ = await call(http, "POST", WIDGETS, {**widget("m"), "spec": {"size": 1, "parts": parts}})
    assert status == 201
    status, body = await call(http, "PATCH", f"{WIDGETS}/m", {"spec": {"parts": [*parts, {"name": "a"}]}}, MERGE)
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueDuplicate"
    assert body["details"]["causes"][0]["field"] == "spec.parts[2]"
    assert kube.get(PLURAL, "default", "m")["spec"]["parts"] == parts


async def test_a_deleted_crd_is_no_longer_served_and_its_objects_go(kube: KubeEmulator,
                                                                  http: aiohttp.ClientSession) -> None:
    status, _ = await call(http, "POST", WIDGETS, widget("w"))
    assert status == 201
    status, _ = await call(http, "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}")
    assert status == 200
    status, _ = await call(http, "GET", WIDGETS)
    assert status == 404
    assert not [k for k in kube._store if k[0].plural == PLURAL]


async def test_pods_start_pending_and_the_kubelet_is_played(kube: KubeEmulator, http: aiohttp.ClientSession) -> None:
    _, created = await call(http, "POST", PODS, pod("p"))
    assert created["status"] == {"phase": "Pending"}
    running = await kube.set_pod_phase("default", "p")
    assert running["status"]["phase"] == "Running"
    status, body = await call(http, "PATCH", f"{PODS}/p", {"status": {"phase": "Failed"}}, MERGE)
    assert status == 200 and body["status"]["phase"] == "Running"  # status only through /status
    assert [e.status for e in kube.journal if e.method == "PATCH"] == [200]


# ------------------------------------------------------------------------------------------ pod exec

@pytest_asyncio.fixture
async def box(kube: KubeEmulator, http: aiohttp.ClientSession) -> str:
    """A running pod named "box" with a container "box"."""
    await call(http, "POST", PODS, pod("box"))
    await kube.set_pod_phase("default", "box")
    return "box"


@pytest_asyncio.fixture
async def aexec(k8s_client: kubernetes.client.ApiClient) -> AsyncIterator[AsyncExec]:
    """The controller's exec client, configured from the emulator's kubeconfig."""
    client = AsyncExec(k8s_client.configuration)
    try:
        yield client
    finally:
        await client.aclose()


async def test_exec_drives_a_tmux_server(kube: KubeEmulator, box: str, aexec: AsyncExec,
                                         tmux_sockets: TmuxSockets, local_exec: LocalExec) -> None:
    run = lambda *argv: aexec.run("default", box, "box", list(argv))  # noqa: E731
    assert (await run("tmux", "new-session", "-d", "-s", "agentbox", "-x", "120", "-y", "30")).rc == 0
    assert tmux_sockets("default", box).exists()
    assert (await run("tmux", "send-keys", "-t", "agentbox", "echo hello-from-the-$((6*7))-tab", "Enter")).rc == 0
    deadline = time.monotonic() + 5
    while True:
        shot = await run("tmux", "capture-pane", "-p", "-t", "agentbox")
        if "hello-from-the-42-tab" in shot.stdout or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert "hello-from-the-42-tab" in shot.stdout
    cwd = await run("pwd")
    assert cwd.stdout.strip() == str(local_exec.workdir("default", box))
    missing = await run("tmux", "has-session", "-t", "nope")
    assert missing.rc == 1 and "nope" in missing.stderr
    assert [r.argv[0] for r in kube.exec_journal][:2] == ["tmux", "tmux"]
    assert kube.exec_journal[0].protocol == "v5.channel.k8s.io"

    await kube.delete_object("pods", "default", box)  # the kubelet kills what ran in the pod
    assert not tmux_sockets("default", box).exists()


async def test_exec_rc_stdin_and_errors(kube: KubeEmulator, box: str, http: aiohttp.ClientSession,
                                        aexec: AsyncExec) -> None:
    failing = await aexec.run("default", box, "box", ["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert failing == ExecResult("out\n", "err\n", 7)
    assert kube.exec_journal[-1].rc == 7
    upper = await aexec.run("default", box, "box", ["tr", "a-z", "A-Z"], stdin="secret-ish text")
    assert upper == ExecResult("SECRET-ISH TEXT", "", 0)
    assert (await aexec.run("default", box, "box", ["no-such-binary-xyz"])).rc == 127

    with pytest.raises(ExecError) as exc:
        await aexec.run("default", "ghost", "box", ["true"])
    assert exc.value.status == 404 and exc.value.reason == "handshake"
    with pytest.raises(ExecError) as exc:
        await aexec.run("default", box, "wrong-container", ["true"])
    assert exc.value.status == 400
    await call(http, "POST", PODS, pod("pending"))
    with pytest.raises(ExecError) as exc:
        await aexec.run("default", "pending", "box", ["true"])
    assert exc.value.status == 400
    with pytest.raises(TypeError):
        await aexec.run("default", box, "box", "echo hi")  # type: ignore[arg-type]
    with pytest.raises(ExecError) as exc:
        await aexec.run("default", box, "box", ["sleep", "5"], timeout=0.3)
    assert exc.value.reason == "timeout"


async def test_a_client_gone_before_its_exec_upgrade_is_a_normal_end(
        kube: KubeEmulator, box: str, aexec: AsyncExec, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that gave up while its exec was starting (a thousand execs at once) makes the upgrade fail to
    be written ("Cannot write to closing transport"): a real API server logs one line; the emulator must not
    answer it as its own failure (500, traceback, `server_errors`, which fails every test)."""
    upgrade = kube._serve_exec_upgraded

    async def client_gone_first(raw: Any, *args: Any) -> Any:
        raw.transport.close()  # the client went away before the upgrade is written
        return await upgrade(raw, *args)

    monkeypatch.setattr(kube, "_serve_exec_upgraded", client_gone_first)
    caplog.set_level(logging.INFO, logger="agentbox.sim.kube")
    with pytest.raises(ExecError):
        await aexec.run("default", box, "box", ["true"], timeout=5)
    assert kube.server_errors == []
    assert "emulator failure" not in caplog.text and "Traceback" not in caplog.text
    # One line per request, naming it (in a full run the operator's log redactor, installed by earlier
    # tests, may have masked the path: "[redacted]"). aiohttp sends an idempotent GET a second time when the
    # server dropped it, so the client may have made two requests: each is journaled as unanswered (0).
    lines = [r.getMessage() for r in caplog.records if r.name == "agentbox.sim.kube"]
    gone = [e for e in kube.journal if e.path.endswith(f"/pods/{box}/exec")]
    assert gone and [e.status for e in gone] == [0] * len(gone) and len(lines) == len(gone), (lines, gone)
    assert set(lines) <= {f"client went away during GET /api/v1/namespaces/default/pods/{box}/exec",
                          "client went away during GET [redacted]"}, lines
    monkeypatch.undo()
    assert (await aexec.run("default", box, "box", ["echo", "ok"])).stdout == "ok\n"


async def test_exec_logs_and_errors_hold_no_output_or_arguments(
        kube: KubeEmulator, box: str, aexec: AsyncExec, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="agentbox.exec")
    await aexec.run("default", box, "box", ["sh", "-c", "echo TOKEN-OUT; echo TOKEN-ERR >&2", "TOKEN-ARG"])
    with pytest.raises(ExecError) as exc:
        await aexec.run("default", "ghost", "box", ["printf", "TOKEN-ARG2"])
    text = caplog.text + str(exc.value) + repr(exc.value)
    assert "TOKEN" not in text
    assert "default/box" in caplog.text and "argv0=sh" in caplog.text and "rc=0" in caplog.text
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


async def test_concurrent_execs_each_get_their_own_output(kube: KubeEmulator, box: str, aexec: AsyncExec,
                                                        core_v1: kubernetes.client.CoreV1Api) -> None:
    """Forty execs at once over one connection pool: each gets its own command's output and exit status,
    the emulator journals forty commands, and the API keeps serving REST requests meanwhile."""
    started = time.monotonic()
    results = await asyncio.gather(*(aexec.run("default", box, "box", ["echo", str(i)]) for i in range(40)))
    elapsed = time.monotonic() - started
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(40)]
    assert sorted(int(r.argv[1]) for r in kube.exec_journal if r.rc == 0) == list(range(40))
    pods = await asyncio.to_thread(core_v1.list_namespaced_pod, "default")
    assert [p.metadata.name for p in pods.items] == ["box"]
    assert aexec.calls == 40 and aexec.open_streams == 0
    logging.getLogger(__name__).info("40 concurrent execs took %.2fs", elapsed)


def test_the_emulator_serves_exec_from_its_own_thread(tmp_path: pathlib.Path) -> None:
    """The emulator on a loop in another thread (as the operator tests run it) serves an exec client on
    this thread's loop: nothing in it is bound to the caller's loop."""
    sockets = TmuxSockets()
    loop = asyncio.new_event_loop()
    kube = KubeEmulator([], exec_handler=LocalExec(tmp_path, sockets), require_running=False)
    thread = __import__("threading").Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(kube.start(), loop).result(5)
        asyncio.run_coroutine_threadsafe(kube.create_object("pods", pod("p", namespace="default")), loop).result(5)
        client = kubernetes.config.new_client_from_config(config_file=str(kube.write_kubeconfig(tmp_path / "kc")))

        async def run() -> ExecResult:
            aexec = AsyncExec(client.configuration)
            try:
                return await aexec.run("default", "p", "box", ["echo", "threaded"])
            finally:
                await aexec.aclose()
        try:
            result = asyncio.run(run())
        finally:
            client.close()
        assert result == ExecResult("threaded\n", "", 0)
    finally:
        asyncio.run_coroutine_threadsafe(kube.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
        sockets.close()


# ------------------------------------------------------------------------------------------ kopf

async def test_real_kopf_operator_against_the_emulator(
        kube: KubeEmulator, kubeconfig: pathlib.Path, http: aiohttp.ClientSession) -> None:
    registry = kopf.OperatorRegistry()
    deleted: list[str] = []

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="double")
    def double(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
        patch.status["doubled"] = spec["size"] * 2
        kopf.info(body, reason="Doubled", message="size doubled")  # log lines are not Events in kopf 1.45

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, id="farewell")
    def farewell(name: str, **_: Any) -> None:
        deleted.append(name)

    started = time.monotonic()
    async with run_operator(registry):
        status, _ = await call(http, "POST", WIDGETS, widget("w", size=21))
        assert status == 201
        obj = await kube.wait_for(PLURAL, "default", "w",
                                  lambda o: bool(o and (o.get("status") or {}).get("doubled") == 42), timeout=15)
        assert obj is not None and obj["metadata"].get("finalizers")  # kopf's finalizer (for the delete handler)
        ready = time.monotonic() - started
        await kube.wait_until(lambda: any(e.get("reason") == "Doubled" for e in kube.objects("v1/events")))
        await call(http, "DELETE", f"{WIDGETS}/w")
        await kube.wait_for(PLURAL, "default", "w", lambda o: o is None, timeout=15)
    total = time.monotonic() - started
    assert deleted == ["w"]
    status_patches = [e for e in kube.journal if e.method == "PATCH" and e.path.endswith("/w/status")]
    assert status_patches and all(e.status == 200 for e in status_patches)
    assert any(e.method == "POST" and e.path.endswith("/events") and e.status == 201 for e in kube.journal)
    assert any(e["metadata"]["name"].startswith("kopf-event-") for e in kube.objects("v1/events"))
    assert not [e for e in kube.journal if (e.status or 0) >= 500]
    logging.getLogger(__name__).info("kopf: status patched after %.2fs, total with stop %.2fs", ready, total)


async def test_exec_output_is_bounded_while_it_arrives(kube: KubeEmulator, box: str, aexec: AsyncExec) -> None:
    """A box owns the binaries it runs: a `tmux` that prints 32 MiB must not reach the controller's
    memory. The bound counts stdout and stderr together, frame by frame (issue 9, finding 6)."""
    big = ["sh", "-c", "head -c 33554432 /dev/zero | tr '\\0' x"]
    with pytest.raises(ExecError) as exc:
        await aexec.run("default", box, "box", big, max_output=256 * 1024)
    assert exc.value.reason == "output_too_large" and "33554432" not in str(exc.value)
    with pytest.raises(ExecError) as exc:
        await aexec.run("default", box, "box",
                        ["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"],
                        max_output=300_000)
    assert exc.value.reason == "output_too_large"
    fits = await aexec.run("default", box, "box", ["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' y"],
                           max_output=300_000)
    assert fits.rc == 0 and fits.stdout == "y" * 200000


async def test_the_api_server_sees_one_event_whose_count_is_patched(kube, k8s_client):
    """The Recorder against the emulated API server through the controller's REST transport (configured
    from the official client's Configuration): one Event object per (object, type, reason, message);
    repeats patch its count; a restarted recorder counts on."""
    from controller.events import ObjectRef, Recorder
    from controller.kube.objects import Kube
    from controller.kube.rest import Rest

    rest = Rest(k8s_client.configuration)
    store = Kube(rest)
    ref = ObjectRef("agentbox.dev/v1alpha1", "AgentBox", "default", "box-a", "uid-9")
    rec = Recorder(store, None, refresh_s=0.05)
    for _ in range(5):
        rec.post(ref, "Warning", "Stalled", "Tab main: no progress")

    def stored() -> list[dict[str, Any]]:
        return kube.objects("v1/events", "default")
    deadline = asyncio.get_running_loop().time() + 10
    while not (stored() and stored()[0].get("count") == 5):
        assert asyncio.get_running_loop().time() < deadline, stored()
        await asyncio.sleep(0.05)
    await rec.aclose()
    again = Recorder(store, None)
    again.post(ref, "Warning", "Stalled", "Tab main: no progress")
    await again.aclose()
    await rest.aclose()
    (event,) = stored()
    assert event["count"] == 6 and event["involvedObject"]["uid"] == "uid-9"
    assert {e.method for e in kube.journal if "/events" in e.path} <= {"POST", "GET", "PATCH"}


# ------------------------------------------------------------------------------------------ Leases, partitions

async def test_two_candidates_cannot_both_take_one_lease(kube: KubeEmulator, k8s_client: kubernetes.client.ApiClient):
    """Leader election relies on the API server's optimistic concurrency: of two candidates that create the
    same Lease, one gets 409 AlreadyExists; of two that replace the same version they read, one gets 409
    Conflict. Played with the Kubernetes client's own LeaseLock, as controller/kube/election.py uses it."""
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    def candidate(identity: str) -> LeaseLock:
        lock = LeaseLock("ctl", "default", identity)
        lock.api_instance = kubernetes.client.CoordinationV1Api(k8s_client)
        return lock

    def record(identity: str) -> LeaderElectionRecord:
        now = "2026-05-01 10:00:00.000000+00:00"
        return LeaderElectionRecord(identity, "10", now, now)

    a, b = candidate("a"), candidate("b")
    assert await asyncio.to_thread(a.create, "ctl", "default", record("a")) is True
    assert await asyncio.to_thread(b.create, "ctl", "default", record("b")) is False, "the Lease exists: 409"
    for lock in (a, b):  # both read the same version...
        found, _ = await asyncio.to_thread(lock.get, "ctl", "default")
        assert found
    won = [await asyncio.to_thread(lock.update, "ctl", "default", record(lock.identity)) for lock in (b, a)]
    assert won == [True, False], "...and only the first replace of that version wins; the second gets 409"
    assert (kube.get("coordination.k8s.io/v1/leases", "default", "ctl") or {})["spec"]["holderIdentity"] == "b"
    conflicts = [e for e in kube.journal if e.method == "PUT" and e.status == 409]
    assert len(conflicts) == 1


async def test_a_partition_cuts_one_listener_only(kube: KubeEmulator) -> None:
    """Each client may get its own listener; a partition cuts that one (reset: the connection is dropped;
    hang: no answer while it lasts), the journal tells the listeners apart, the others are served."""
    other = await kube.add_port()
    other_port = int(other.rsplit(":", 1)[1])
    main_port = int(kube.url.rsplit(":", 1)[1])
    async with aiohttp.ClientSession(base_url=kube.url) as main, aiohttp.ClientSession(base_url=other) as side:
        assert (await call(side, "GET", "/api/v1/namespaces/default"))[0] == 200
        kube.partition(other_port, "reset")
        with pytest.raises(aiohttp.ClientError):
            await call(side, "GET", "/api/v1/namespaces/default")
        assert (await call(main, "GET", "/api/v1/namespaces/default"))[0] == 200
        kube.partition(other_port, "hang")
        hung = asyncio.ensure_future(call(side, "GET", "/api/v1/namespaces/default"))
        await asyncio.sleep(0.3)  # a request that must NOT complete: nothing to poll for but its absence
        assert not hung.done(), "a hanging partition gives no answer"
        kube.partition(other_port, None)
        assert (await hung)[0] == 200, "healed: the held request goes through (as TCP retransmits would)"
    ports = [(e.port, e.status) for e in kube.journal if e.path == "/api/v1/namespaces/default"]
    # (aiohttp retries a GET once when a reused connection is reset: one or two cut entries)
    assert (other_port, 0) in ports and {port for port, status in ports if status == 0} == {other_port}, ports
    assert [e for e in ports if e[1] != 0] == [(other_port, 200), (main_port, 200), (other_port, 200)], ports


async def test_a_niced_pod_runs_its_commands_and_its_tmux_server_niced(tmp_path: pathlib.Path) -> None:
    """`LocalExec.nice` (a bench's: the boxes stand on other nodes) applies to every command run in a pod,
    and to the tmux server a command starts (its panes inherit it); 0 runs them as they are."""
    sockets = TmuxSockets()
    try:
        plain = LocalExec(tmp_path / "pods", sockets)
        base = int((await plain("default", "p", "box", ["nice"], None))[0])
        niced = LocalExec(tmp_path / "pods", sockets)
        niced.nice = 5
        out, _, rc = await niced("default", "p", "box", ["nice"], None)
        assert rc == 0 and int(out) == min(base + 5, 19)
        assert (await niced("default", "p", "box", ["no-such-binary"], None))[2] == 127
        assert (await niced("default", "p", "box", ["tmux", "new-session", "-d", "-s", "s", "sh"], None))[2] == 0
        pid = int((await plain("default", "p", "box", ["tmux", "display-message", "-p", "#{pane_pid}"], None))[0])
        assert int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) == min(base + 5, 19)
    finally:
        sockets.close()
