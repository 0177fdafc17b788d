"""Pod exec on the event loop (controller.kube.aexec) against the emulator's streamed exec.

The emulator proxies an exec with stdin as the API server proxies it from the kubelet: stdin frames reach
the command as they arrive, output leaves as it is printed, v5 closes stdin with ``[255, 0]``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kubernetes.client
import pytest
import pytest_asyncio

from controller.kube.aexec import V4_PROTOCOL, AsyncExec, ExecStream
from controller.kube.exec import ExecError, ExecResult
from agentbox_sim.kube import KubeEmulator
from harness.kube_fixtures import running_pod

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def crd_paths() -> list[Any]:
    return []


@pytest_asyncio.fixture
async def box(kube: KubeEmulator) -> str:
    await running_pod(kube, "box")
    return "box"


@pytest_asyncio.fixture
async def aexec(k8s_client: kubernetes.client.ApiClient) -> AsyncIterator[AsyncExec]:
    client = AsyncExec(k8s_client.configuration)
    try:
        yield client
    finally:
        await client.aclose()


async def _read_until(stream: ExecStream, needle: bytes, timeout: float = 5.0) -> bytes:
    got = b""
    async with asyncio.timeout(timeout):
        while needle not in got:
            item = await stream.read()
            assert item is not None, got
            got += item[1]
    return got


async def test_one_shot_calls_keep_the_exit_status_and_errors(kube: KubeEmulator, box: str, aexec: AsyncExec,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="agentbox.exec")
    run = aexec.run
    assert await run("default", box, "box", ["sh", "-c", "echo out; echo err >&2; exit 7"]) == \
        ExecResult("out\n", "err\n", 7)
    assert await run("default", box, "box", ["tr", "a-z", "A-Z"], stdin="token-ish text") == \
        ExecResult("TOKEN-ISH TEXT", "", 0)
    assert (await run("default", box, "box", ["no-such-binary-xyz"])).rc == 127
    with pytest.raises(ExecError) as exc:
        await run("default", "ghost", "box", ["printf", "TOKEN-ARG"])
    assert (exc.value.reason, exc.value.status) == ("handshake", 404)
    with pytest.raises(ExecError) as exc:
        await run("default", box, "wrong", ["true"])
    assert exc.value.status == 400
    with pytest.raises(ExecError) as exc:
        await run("default", box, "box", ["sleep", "5"], timeout=0.3)
    assert exc.value.reason == "timeout"
    with pytest.raises(ExecError) as exc:
        await run("default", box, "box", ["head", "-c", "300000", "/dev/zero"], max_output=100_000)
    assert exc.value.reason == "output_too_large"
    with pytest.raises(TypeError):
        await run("default", box, "box", "echo hi")  # type: ignore[arg-type]
    assert "TOKEN" not in caplog.text + str(exc.value)
    assert kube.exec_journal[0].protocol == "v5.channel.k8s.io"


async def test_a_stream_delivers_output_as_it_comes_and_ends_on_stdin_close(
        kube: KubeEmulator, box: str, aexec: AsyncExec) -> None:
    stream = await aexec.open("default", box, "box", ["sh", "-c", "while read l; do echo got-$l; done; exit 3"])
    for word in ("one", "two"):
        await stream.write(f"{word}\n".encode())
        assert f"got-{word}".encode() in await _read_until(stream, f"got-{word}\n".encode())
    assert aexec.open_streams == 1
    await stream.close_stdin()
    async with asyncio.timeout(5):
        assert await stream.read() is None
    assert stream.rc == 3 and aexec.open_streams == 0
    assert kube.exec_journal[-1].rc == 3


async def test_closing_the_connection_ends_the_command(kube: KubeEmulator, box: str, aexec: AsyncExec,
                                                       tmp_path: Any) -> None:
    marker = tmp_path / "alive"
    stream = await aexec.open("default", box, "box",
                              ["sh", "-c", f"echo started; while :; do touch {marker}; sleep 0.05; done"])
    await _read_until(stream, b"started")
    await stream.aclose()
    async with asyncio.timeout(5):
        while not kube.exec_journal or kube.exec_journal[-1].argv[0] != "sh":
            await asyncio.sleep(0.02)
    assert kube.exec_journal[-1].rc == 137  # killed with the connection, as the kubelet does


async def test_v4_has_no_stdin_close_so_stdin_stays_open(kube: KubeEmulator, box: str) -> None:
    async with aiohttp.ClientSession() as http:
        url = kube.url + f"{PODS}/box/exec?command=cat&container=box&stdin=true&stdout=true&stderr=true"
        async with http.ws_connect(url, protocols=(V4_PROTOCOL,)) as ws:
            assert ws.protocol == V4_PROTOCOL
            await ws.send_bytes(b"\x00hello")
            msg = await ws.receive(timeout=5)
            assert msg.data == b"\x01hello"
            await ws.send_bytes(b"\xff\x00")  # not a close signal in v4: stdin stays open
            await ws.send_bytes(b"\x00again")
            msg = await ws.receive(timeout=5)
            assert msg.data.endswith(b"again")


async def test_calls_share_one_pool_and_start_no_thread(kube: KubeEmulator, box: str, aexec: AsyncExec) -> None:
    threads = threading.active_count()
    results = await asyncio.gather(*(aexec.run("default", box, "box", ["echo", str(i)]) for i in range(30)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(30)]
    assert threading.active_count() <= threads  # (a previous test's thread may end meanwhile)
    assert aexec.calls == 30 and aexec.open_streams == 0


def test_credentials_come_from_the_client_configuration() -> None:
    cfg = kubernetes.client.Configuration(host="https://example.invalid:6443")
    tokens = iter(["t1", "t2"])
    cfg.api_key = {"authorization": "stale"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    cfg.refresh_api_key_hook = lambda c: c.api_key.update(authorization=next(tokens))
    client = AsyncExec(cfg)
    assert client._headers() == {"authorization": "Bearer t1"}
    assert client._headers() == {"authorization": "Bearer t2"}  # a rotated service-account token
    url = client._url("ns", "p", "c", ["tmux", "-C", "attach", "-t", "a b"], True)
    assert url.startswith("https://example.invalid:6443/api/v1/namespaces/ns/pods/p/exec?command=tmux&command=-C")
    assert "command=a+b" in url and "stdin=true" in url and "tty=false" in url

