"""Pod exec on the event loop: one aiohttp session (one connection pool) for every exec of the process.

Why aiohttp's websocket client and not another library (issue 12, part 4):

* ``kubernetes_asyncio``'s ``WsApiClient`` speaks ``v4.channel.k8s.io`` only (no stdin close, which the
  long-lived streams and stdin-fed commands need), preloads output as merged text without the exit code, and
  would be a second full Kubernetes client next to the official one;
* ``kr8s`` brings its own configuration loader and HTTP stack (httpx + httpx-ws) for one endpoint;
* aiohttp is already a dependency (kopf runs on it), its websocket client negotiates subprotocols, streams
  frames as they come and needs no thread.  The credentials come from the official client's
  ``Configuration`` the controller already loads (service account or kubeconfig): bearer token (with its
  refresh hook, so a rotated service-account token is picked up), client certificate, CA, TLS checks.

The wire protocol (``v5.channel.k8s.io`` preferred, ``v4`` accepted) is the API server's streaming exec:
binary frames whose first byte is the channel: 0 stdin (to the server), 1 stdout, 2 stderr, 3 the final
``Status`` (JSON), 255 (v5 only) ``[255, channel]`` closes a stream.  The exit code is read from the channel-3
``Status`` (:func:`controller.kube.exec._parse_rc`).

Security rules are those stated in :mod:`controller.kube.exec`: argv lists only, logs and errors name namespace,
pod, container and ``argv[0]`` only, output bounded while it arrives (``max_output`` bytes, 1 MiB by default,
reason ``"output_too_large"``), the channel-3 status bounded to 64 KiB.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable
from urllib.parse import quote, urlencode

import aiohttp

from controller.kube.rest import ssl_context
from controller.kube.exec import MAX_OUTPUT_BYTES, ExecError, ExecResult, _check_argv, _parse_rc

logger = logging.getLogger("agentbox.exec")

V5_PROTOCOL = "v5.channel.k8s.io"
V4_PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255
STATUS_MAX = 64 * 1024
USER_AGENT = "agentbox-controller (exec)"


class ExecStream:
    """One running exec: stdin open, stdout and stderr read as they arrive, the exit code at the end.

    Built by :meth:`AsyncExec.open`.  Not safe for two concurrent readers.

    Attributes:
        protocol: the negotiated subprotocol (``v5.channel.k8s.io`` or ``v4.channel.k8s.io``).
        rc: exit code once :meth:`read` returned ``None`` and a status arrived, else ``None``.
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, where: str, on_close: Callable[[], None]) -> None:
        self._ws = ws
        self._where = where
        self._on_close = on_close
        self.protocol = ws.protocol or ""
        self.rc: int | None = None
        self._status = b""
        self._closed = False

    @property
    def closed(self) -> bool:
        """The connection ended (status received, closed by either side, or failed)."""
        return self._closed or self._ws.closed

    async def write(self, data: bytes) -> None:
        """Send bytes to the command's stdin.

        :raises ExecError: reason ``"transport"`` when the connection is gone.
        """
        try:
            await self._ws.send_bytes(bytes([STDIN]) + data)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            raise ExecError(f"exec stream {self._where}: connection lost", reason="transport") from None

    async def close_stdin(self) -> None:
        """Close the command's stdin (v5 ``[255, 0]``; v4 has no such signal: nothing is sent)."""
        if self.protocol == V5_PROTOCOL and not self.closed:
            try:
                await self._ws.send_bytes(bytes([CLOSE, STDIN]))
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass

    async def read(self) -> tuple[int, bytes] | None:
        """The next ``(channel, data)`` of stdout (1) or stderr (2) as it arrives; ``None`` at the end.

        At the end, :attr:`rc` holds the exit code when the server sent a status.
        :raises ExecError: reason ``"protocol"`` when the status frame is oversized or malformed.
        """
        while not self._closed:
            try:
                msg = await self._ws.receive()
            except (ConnectionError, aiohttp.ClientError, asyncio.TimeoutError):
                break
            if msg.type == aiohttp.WSMsgType.BINARY:
                data = msg.data
            elif msg.type == aiohttp.WSMsgType.TEXT:
                data = msg.data.encode()
            else:  # CLOSE, CLOSED, ERROR
                break
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel in (STDOUT, STDERR):
                if payload:
                    return channel, payload
            elif channel == STATUS:
                self._status += payload
                if len(self._status) > STATUS_MAX:
                    await self.aclose()
                    raise ExecError(f"exec stream {self._where}: oversized status", reason="protocol")
        if self._status and self.rc is None:
            self.rc = _parse_rc(self._status, self._where)
        await self.aclose()
        return None

    async def aclose(self) -> None:
        """Close the connection (idempotent); the server ends the command."""
        if not self._closed:
            self._closed = True
            self._on_close()
            try:
                await self._ws.close()
            except Exception:  # a dead connection: nothing to report
                pass


