"""Fixtures for the emulated Kubernetes API server, the pod-exec sandbox, clients and kopf in a thread.

Fixtures (function-scoped; a fresh emulator per test):

* ``crd_paths`` -> ``list[Path]``: the project's ``crds/*.yaml``; override it in a test module to serve
  other CRDs.
* ``tmux_sockets`` -> :class:`TmuxSockets` (short socket dir, tmux servers killed at teardown).
* ``sandbox_root`` -> ``Path``: the directory under which every pod gets ``<ns>/<pod>/``.
* ``local_exec`` -> :class:`LocalExec` for the emulator's ``pods/exec``.
* ``kube`` -> a started :class:`KubeEmulator` (namespace ``default`` seeded); at teardown it is stopped
  and the test fails if the emulator answered any 500 (its own bugs).
* ``kubeconfig`` -> ``Path`` of a kubeconfig for ``kube``; ``KUBECONFIG`` is set to it for the test.
* ``k8s_client`` / ``core_v1`` / ``custom_api``: official (blocking) clients built from that kubeconfig
  explicitly (``KUBECONFIG`` is read by ``kubernetes`` at import, too early). Call them through
  ``asyncio.to_thread`` from async tests: the emulator runs on the test's event loop.

Helper: :func:`run_operator` runs the real kopf operator in its own thread and loop (kopf's
``KopfRunner``) for the duration of an ``async with`` block.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator, Iterator, Sequence

import aiohttp
import kopf
import kubernetes.client
import kubernetes.config
import pytest
import pytest_asyncio
from kopf.testing import KopfRunner

from agentbox_sim.kube import KubeEmulator, LocalExec, TmuxSockets

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]


async def running_pod(kube: KubeEmulator, name: str = "box") -> None:
    """Create pod `name` (one container `box`) in the emulator's `default` namespace over its HTTP API, and mark it
    Running (its containers' processes run locally: exec reaches them)."""
    async with aiohttp.ClientSession() as http:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"containers": [{"name": "box", "image": "x"}]}}
        async with http.post(kube.url + "/api/v1/namespaces/default/pods", json=pod) as resp:
            assert resp.status == 201
    await kube.set_pod_phase("default", name)


@pytest.fixture
def crd_paths() -> list[pathlib.Path]:
    """The CRD files the ``kube`` emulator serves (default: the project's ``crds/*.yaml``)."""
    return sorted((PROJECT_ROOT / "crds").glob("*.yaml"))


@pytest.fixture
def tmux_sockets() -> Iterator[TmuxSockets]:
    sockets = TmuxSockets()
    try:
        yield sockets
    finally:
        sockets.close()


@pytest.fixture
def sandbox_root(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "pods"
    root.mkdir()
    return root


@pytest.fixture
def local_exec(sandbox_root: pathlib.Path, tmux_sockets: TmuxSockets) -> LocalExec:
    return LocalExec(sandbox_root, tmux_sockets, timeout=20.0)


@pytest_asyncio.fixture
async def kube(crd_paths: list[pathlib.Path], local_exec: LocalExec) -> AsyncIterator[KubeEmulator]:
    emulator = KubeEmulator(crd_paths, exec_handler=local_exec)
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()
    if emulator.server_errors:
        pytest.fail(f"the emulator answered 500 (its own failures): {emulator.server_errors!r}")


@pytest.fixture
def kubeconfig(kube: KubeEmulator, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    path = kube.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


@pytest.fixture
def k8s_client(kubeconfig: pathlib.Path) -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def core_v1(k8s_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(k8s_client)


@pytest.fixture
def custom_api(k8s_client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(k8s_client)


@contextlib.asynccontextmanager
async def run_operator(
    registry: kopf.OperatorRegistry,
    *,
    namespace: str | None = "default",
    settings: kopf.OperatorSettings | None = None,
    args: Sequence[str] = (),
    timeout: float = 30.0,
) -> AsyncIterator[KopfRunner]:
    """Run ``kopf run --standalone`` with ``registry`` in its own thread and event loop.

    The registry must hold a ``@kopf.on.login`` handler (e.g. returning
    ``kopf.login_with_kubeconfig(**kwargs)`` with ``KUBECONFIG`` set by the ``kubeconfig`` fixture).
    Exiting stops the operator and joins its thread off the event loop (the emulator keeps serving
    meanwhile); kopf's own exception, if any, is re-raised.  kopf's stdout is swallowed by click's
    runner: assert on the emulator's storage and journal, or on logging.
    """
    cli = ["run", "--standalone", *(["--namespace", namespace] if namespace else ["--all-namespaces"]), *args]
    runner = KopfRunner(cli, registry=registry, settings=settings, timeout=timeout)
    runner.__enter__()
    try:
        yield runner
    finally:
        await asyncio.to_thread(runner.__exit__, None, None, None)
