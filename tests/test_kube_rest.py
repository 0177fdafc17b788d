"""The controller's Kubernetes REST transport (controller.kube.rest) and Kube over it, against the emulator.

Over real HTTP on loopback: results as the Kube API documents them (404 -> None, 409 on a stale
resourceVersion), the content types a real API server requires, the bearer token re-read from the service
account's token file as the official client's in-cluster configuration does, error messages and logs free
of the token, and one session (one connection pool) for every request of the process, exec included.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import certifi
import kubernetes.client
import pytest
import pytest_asyncio
from kubernetes.config import incluster_config

from agentbox_sim.kube import KubeEmulator
from controller import constants as C
from controller.kube.aexec import AsyncExec
from controller.kube.objects import Kube, NotOwned, make_box_secret
from controller.kube.rest import MERGE_PATCH, KubeApiError, Rest

pytestmark = pytest.mark.component

NS = "default"
BOXES = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{NS}/{C.AGENTBOX_PLURAL}"


def _cfg(url: str) -> Any:
    cfg = kubernetes.client.Configuration()
    cfg.host = url
    return cfg


@pytest_asyncio.fixture
async def rest(kube: KubeEmulator) -> AsyncIterator[Rest]:
    transport = Rest(_cfg(kube.url), max_requests=4)
    try:
        yield transport
    finally:
        await transport.aclose()


async def _box(rest: Rest, name: str = "box-a") -> dict[str, Any]:
    body = {"apiVersion": C.API_VERSION, "kind": C.AGENTBOX_KIND, "metadata": {"name": name},
            "spec": {"agent": "claude-code", "template": {"spec": {"containers": [{"name": "box", "image": "x"}]}}}}
    return await rest.request("POST", BOXES, body=body)


async def test_reads_of_absent_objects_are_none_and_writes_say_what_happened(kube: KubeEmulator, rest: Rest) -> None:
    k = Kube(rest)
    assert await k.get_pod(NS, "nope") is None
    assert await k.get_custom(C.AGENTBOX_PLURAL, NS, "nope") is None
    assert await k.get_secret_value(NS, "nope", "k") == (False, None)
    assert await k.read_event_count(NS, "nope") is None
    await k.patch_status(C.AGENTBOX_PLURAL, NS, "nope", {"phase": "Running"})  # deleted meanwhile: ignored
    await k.patch_event(NS, "nope", {"count": 2})  # expired Event: ignored
    assert await k.patch_status_at(C.AGENTBOX_PLURAL, NS, "nope", {"phase": "Running"}, "1") is True
    assert await k.delete_pod(NS, "nope", "some-uid") is False
    with pytest.raises(KubeApiError) as err:  # annotations of a missing object are an error
        await k.patch_annotations(C.AGENTBOX_PLURAL, NS, "nope", {"a": "b"})
    assert (err.value.status, err.value.reason) == (404, "NotFound")
    assert str(err.value) == (f"PATCH /apis/{C.GROUP}/{C.VERSION}/namespaces/{NS}/agentboxes/nope: "
                              "HTTP 404 NotFound")

    box = await _box(rest)
    assert (await k.get_custom(C.AGENTBOX_PLURAL, NS, "box-a"))["metadata"]["uid"] == box["metadata"]["uid"]
    assert [b["metadata"]["name"] for b in await k.list_custom(C.AGENTBOX_PLURAL, NS)] == ["box-a"]
    await k.patch_annotations(C.AGENTBOX_PLURAL, NS, "box-a", {"agentbox.dev/x": "1"})
    await k.patch_annotations(C.AGENTBOX_PLURAL, NS, "box-a", {"agentbox.dev/x": None})  # None removes
    assert "agentbox.dev/x" not in (kube.get(C.AGENTBOX_PLURAL, NS, "box-a")["metadata"].get("annotations") or {})

    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "box-a.1", "namespace": NS},
             "involvedObject": {"kind": C.AGENTBOX_KIND, "name": "box-a", "namespace": NS},
             "reason": "Test", "message": "m", "type": "Normal", "count": 1}
    assert await k.create_event(NS, event) is True
    assert await k.create_event(NS, event) is False  # exists: 409
    await k.patch_event(NS, "box-a.1", {"count": 3})
    assert await k.read_event_count(NS, "box-a.1") == 3
    # Every write used a patch type a real API server accepts for its kind (merge patch throughout).
    patches = [e for e in kube.journal if e.method == "PATCH"]
    assert patches and {e.content_type for e in patches} == {MERGE_PATCH}


async def test_status_compare_then_write_gets_false_on_a_stale_resource_version(kube: KubeEmulator, rest: Rest) -> None:
    k = Kube(rest)
    box = await _box(rest)
    rv = box["metadata"]["resourceVersion"]
    out = await k.patch_status_at(C.AGENTBOX_PLURAL, NS, "box-a", {"phase": "Pending"}, rv)
    assert isinstance(out, dict) and out["status"]["phase"] == "Pending"
    assert out["metadata"]["resourceVersion"] != rv
    # Another writer came first: the old resourceVersion is stale -> 409 -> False, nothing written.
    assert await k.patch_status_at(C.AGENTBOX_PLURAL, NS, "box-a", {"phase": "Failed"}, rv) is False
    assert kube.get(C.AGENTBOX_PLURAL, NS, "box-a")["status"]["phase"] == "Pending"
    fresh = out["metadata"]["resourceVersion"]
    assert (await k.patch_status_at(C.AGENTBOX_PLURAL, NS, "box-a", {"phase": "Failed"}, fresh))["status"] == \
        {"phase": "Failed"}


async def test_secrets_and_pods_are_written_only_when_owned_and_changed(kube: KubeEmulator, rest: Rest) -> None:
    k = Kube(rest)
    box = await _box(rest)
    secret = make_box_secret(box, "credentials.json", '{"t": 1}')
    assert await k.ensure_secret(secret) == "created"
    assert await k.ensure_secret(secret) == "unchanged"
    assert await k.get_secret_value(NS, "box-a-credentials", "credentials.json") == (True, '{"t": 1}')
    changed = make_box_secret(box, "credentials.json", '{"t": 2}')
    assert await k.ensure_secret(changed) == "updated"
    assert await k.get_secret_value(NS, "box-a-credentials", "other") == (True, None)
    await k.patch_secret_data(NS, "box-a-credentials", {"other": base64.b64encode(b"x").decode()})
    assert await k.get_secret_value(NS, "box-a-credentials", "credentials.json") == (True, '{"t": 2}')  # kept
    other = {**box, "metadata": {**box["metadata"], "uid": "another-uid"}}
    with pytest.raises(NotOwned):  # the stored Secret is controlled by box-a's UID, not this one
        await k.ensure_secret(make_box_secret(other, "credentials.json", "{}"))

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "box-a", "namespace": NS, "ownerReferences": secret["metadata"]["ownerReferences"]},
           "spec": {"containers": [{"name": "box", "image": "x"}]}}
    assert await k.ensure_pod(pod) == "created"
    assert await k.ensure_pod(pod) == "exists"
    stored = await k.get_owned_pod(NS, "box-a", box["metadata"]["uid"], "box-a")
    assert stored is not None and stored["metadata"]["name"] == "box-a"
    with pytest.raises(NotOwned):
        await k.get_owned_pod(NS, "box-a", "another-uid", "box-a")
    assert await k.delete_pod(NS, "box-a", "not-its-uid") is False  # UID precondition: 409, not deleted
    assert kube.get("v1/pods", NS, "box-a") is not None
    assert await k.delete_pod(NS, "box-a", stored["metadata"]["uid"]) is True
    assert kube.get("v1/pods", NS, "box-a") is None


async def test_the_emulator_refuses_a_strategic_merge_patch_of_a_custom_resource(kube: KubeEmulator, rest: Rest) -> None:
    await _box(rest)
    path = f"{BOXES}/box-a"
    with pytest.raises(KubeApiError) as err:
        await rest.request("PATCH", path, body={"metadata": {"labels": {"a": "b"}}},
                           content_type="application/strategic-merge-patch+json")
    assert (err.value.status, err.value.reason) == (415, "UnsupportedMediaType")
    # Built-in kinds take it (their schema has patch strategies).
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}}
    await rest.request("POST", f"/api/v1/namespaces/{NS}/secrets", body=secret)
    await rest.request("PATCH", f"/api/v1/namespaces/{NS}/secrets/s", body={"metadata": {"labels": {"a": "b"}}},
                       content_type="application/strategic-merge-patch+json")


async def test_the_service_account_token_is_re_read_when_the_kubelet_rotates_it(
        kube: KubeEmulator, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-one")
    host, port = kube.url.removeprefix("http://").split(":")
    cfg = kubernetes.client.Configuration()
    loader = incluster_config.InClusterConfigLoader(
        str(token_file), certifi.where(),
        environ={incluster_config.SERVICE_HOST_ENV_NAME: host, incluster_config.SERVICE_PORT_ENV_NAME: port})
    loader.load_and_set(cfg)  # what load_incluster_config does in a pod, with its token refresh hook
    rest = Rest(cfg)
    rest.host = kube.url  # the loader's host is https://; the emulator serves plain HTTP
    kube.bearer_tokens = {"tok-one"}
    caplog.set_level(logging.DEBUG)
    try:
        k = Kube(rest)
        assert await k.get_pod(NS, "nope") is None
        # The kubelet rotates the token; the API server stops accepting the old one.
        token_file.write_text("tok-two")
        kube.bearer_tokens = {"tok-two"}
        loader.token_expires_at = datetime.datetime.now()  # the loader's re-read period (one minute) is over
        assert await k.get_pod(NS, "nope") is None  # sent with the new token: not 401
        # A token the API server does not take: an error naming method, path and status, never the token.
        kube.bearer_tokens = {"tok-three"}
        with pytest.raises(KubeApiError) as err:
            await k.get_pod(NS, "nope")
        assert (err.value.status, err.value.reason) == (401, "Unauthorized")
        assert "tok-" not in str(err.value) and "tok-" not in repr(err.value.args)
        assert err.value.__cause__ is None and err.value.__context__ is None
        assert "tok-" not in caplog.text
    finally:
        await rest.aclose()


async def test_error_messages_hold_no_server_text_and_no_answer_is_status_0(kube: KubeEmulator, rest: Rest) -> None:
    await _box(rest)
    # A 422 whose Status message echoes what was sent: the exception carries the reason, not the message.
    with pytest.raises(KubeApiError) as err:
        await rest.request("PATCH", f"{BOXES}/box-a", body={"spec": {"agent": "sk-ant-oat01-SECRET"}},
                           content_type=MERGE_PATCH)
    assert (err.value.status, err.value.reason) == (422, "Invalid") and "SECRET" not in str(err.value)
    dead = Rest(_cfg("http://127.0.0.1:1"))
    try:
        with pytest.raises(KubeApiError) as err:
            await Kube(dead).get_pod(NS, "x")
        assert err.value.status == 0 and err.value.reason == "ClientConnectorError"
        assert str(err.value) == f"GET /api/v1/namespaces/{NS}/pods/x: no answer (ClientConnectorError)"
    finally:
        await dead.aclose()


async def test_one_session_one_pool_for_rest_and_exec(kube: KubeEmulator, rest: Rest) -> None:
    k = Kube(rest)
    await _box(rest)
    first = len(kube.journal)
    # 200 simultaneous reads with at most 4 in flight: they reuse 4 keep-alive connections.
    await asyncio.gather(*(k.get_custom(C.AGENTBOX_PLURAL, NS, "box-a") for _ in range(200)))
    await asyncio.gather(*(k.get_pod(NS, f"p{i}") for i in range(50)))
    served = kube.journal[first:]
    assert len(served) == 250 and all(e.user_agent.startswith("agentbox-controller/") for e in served)
    assert 1 <= len({e.peer_port for e in served}) <= 4
    assert rest.sessions == 1
    # Exec shares the session: no second pool.
    aexec = AsyncExec(rest.cfg, session=rest.session)
    assert aexec._sess() is rest.session()  # noqa: SLF001
    await aexec.aclose()  # the owner of a shared session closes it, not AsyncExec
    assert not rest.session().closed and rest.sessions == 1


def test_proxy_and_tls_server_name_come_from_the_configuration() -> None:
    cfg = _cfg("https://10.0.0.1:6443")
    cfg.proxy, cfg.proxy_headers, cfg.tls_server_name = "http://proxy:3128", {"Proxy-Authorization": "x"}, "kube"
    assert Rest(cfg).request_options == {"proxy": "http://proxy:3128", "proxy_headers": {"Proxy-Authorization": "x"},
                                         "server_hostname": "kube"}
    cfg.no_proxy = "10.0.0.1"
    assert "proxy" not in Rest(cfg).request_options  # no_proxy names the API server: reached directly
    assert Rest(_cfg("http://127.0.0.1:1")).request_options == {}


async def test_the_transport_limits_are_operator_settings(kube: KubeEmulator, kubeconfig: Any) -> None:
    """The REST limits (requests in flight, timeouts, keep-alive) are settings (`AGENTBOX_KUBE_*`, chart
    `settings.kube*`): the startup handler builds the process's transport with them. Before: the
    constructor's defaults (64 in flight, 60 s, 10 s, 30 s) whatever the operator was given."""
    import logging

    import kopf
    from pydantic import ValidationError

    from controller.handlers.startup import cleanup, startup
    from controller.settings import Settings

    env = {"AGENTBOX_KUBE_MAX_REQUESTS": "2", "AGENTBOX_KUBE_REQUEST_TIMEOUT_S": "7",
           "AGENTBOX_KUBE_CONNECT_TIMEOUT_S": "3", "AGENTBOX_KUBE_KEEPALIVE_S": "5"}
    memo = kopf.Memo(settings=Settings.from_env(env), kubeconfig=str(kubeconfig), no_metrics=True)
    await startup(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger(__name__))
    try:
        rest = memo.rest
        assert (rest.max_requests, rest.timeout.total, rest.timeout.sock_connect, rest.keepalive_s) == (2, 7, 3, 5)
        assert memo.aexec._sess() is rest.session()  # exec shares that pool
        assert await memo.runtime.kube.get_custom(C.AGENTBOX_PLURAL, NS, "nope") is None
    finally:
        await cleanup(memo=memo)
    for bad in ({"AGENTBOX_KUBE_MAX_REQUESTS": "0"}, {"AGENTBOX_KUBE_REQUEST_TIMEOUT_S": "0"}):
        with pytest.raises(ValidationError):
            Settings.from_env(bad)