class AsyncExec:
    """Pod exec for asyncio code over one ``aiohttp.ClientSession`` (opened on first use).

    Args:
        configuration: a ``kubernetes.client.Configuration`` (host, credentials, TLS).
        limit: most simultaneous connections of the pool (one-shot calls and long-lived streams).
        session: a function returning the process's shared session (``controller.kube.rest.Rest.session``:
            exec and REST then share one connection pool, and its owner closes it); without it, a session of
            its own is opened on first use.
    Attributes:
        calls: one-shot commands run; ``opened``: streams opened; ``open_streams``: streams open now.
    """

    def __init__(self, configuration: Any, *, limit: int = 0,
                 session: Callable[[], aiohttp.ClientSession] | None = None) -> None:
        self.cfg = configuration
        self.limit = limit
        self._shared = session
        self._session: aiohttp.ClientSession | None = None
        self.calls = 0
        self.opened = 0
        self.open_streams = 0

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for auth in (self.cfg.auth_settings() or {}).values():  # runs the token refresh hook, if any
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        return headers

    def _url(self, namespace: str, pod: str, container: str, argv: list[str], stdin: bool) -> str:
        query = [("command", a) for a in argv] + [
            ("container", container), ("stdin", "true" if stdin else "false"),
            ("stdout", "true"), ("stderr", "true"), ("tty", "false")]
        host = str(self.cfg.host).rstrip("/")
        return (f"{host}/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec?"
                + urlencode(query))

    def _sess(self) -> aiohttp.ClientSession:
        if self._shared is not None:
            return self._shared()
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.limit, ssl=ssl_context(self.cfg))
            self._session = aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT})
        return self._session

    async def open(self, namespace: str, pod: str, container: str, argv: list[str], *,
                   stdin: bool = True, connect_timeout: float = 10.0) -> ExecStream:
        """Start ``argv`` in the container and return its :class:`ExecStream` (stdin open when ``stdin``).

        :raises TypeError: argv is a ``str`` or holds non-``str`` items.
        :raises ExecError: reason ``"handshake"`` (``status`` 404: no such pod; 400: container not running)
            or ``"transport"``.
        """
        argv = _check_argv(argv)
        where = f"{namespace}/{pod} container {container} ({argv[0]})"
        try:
            async with asyncio.timeout(connect_timeout):
                ws = await self._sess().ws_connect(
                    self._url(namespace, pod, container, argv, stdin), protocols=(V5_PROTOCOL, V4_PROTOCOL),
                    headers=self._headers(), timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                    autoping=True, max_msg_size=4 * 1024 * 1024,
                    compress=0,  # not offered: the API server never negotiates permessage-deflate
                    **({"proxy": self.cfg.proxy} if getattr(self.cfg, "proxy", None) else {}))
        except aiohttp.WSServerHandshakeError as exc:
            raise ExecError(f"exec into {where} refused (HTTP {exc.status})", reason="handshake",
                            status=exc.status) from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise ExecError(f"exec into {where} failed: {type(exc).__name__}", reason="transport") from None
        self.opened += 1
        self.open_streams += 1

        def closed() -> None:
            self.open_streams -= 1

        return ExecStream(ws, where, closed)

    async def run(self, namespace: str, pod: str, container: str, argv: list[str], *,
                  stdin: str | None = None, timeout: float = 10.0,
                  max_output: int = MAX_OUTPUT_BYTES) -> ExecResult:
        """Run ``argv`` to completion and return what it printed and its exit code.

        :param stdin: text written to stdin, then stdin is closed (v5).
        :param timeout: seconds for the whole call.
        :param max_output: most bytes stdout and stderr may hold together.
        :raises ExecError: handshake, transport, ``"timeout"``, ``"protocol"`` (no status) or
            ``"output_too_large"``.
        """
        argv = _check_argv(argv)
        where = f"{namespace}/{pod} container {container} ({argv[0]})"
        started = time.monotonic()
        self.calls += 1
        stream: ExecStream | None = None
        try:
            async with asyncio.timeout(timeout):
                stream = await self.open(namespace, pod, container, argv, stdin=stdin is not None)
                if stdin is not None:
                    await stream.write(stdin.encode())
                    await stream.close_stdin()
                out: list[bytes] = []
                err: list[bytes] = []
                size = 0
                while (item := await stream.read()) is not None:
                    size += len(item[1])
                    if size > max_output:
                        raise ExecError(f"exec into {where}: output over {max_output} bytes",
                                        reason="output_too_large")
                    (out if item[0] == STDOUT else err).append(item[1])
            if stream.rc is None:
                raise ExecError(f"exec into {where}: no exit status received", reason="protocol")
            result = ExecResult(b"".join(out).decode("utf-8", "replace"),
                                b"".join(err).decode("utf-8", "replace"), stream.rc)
        except TimeoutError:
            logger.warning("exec %s/%s container=%s argv0=%s failed: reason=timeout duration=%.3fs",
                           namespace, pod, container, argv[0], time.monotonic() - started)
            raise ExecError(f"exec into {where} timed out after {timeout}s", reason="timeout") from None
        except ExecError as exc:
            logger.warning("exec %s/%s container=%s argv0=%s failed: reason=%s status=%s duration=%.3fs",
                           namespace, pod, container, argv[0], exc.reason, exc.status,
                           time.monotonic() - started)
            raise
        finally:
            if stream is not None:
                await stream.aclose()
        logger.info("exec %s/%s container=%s argv0=%s rc=%d duration=%.3fs",
                    namespace, pod, container, argv[0], result.rc, time.monotonic() - started)
        return result

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None
