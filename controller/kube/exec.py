"""Pod exec: its result and error types, the exit-status parser, and the ownership-checked entry points.

The transport is :class:`controller.kube.aexec.AsyncExec` (on the event loop, one connection pool, one-shot
commands and long-lived streams).  Every exec into a box is built by :func:`owned_exec` (one-shot) or
:func:`owned_exec_open` (the live tmux stream), after proving the pod is the box's own.

Security rules (kept by the transport, stated here once):

* argv is a list of ``str`` run without a shell (a ``str`` raises ``TypeError``, so nothing gets split or
  interpolated by accident);
* the log (logger ``agentbox.exec``) carries namespace, pod, container, ``argv[0]``, rc and duration only —
  never stdout, stderr, the other argv items or exception text, which can all hold tokens;
* :class:`ExecError` messages follow the same rule; the original exception is not chained;
* what a command prints is bounded: stdout and stderr together may hold at most ``max_output`` bytes
  (1 MiB by default). The box owns the binaries it runs (``tmux``, ``sh``, ``head`` are the box's), so the
  bound is kept by the client, while the frames arrive, not by the command line: a larger output ends the
  call with :class:`ExecError` reason ``"output_too_large"`` and never grows the controller.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

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
    """``argv`` as a list of ``str``.

    Raises:
        TypeError: a single ``str``/``bytes`` (no shell is involved), an empty list or non-``str`` items.
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of str, not a single string (no shell is involved)")
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("argv must be a non-empty list of str")
    return argv


def _parse_rc(raw: bytes | str, where: str) -> int:
    """Exit code from the channel-3 ``Status`` (the API server's streaming exec protocol): 0 on Success,
    ``details.causes[reason=ExitCode].message`` otherwise.

    Raises:
        ExecError: reason ``"protocol"`` when no status arrived or it is not a JSON object; the status's own
            ``reason`` (``"InternalError"``...) for a failure without an exit code.
    """
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
