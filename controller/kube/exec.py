"""The one audited pod-exec function: argv only, named container, no TTY, timeouts, sanitized errors and logs.

Every command the controller runs inside a box pod goes through :func:`pod_exec` (blocking, for sync code
and threads) or :func:`apod_exec` (the same in a worker thread, for asyncio code).

Security rules kept here and nowhere else:

* argv is a list of ``str`` run without a shell (a ``str`` raises ``TypeError``, so nothing gets split or
  interpolated by accident);
* the log (logger ``agentbox.exec``) carries namespace, pod, container, ``argv[0]``, rc and duration only —
  never stdout, stderr, the other argv items or exception text, which can all hold tokens;
* :class:`ExecError` messages follow the same rule; the original exception is not chained;
* what a command prints is bounded: stdout and stderr together may hold at most ``max_output`` bytes
  (1 MiB by default). The box owns the binaries it runs (``tmux``, ``sh``, ``head`` are the box's), so the
  bound is kept here, while the frames arrive, not by the command line: a larger output ends the call
  with :class:`ExecError` reason ``"output_too_large"`` and never grows the controller.

Concurrency: ``kubernetes.stream.stream`` temporarily replaces ``api_client.call_api`` on the client it is
given, so two threads sharing an ``ApiClient`` could leave it patched.  Each call therefore builds its own
``ApiClient`` from the shared ``Configuration`` (cheap: no connection is opened until the websocket).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import select
import ssl
import time
from typing import Any

import kubernetes.client
import kubernetes.stream
from kubernetes.client.rest import ApiException

logger = logging.getLogger("agentbox.exec")

_HANDSHAKE_STATUS = re.compile(r"Handshake status (\d{3})")
_STATUS_CHANNEL = 3
_CLOSE_CHANNEL = 255
_STATUS_MAX = 64 * 1024

MAX_OUTPUT_BYTES = 1024 * 1024
"""Default bound of what one exec call may print (stdout + stderr, bytes)."""


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """What a command printed (decoded as UTF-8, invalid bytes replaced) and its exit code."""

    stdout: str
    stderr: str
    rc: int


class ExecError(Exception):
    """The command could not be run or its result could not be read (transport failure, missing pod,
    timeout).  A command that ran and failed is NOT an ExecError: it is an :class:`ExecResult` with rc != 0.

    ``status`` is the HTTP status of a refused handshake (404: no such pod; 400: container invalid or pod
    not running), else ``None``.  ``reason`` is a short constant: ``"handshake"``, ``"transport"``,
    ``"timeout"``, ``"protocol"``, ``"output_too_large"`` or the API ``reason`` of a failed status
    (e.g. ``"InternalError"``).
    The message names namespace, pod, container and ``argv[0]`` only.
    """

    def __init__(self, message: str, *, reason: str, status: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


def _check_argv(argv: Any) -> list[str]:
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of str, not a single string (no shell is involved)")
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("argv must be a non-empty list of str")
    return argv


def pod_exec(
    api: kubernetes.client.CoreV1Api,
    namespace: str,
    pod: str,
    container: str,
    argv: list[str],
    *,
    stdin: str | None = None,
    timeout: float = 10.0,
    max_output: int = MAX_OUTPUT_BYTES,
) -> ExecResult:
    """Run ``argv`` in ``container`` of ``namespace/pod`` (no TTY) and wait for it to finish.

    :param api: a CoreV1Api; only its ``api_client.configuration`` is used (a private ApiClient per call).
    :param stdin: text written to the command's stdin, then stdin is closed (v5 protocol; on a v4-only
        server the close signal does not exist and the server decides when stdin ends).
    :param timeout: seconds for the whole call (connect excluded: bounded by the OS on loopback/cluster).
    :param max_output: most bytes stdout and stderr may hold together.
    :returns: :class:`ExecResult` with decoded stdout/stderr and the exit code.
    :raises TypeError: argv is a ``str`` or holds non-``str`` items.
    :raises ExecError: the pod is missing, the handshake is refused, the connection fails, the
        command does not finish within ``timeout``, or it prints more than ``max_output`` bytes.
    """
    argv = _check_argv(argv)
    where = f"{namespace}/{pod} container {container} ({argv[0]})"
    started = time.monotonic()
    client = kubernetes.client.ApiClient(api.api_client.configuration)
    ws: Any = None
    try:
        core = kubernetes.client.CoreV1Api(client)
        try:
            ws = kubernetes.stream.stream(
                core.connect_get_namespaced_pod_exec, pod, namespace,
                command=argv, container=container,
                stdin=stdin is not None, stdout=True, stderr=True, tty=False,
                binary=True, _preload_content=False, _request_timeout=timeout,
            )
        except ApiException as exc:
            match = _HANDSHAKE_STATUS.search(str(exc.reason or ""))
            status = int(match.group(1)) if match else (exc.status or None)
            raise ExecError(f"exec into {where} refused (HTTP {status})", reason="handshake",
                            status=status) from None
        except Exception as exc:
            raise ExecError(f"exec into {where} failed: {type(exc).__name__}", reason="transport") from None
        try:
            if stdin is not None:
                ws.write_stdin(stdin.encode())
                ws.close_channel(0)
            out, err, raw_status = _collect(ws, started + timeout, max_output, where, timeout)
        except ExecError:
            raise
        except Exception as exc:
            raise ExecError(f"exec into {where} failed: {type(exc).__name__}", reason="transport") from None
        rc = _parse_rc(raw_status, where)
        result = ExecResult(_decode(out), _decode(err), rc)
    except ExecError as exc:
        logger.warning("exec %s/%s container=%s argv0=%s failed: reason=%s status=%s duration=%.3fs",
                       namespace, pod, container, argv[0], exc.reason, exc.status, time.monotonic() - started)
        raise
    finally:
        if ws is not None:
            _close_quietly(ws)
        client.close()
    logger.info("exec %s/%s container=%s argv0=%s rc=%d duration=%.3fs",
                namespace, pod, container, argv[0], rc, time.monotonic() - started)
    return result


async def apod_exec(
    api: kubernetes.client.CoreV1Api,
    namespace: str,
    pod: str,
    container: str,
    argv: list[str],
    *,
    stdin: str | None = None,
    timeout: float = 10.0,
    max_output: int = MAX_OUTPUT_BYTES,
) -> ExecResult:
    """:func:`pod_exec` in a worker thread (``asyncio.to_thread``); same parameters, result and errors."""
    argv = _check_argv(argv)  # fail fast in the caller's frame
    return await asyncio.to_thread(pod_exec, api, namespace, pod, container, argv, stdin=stdin, timeout=timeout,
                                   max_output=max_output)


def _readable(ws: Any, wait_s: float) -> bool:
    sock = ws.sock.sock
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True  # frames already decrypted into the SSL buffer are invisible to poll()
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    try:
        return bool(poll.poll(max(0.0, wait_s) * 1000))
    finally:
        poll.unregister(sock)


def _collect(ws: Any, deadline: float, max_output: int, where: str, timeout: float) -> tuple[bytes, bytes, bytes]:
    """Read the channel frames until the server closes, counting bytes as they arrive (the client's
    own ``run_forever`` keeps everything, twice). Returns (stdout, stderr, status channel)."""
    from websocket import ABNF

    chans = {1: bytearray(), 2: bytearray(), _STATUS_CHANNEL: bytearray()}
    printed = 0
    while ws.sock is not None and ws.sock.connected:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ExecError(f"exec into {where} timed out after {timeout}s", reason="timeout")
        if not _readable(ws, min(remaining, 0.5)):
            continue
        op_code, frame = ws.sock.recv_data_frame(True)
        if op_code == ABNF.OPCODE_CLOSE:
            break
        if op_code not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT):
            continue
        data = frame.data if isinstance(frame.data, (bytes, bytearray)) else str(frame.data).encode()
        if not data or data[0] == _CLOSE_CHANNEL:
            continue
        channel, payload = data[0], data[1:]
        if channel in (1, 2):
            printed += len(payload)
            if printed > max_output:
                raise ExecError(f"exec into {where} printed more than {max_output} bytes",
                                reason="output_too_large")
        elif channel == _STATUS_CHANNEL and len(chans[channel]) + len(payload) > _STATUS_MAX:
            raise ExecError(f"exec into {where}: oversized exit status", reason="protocol")
        if channel in chans:
            chans[channel] += payload
    return bytes(chans[1]), bytes(chans[2]), bytes(chans[_STATUS_CHANNEL])


def _close_quietly(ws: Any) -> None:
    """Close the WSClient and its socket.  websocket-client's ``close()`` returns early when the server
    already closed the connection, leaving the OS socket to the garbage collector (ResourceWarning)."""
    try:
        ws.close(timeout=0)  # no waiting for the server's close frame (it may still run the command)
    except Exception:  # closing a dead connection: nothing worth reporting
        pass
    sock = getattr(ws, "sock", None)
    if sock is not None:
        try:
            sock.shutdown()
        except Exception:
            pass


def _decode(data: bytes | str) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _parse_rc(raw: bytes | str, where: str) -> int:
    """Exit code from the channel-3 ``Status``: 0 on Success, ``details.causes[ExitCode]`` otherwise."""
    try:
        status = json.loads(raw) if raw else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        raise ExecError(f"exec into {where}: no exit status received", reason="protocol")
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                break
    reason = str(status.get("reason") or "Failure")
    raise ExecError(f"exec into {where} failed: {reason}", reason=reason)


def owned_exec(exec_fn: Any, pod: dict[str, Any], owner_uid: str | None, box: str, container: str) -> Any:
    """An exec function bound to one box pod, after proving the pod is the box's own; every call is
    counted in ``agentbox_exec_calls_total`` (result ok | nonzero | error).

    Every exec into a box (tab watcher, login keeper, box files) is built here, so a pod created
    beforehand under the box's name by someone else (a squatter) never gets a command or a login, and
    the exec metric covers them all.

    Args:
        exec_fn: the transport, ``async (namespace, pod, container, argv, stdin=None) -> ExecResult``
            (`AsyncExec.run` bound to the settings, or a test double).
        pod: the pod object as read from the API server (dict).
        owner_uid: the AgentBox's ``metadata.uid``.
        box: the AgentBox's name (for the error message).
        container: the container to run in.
    Returns:
        ``async (argv, stdin=None) -> ExecResult``.
    Raises:
        controller.kube.objects.NotOwned: the pod has no controller ownerReference with ``owner_uid``.
    """
    from controller import metrics
    from controller.kube.objects import require_owned

    require_owned(pod, owner_uid, "Pod", box)
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")

    async def run(argv: list[str], stdin: str | None = None) -> Any:
        try:
            if stdin is None:
                result = await exec_fn(namespace, name, container, argv)
            else:
                result = await exec_fn(namespace, name, container, argv, stdin=stdin)
        except Exception:
            metrics.EXEC_CALLS.labels("error").inc()
            raise
        metrics.EXEC_CALLS.labels("ok" if getattr(result, "rc", None) == 0 else "nonzero").inc()
        return result

    return run


def owned_exec_open(open_fn: Any, pod: dict[str, Any], owner_uid: str | None, box: str, container: str) -> Any:
    """A long-lived exec opener bound to one box pod (the live tmux stream), after the same ownership
    proof as :func:`owned_exec`; each open is counted in ``agentbox_exec_calls_total`` (result stream | error).

    Args:
        open_fn: ``async (namespace, pod, container, argv) -> stream`` (`AsyncExec.open`, or a test double).
        pod, owner_uid, box, container: as for :func:`owned_exec`.
    Returns:
        ``async (argv) -> stream``.
    Raises:
        controller.kube.objects.NotOwned: the pod has no controller ownerReference with ``owner_uid``.
    """
    from controller import metrics
    from controller.kube.objects import require_owned

    require_owned(pod, owner_uid, "Pod", box)
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")

    async def run(argv: list[str]) -> Any:
        try:
            stream = await open_fn(namespace, name, container, argv)
        except Exception:
            metrics.EXEC_CALLS.labels("error").inc()
            raise
        metrics.EXEC_CALLS.labels("stream").inc()
        return stream

    return run
