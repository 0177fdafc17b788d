"""An emulated Kubernetes API server on loopback HTTP, good enough for the real kopf and the official client.

Used by the component tests and by ``agentbox-controller demo``.  It is built on kmock 0.8: kmock's
:class:`kmock.KubernetesScaffold` answers discovery (``/api``, ``/apis``, ``/api/v1``, ``/apis/{g}/{v}``)
from its bundled catalogue of built-in resources plus the CRDs loaded here; everything below a resource
path is served by this module with its own storage, because kmock's ``KubernetesEmulator`` storage lacks
what kopf 1.45 needs (see ``notes/test-harness.md``):

* resourceVersion / uid / creationTimestamp / generation stamping; generation bumps only on spec change;
* 409 on a stale ``metadata.resourceVersion`` in merge patches and PUTs, 422 on a failed JSON-patch ``test``
  (so of two leader-election candidates replacing the same Lease version, one wins and one gets 409);
* an API outage (:meth:`KubeEmulator.set_outage`), and per-client network partitions: one listener per
  client (:meth:`KubeEmulator.add_port`), cut by :meth:`KubeEmulator.partition` (reset or hang);
* PUT; ``/status`` isolation (the main endpoint ignores status, ``/status`` ignores everything else);
* ``generateName``; ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``);
  simple ``fieldSelector`` (dotted path ``=``/``!=``);
* finalizers (``deletionTimestamp``, removal once finalizers are empty, no new finalizer on an object
  being deleted) and ownerReference cascade (background policy, ``Orphan`` honoured); deleting a Namespace
  marks it ``Terminating``, deletes its objects (those with finalizers stay until released), refuses new
  content (403) and removes the Namespace once it is empty;
* CR validation against the CRD ``openAPIV3Schema`` with jsonschema -> 422;
* watches that honour ``resourceVersion`` (events after it; 410 Gone when too old) and ``timeoutSeconds``;
* namespace paths parsed correctly (kmock 0.8 answers 500 on ``/api/v1/namespaces``);
* no request history kept beyond a light :class:`JournalEntry` list (kmock's history makes it quadratic);
* Pods get ``status.phase: Pending`` when created without status; Secrets' ``stringData`` folds into ``data``;
* ``pods/exec`` over a WebSocket with the v5/v4 channel protocol, executed by an :data:`ExecHandler`
  (:class:`LocalExec` runs argv as a local subprocess in a per-pod sandbox directory, with a per-pod tmux
  server).

* strategic merge patches of custom resources answer 415 (a real API server has no strategic merge for
  them); bearer-token authentication when ``bearer_tokens`` is set (401 otherwise).

Known gaps versus a real kube-apiserver: no defaulting/pruning/CEL, strategic merge of built-in kinds
behaves as JSON merge patch, no RBAC/admission, no controllers other than garbage collection and namespace
deletion, no kubelet unless :class:`agentbox_sim.kubelet.Kubelet` is attached (otherwise tests play it
with :meth:`KubeEmulator.set_pod_phase`), no watch bookmarks, exec without TTY.

All state lives on the event loop that called :meth:`KubeEmulator.start`; every mutation is synchronous
code between awaits, so writes are atomic without locks.  Use the official (blocking) client from another
thread (``asyncio.to_thread``) when the emulator runs on the same loop as the test.

Example::

    kube = KubeEmulator([pathlib.Path("crds/agentboxes.yaml")], exec_handler=LocalExec(root, sockets))
    await kube.start()
    kube.write_kubeconfig(tmp_path / "kubeconfig")
    ...
    await kube.stop()
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import copy
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import pathlib
import re
import secrets as _secrets
import shlex
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import aiohttp
import aiohttp.web
import jsonpatch
import jsonschema
import kmock
import yaml

logger = logging.getLogger("agentbox.sim.kube")

JsonObj = dict[str, Any]

V5_PROTOCOL = "v5.channel.k8s.io"
V4_PROTOCOL = "v4.channel.k8s.io"
_CHANNEL_PROTOCOLS = (V5_PROTOCOL, V4_PROTOCOL)
_STDIN, _STDOUT, _STDERR, _STATUS, _CLOSE = 0, 1, 2, 3, 255
_FRAME_CHUNK = 64 * 1024


def _frame_bytes(msg: aiohttp.WSMessage) -> bytes | None:
    """The bytes of one exec WebSocket frame (stdin comes as binary or text frames), or None when the
    message ends the stream (close, error)."""
    if msg.type == aiohttp.WSMsgType.BINARY:
        return msg.data
    if msg.type == aiohttp.WSMsgType.TEXT:
        return msg.data.encode()
    return None


# --------------------------------------------------------------------------------------------------------
# Exec handlers
# --------------------------------------------------------------------------------------------------------

class ExecHandler(Protocol):
    """Runs one exec request for the emulator.

    Called as ``await handler(namespace, pod, container, argv, stdin)`` where ``stdin`` is the whole stdin
    (``None`` if the client did not ask for stdin); returns ``(stdout: bytes, stderr: bytes, rc: int)``.
    An optional ``release(namespace, pod) -> None`` method (sync) is called when a Pod is removed from
    storage, to kill what "ran in the pod" (e.g. its tmux server).  An optional
    ``refuse(namespace, pod, container) -> str | None`` method (sync) is asked before the upgrade: a
    message makes the exec answer 400 ``unable to upgrade connection: <message>`` (a container that is not
    running, as a kubelet answers).
    """

    def __call__(
        self, namespace: str, pod: str, container: str, argv: list[str], stdin: bytes | None, /
    ) -> Awaitable[tuple[bytes, bytes, int]]: ...


@dataclasses.dataclass
class ExecFault:
    """A fault injected into ``pods/exec`` (a sick node or kubelet, or a controller dying mid-call).

    Attributes:
        mode: ``"refuse"``: answer 500 "error dialing backend" before the upgrade, as an API server whose
            kubelet is unreachable (the command never runs); ``"hang"``: upgrade, then never answer (the
            command never runs; the client's own timeout ends it); ``"slow"``: run the command, answer after
            ``delay_s`` more seconds; ``"drop"``: close the stream without running the command or sending a
            status (a connection cut mid-call); ``"pass"``: run normally (only ``on_match`` matters).
        pod: the pod it applies to (None: every pod).
        match: predicate on the requested argv (None: every call).
        when: ``"before"``: ``on_match`` runs before the command would run; ``"after"``: the command runs,
            then ``on_match``, then the reply is sent (for ``"pass"`` and ``"slow"``).
        times: how many matching calls it applies to (None: all of them); ``hits`` counts them.
        skip: matching calls let through untouched before it applies (e.g. 1: the second Ctrl-C).
        delay_s: extra seconds for ``"slow"``.
        on_match: a sync callback run when the fault applies (e.g. SIGKILL the operator process).

    The same faults apply to the command lines of a tmux control-mode stream (``tmux -C attach``, see
    ``KubeEmulator.stream_faults``): ``match`` then sees each line the client writes as a tmux argv
    (``["tmux", *shlex.split(line)]``). ``"drop"``: with ``when="before"`` the line (and whatever the client
    wrote after it) never reaches tmux; with ``when="after"`` tmux runs it, ``on_match`` runs when tmux's
    ``%end``/``%error`` for it comes, and no output reaches the client from then on (a client killed before
    its reply arrived). ``"pass"``: only ``on_match`` (after: before that reply is sent on). ``"cut"``: the
    connection is closed (the client lives on: a network cut), before the line reaches tmux or, ``"after"``,
    once tmux ran it and before its reply is sent.
    """

    mode: str = "pass"
    pod: str | None = None
    match: Callable[[list[str]], bool] | None = None
    when: str = "before"
    times: int | None = 1
    delay_s: float = 0.0
    on_match: Callable[[], Any] | None = None
    skip: int = 0
    hits: int = 0
    seen: int = 0

    def applies(self, pod: str, argv: list[str]) -> bool:
        """True (and counted) when this fault takes this call."""
        if self.times is not None and self.hits >= self.times:
            return False
        if self.pod is not None and self.pod != pod:
            return False
        if self.match is not None and not self.match(argv):
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        self.hits += 1
        return True


class TmuxSockets:
    """Maps ``(namespace, pod)`` to a tmux socket path under a short private dir (``/tmp/abx-XXXXXX/``).

    Unix socket paths must stay below 108 bytes, so the directory lives directly in ``/tmp`` and long
    names are hashed.  :meth:`close` kills every tmux server found there and removes the directory.
    """

    def __init__(self, base: pathlib.Path | None = None) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="abx-", dir=str(base or "/tmp")))

    def __call__(self, namespace: str, pod: str) -> pathlib.Path:
        name = f"{namespace}.{pod}"
        if len(str(self.dir / name)) + len(".sock") > 100:
            name = hashlib.sha1(name.encode()).hexdigest()[:20]
        return self.dir / f"{name}.sock"

    def kill(self, socket: pathlib.Path) -> None:
        """Kill the tmux server listening on ``socket`` (if any) and remove the socket file."""
        if socket.exists():
            subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, timeout=10,
                           check=False, env=_tmux_env(os.environ))
            socket.unlink(missing_ok=True)

    def close(self) -> None:
        """Kill all tmux servers of this directory and remove it."""
        if self.dir.exists():
            for sock in self.dir.glob("*.sock"):
                self.kill(sock)
            shutil.rmtree(self.dir, ignore_errors=True)


def _tmux_env(env: Mapping[str, str]) -> dict[str, str]:
    """Drop the variables that would tie a child tmux to an outer tmux session."""
    return {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE")}


class LocalExec:
    """Default :class:`ExecHandler`: runs argv as a local subprocess (no shell) in a per-pod sandbox.

    * ``cwd`` is ``sandbox_root/<namespace>/<pod>`` (created on first use);
    * when ``argv[0] == "tmux"``, ``-S <tmux_socket_for(namespace, pod)>`` is inserted after it, so every
      pod owns its own tmux server;
    * a missing executable answers rc 127 (126 if not executable) with the reason in stderr, like a runtime;
    * a command running longer than ``timeout`` seconds is killed and answers rc 137.

    ``calls`` counts the executions; :meth:`release` (called by the emulator when a Pod is removed) kills
    the pod's tmux server and deletes its sandbox directory, as a kubelet would.
    """

    def __init__(
        self,
        sandbox_root: pathlib.Path,
        tmux_socket_for: Callable[[str, str], pathlib.Path],
        *,
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.sandbox_root = pathlib.Path(sandbox_root)
        self.tmux_socket_for = tmux_socket_for
        self.timeout = timeout
        self.env = dict(env) if env is not None else None
        self.calls = 0

    def workdir(self, namespace: str, pod: str) -> pathlib.Path:
        """The directory standing for the pod's filesystem: ``sandbox_root/namespace/pod``."""
        return self.sandbox_root / namespace / pod

    nice: int = 0
    """Niceness of every process run in a pod (0: the bench's and tests' own). A bench sets it to stand the
    boxes' processes on other nodes than the controller and the API server, as in a cluster: on one machine a
    burst's 500 tmux servers and agents otherwise take the cores from both (``bench/scale.py --box-nice``)."""

    def rewrite_argv(self, namespace: str, pod: str, argv: list[str]) -> list[str]:
        """Return the argv actually run (``tmux`` gets ``-S <socket>``; under ``nice -n`` when ``nice`` is set)."""
        if argv and argv[0] == "tmux":
            argv = ["tmux", "-S", str(self.tmux_socket_for(namespace, pod)), *argv[1:]]
        return ["nice", "-n", str(self.nice), *argv] if self.nice and argv else list(argv)

    async def spawn(self, namespace: str, pod: str, container: str, argv: list[str]) -> asyncio.subprocess.Process:
        """Start ``argv`` with stdin, stdout and stderr as pipes, for a streamed (interactive) exec; no
        timeout applies (a kubelet keeps a stream open while the client does).

        :raises FileNotFoundError, PermissionError: the executable is missing or not executable.
        """
        self.calls += 1
        cwd = self.workdir(namespace, pod)
        cwd.mkdir(parents=True, exist_ok=True)
        env = _tmux_env(self.env if self.env is not None else os.environ)
        return await asyncio.create_subprocess_exec(
            *self.rewrite_argv(namespace, pod, argv), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(cwd), env=env,
            start_new_session=True)

    async def __call__(
        self, namespace: str, pod: str, container: str, argv: list[str], stdin: bytes | None
    ) -> tuple[bytes, bytes, int]:
        self.calls += 1
        if not argv:
            return b"", b"exec: no command given\n", 126
        cwd = self.workdir(namespace, pod)
        cwd.mkdir(parents=True, exist_ok=True)
        real_argv = self.rewrite_argv(namespace, pod, argv)
        env = _tmux_env(self.env if self.env is not None else os.environ)
        try:
            proc = await asyncio.create_subprocess_exec(
                *real_argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(cwd),
                env=env,
                start_new_session=True,
            )
        except FileNotFoundError:
            return b"", f'exec: "{argv[0]}": executable file not found in $PATH\n'.encode(), 127
        except PermissionError:
            return b"", f'exec: "{argv[0]}": permission denied\n'.encode(), 126
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), self.timeout)
        except TimeoutError:
            await self._kill(proc)
            return b"", f"exec: killed after {self.timeout}s\n".encode(), 137
        except asyncio.CancelledError:  # the emulator stops: leave no process behind
            await self._kill(proc)
            raise
        rc = proc.returncode if proc.returncode is not None else 1
        return out, err, rc if rc >= 0 else 128 - rc

    @staticmethod
    async def _kill(proc: asyncio.subprocess.Process) -> None:
        """Kill the command's whole process group (it runs in its own session) and reap it. A process object
        of an in-process handler (``agentbox_sim.fake_tabs``) has ``kill_emulated()`` instead."""
        kill = getattr(proc, "kill_emulated", None)
        if kill is not None:
            kill()
            await proc.wait()
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        await proc.wait()

    def release(self, namespace: str, pod: str) -> None:
        """The pod is gone: kill its tmux server and remove its sandbox directory."""
        socket = self.tmux_socket_for(namespace, pod)
        if socket.exists():
            subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, timeout=10,
                           check=False, env=_tmux_env(os.environ))
            socket.unlink(missing_ok=True)
        shutil.rmtree(self.workdir(namespace, pod), ignore_errors=True)


# --------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class JournalEntry:
    """One HTTP request served: ``method`` ("GET"), ``path`` ("/api/v1/namespaces/default/pods"),
    ``query`` (raw query string, "" if none), ``content_type`` ("" if none), ``status`` (HTTP status;
    200 as soon as a watch stream starts; 0 when the connection was cut), ``user_agent``, ``port`` (the
    emulator's listening port the request came in on: which client made it, when each client was given
    its own listener with :meth:`KubeEmulator.add_port`; 0 if unknown), ``at`` (epoch seconds when it
    arrived), ``peer_port`` (the client's source port: requests with the same one came over the same
    connection; 0 if unknown), ``answered`` (epoch seconds when its handler returned the answer: for a watch
    or an exec, when the stream ended; 0 while unanswered or when the connection was cut)."""

    method: str
    path: str
    query: str
    content_type: str
    status: int | None = None
    user_agent: str = ""
    port: int = 0
    at: float = dataclasses.field(default_factory=time.time)
    peer_port: int = 0
    answered: float = 0.0

    @property
    def params(self) -> dict[str, list[str]]:
        """The query string parsed: ``{"watch": ["true"], ...}``."""
        from urllib.parse import parse_qs
        return parse_qs(self.query, keep_blank_values=True)


@dataclasses.dataclass(frozen=True)
class ExecRecord:
    """One exec call: where, what (argv as requested, before any rewrite), the protocol and the rc."""

    namespace: str
    pod: str
    container: str
    argv: tuple[str, ...]
    rc: int
    protocol: str


@dataclasses.dataclass
class Fault:
    """A scripted API-server failure (`KubeEmulator.fail_next`)."""

    method: str
    path: str
    status: int
    remaining: int
    body_contains: str | None = None


@dataclasses.dataclass(frozen=True)
class _Path:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _parse_path(path: str) -> _Path | None:
    """Parse a resource path; ``None`` for discovery and anything that is not below a resource.

    Unlike kmock 0.8, handles ``/api/v1/namespaces``, ``/api/v1/namespaces/{name}`` and
    ``/api/v1/namespaces/{name}/status|finalize`` as the cluster-scoped Namespace resource.
    """
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    is_ns_sub = group == "" and len(rest) == 3 and rest[0] == "namespaces" and rest[2] in ("status", "finalize")
    if rest[0] == "namespaces" and len(rest) >= 3 and not is_ns_sub:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) or None
    return _Path(group, version, plural, namespace, name, sub)


# --------------------------------------------------------------------------------------------------------
# Errors (rendered as metav1.Status)
# --------------------------------------------------------------------------------------------------------

class ApiError(Exception):
    """An intended API error, rendered as a ``Status`` object with the given HTTP ``code``."""

    def __init__(self, code: int, reason: str, message: str, details: JsonObj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def response(self) -> aiohttp.web.Response:
        body: JsonObj = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                         "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return aiohttp.web.json_response(body, status=self.code)


def _qualified(res: kmock.resource) -> str:
    return f"{res.plural}.{res.group}" if res.group else str(res.plural)


def _not_found(res: kmock.resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(res)} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def _conflict(res: kmock.resource, name: str) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_qualified(res)} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": res.group, "kind": res.plural})


# --------------------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------------------

_LABEL_TERM = re.compile(
    r"""^\s*(?:
        !\s*(?P<notkey>[^\s!=,()]+)
      | (?P<key>[^\s!=,()]+)\s*(?:
            (?P<op>==|=|!=)\s*(?P<val>[^\s,()!=]*)
          | \s+(?P<setop>in|notin)\s*\((?P<vals>[^()]*)\)
        )?
    )\s*$""",
    re.VERBOSE,
)


def _split_terms(selector: str) -> list[str]:
    """Split on commas outside parentheses: ``"a in (x,y),b=c"`` -> ``["a in (x,y)", "b=c"]``."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t for t in terms if t.strip()]


def parse_label_selector(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    """Compile a Kubernetes label selector into a predicate over a labels dict.

    Supports ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` and ``!k``.
    Raises :class:`ApiError` (400) on syntax errors.
    """
    if not selector or not selector.strip():
        return lambda labels: True
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split_terms(selector):
        m = _LABEL_TERM.match(term)
        if not m:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        if m["notkey"]:
            checks.append(lambda lb, k=m["notkey"]: k not in lb)
        elif m["op"] in ("=", "=="):
            checks.append(lambda lb, k=m["key"], v=m["val"]: lb.get(k) == v)
        elif m["op"] == "!=":
            checks.append(lambda lb, k=m["key"], v=m["val"]: lb.get(k) != v)
        elif m["setop"]:
            vals = frozenset(v.strip() for v in m["vals"].split(",") if v.strip())
            if m["setop"] == "in":
                checks.append(lambda lb, k=m["key"], vs=vals: k in lb and lb[k] in vs)
            else:
                checks.append(lambda lb, k=m["key"], vs=vals: lb.get(k) not in vs)
        else:
            checks.append(lambda lb, k=m["key"]: k in lb)
    return lambda labels: all(check(labels) for check in checks)


def parse_field_selector(selector: str | None) -> Callable[[JsonObj], bool]:
    """Compile a field selector (``metadata.name=x,status.phase!=Running``) into an object predicate."""
    if not selector or not selector.strip():
        return lambda obj: True
    checks: list[Callable[[JsonObj], bool]] = []
    for term in _split_terms(selector):
        m = re.match(r"^\s*([\w.\-/]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
        path, op, val = m.groups()

        def check(obj: JsonObj, path: str = path, op: str = op, val: str = val) -> bool:
            cur: Any = obj
            for part in path.split("."):
                cur = cur.get(part) if isinstance(cur, dict) else None
            actual = "" if cur is None else str(cur)
            return actual == val if op != "!=" else actual != val
        checks.append(check)
    return lambda obj: all(check(obj) for check in checks)


def _labels(obj: JsonObj) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


# --------------------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------------------

def _openapi_to_jsonschema(node: Any) -> Any:
    """Translate the OpenAPI v3 flavour of a CRD schema to JSON Schema (draft 4) where it differs:
    ``nullable: true`` allows null; ``x-kubernetes-int-or-string`` allows integer or string."""
    if isinstance(node, list):
        return [_openapi_to_jsonschema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _openapi_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    out.pop("nullable", None)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


# `format: date-time` as the API server checks it (kube-openapi strfmt): an RFC 3339 instant. jsonschema's
# own date-time check is silently off without the optional rfc3339-validator, so it is spelled out here.
_FORMATS = jsonschema.FormatChecker(formats=())
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


@_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: Any) -> bool:
    if not isinstance(value, str):
        return True  # the type keyword reports it
    if not _RFC3339.fullmatch(value):
        return False
    datetime.datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))  # ValueError: month 13, ...
    return True


def _list_map_duplicates(schema: Any, obj: Any, path: list[Any]) -> Iterable[tuple[list[Any], str]]:
    """(path, key) of every item of an `x-kubernetes-list-type: map` list whose `x-kubernetes-list-map-keys`
    values repeat an earlier item's: the API server refuses those ("Duplicate value")."""
    if not isinstance(schema, dict):
        return
    if isinstance(obj, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in obj:
                yield from _list_map_duplicates(sub, obj[name], [*path, name])
    elif isinstance(obj, list):
        keys = schema.get("x-kubernetes-list-map-keys") if schema.get("x-kubernetes-list-type") == "map" else None
        seen: set[str] = set()
        for i, item in enumerate(obj):
            if keys and isinstance(item, dict):
                key = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
                if key in seen:
                    yield [*path, i], key
                seen.add(key)
            yield from _list_map_duplicates(schema.get("items"), item, [*path, i])


def _json_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also used for strategic merge patches: a known gap)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


_BUNDLED: str | None = None


def _bundled_resources() -> str:
    """kmock's catalogue of built-in resources (K3s), read once; ``ResourcesArray.load_bundled`` would
    raise a DeprecationWarning (``importlib.resources.read_binary``) under ``-W error``."""
    global _BUNDLED
    if _BUNDLED is None:
        import gzip
        import importlib.resources
        data = importlib.resources.files("kmock._internal").joinpath("resources.json.gz").read_bytes()
        _BUNDLED = gzip.decompress(data).decode("utf-8")
    return _BUNDLED


# --------------------------------------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------------------------------------

_Key = tuple[kmock.resource, str, str]  # (resource, namespace or "", name)


class _Store(dict):  # type: ignore[type-arg]
    """The stored objects by (resource, namespace, name), with an index by resource (`of`): a LIST or a
    watch's initial list walks the objects of its resource only, as a real API server's watch cache does
    per resource (a walk of every object with kmock's resource comparison for each was most of the bench's
    emulator CPU at 6,000 boxes: every box pass lists its namespace's Subscriptions). Only `[key] = obj`
    and `pop(key)` change it (the emulator's only writes)."""

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[kmock.resource, dict[_Key, JsonObj]] = {}

    def __setitem__(self, key: _Key, obj: JsonObj) -> None:
        super().__setitem__(key, obj)
        self._index.setdefault(key[0], {})[key] = obj

    def pop(self, key: _Key, *default: Any) -> Any:  # type: ignore[override]
        self._index.get(key[0], {}).pop(key, None)
        return super().pop(key, *default)

    def __delitem__(self, key: _Key) -> None:
        self.pop(key)

    def of(self, res: kmock.resource) -> list[tuple[_Key, JsonObj]]:
        """The (key, object) pairs of one resource, in the order they were first stored."""
        return list(self._index.get(res, {}).items())
_MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


class KubeEmulator:
    """A Kubernetes API server emulator served over real HTTP on ``127.0.0.1:<random port>``.

    :param crd_paths: CRD YAML files (multi-document allowed); each served version is registered for
        discovery (verbs incl. list/watch/patch; ``status``/``scale`` subresources as declared), stored as
        an ``apiextensions.k8s.io/v1`` object, and its ``openAPIV3Schema`` validates CRs (422).
    :param exec_handler: runs ``pods/exec`` commands; ``None`` makes exec answer 400 after the pod check.
    :param namespaces: Namespaces seeded at construction (kopf with ``--namespace`` needs them to exist).
    :param require_running: exec into a Pod whose ``status.phase`` is not ``Running`` answers 400, as on a
        real cluster; tests play the kubelet with :meth:`set_pod_phase`.
    :param event_log_size: watch events kept for resuming watches by resourceVersion (older -> 410 Gone).

    Attributes: ``url`` (``http://127.0.0.1:PORT``, after :meth:`start`), ``journal`` (every request as a
    :class:`JournalEntry`), ``exec_journal`` (:class:`ExecRecord` per exec), ``server_errors`` (unexpected
    exceptions that answered 500; tests should assert it stays empty), ``discovery`` (the kmock scaffold;
    ``discovery.resources`` is the served catalogue), ``bearer_tokens`` (None: no authentication, the
    default; a set of strings: every request must carry ``Authorization: Bearer <one of them>``, else 401
    ``Unauthorized`` as a real API server answers a missing, wrong or rotated-out token).
    """

    def __init__(
        self,
        crd_paths: Iterable[pathlib.Path] = (),
        exec_handler: ExecHandler | None = None,
        namespaces: Iterable[str] = ("default",),
        *,
        require_running: bool = True,
        event_log_size: int = 5000,
    ) -> None:
        self.exec_handler = exec_handler
        self.require_running = require_running
        self.exec_faults: list[ExecFault] = []
        self.stream_faults: list[ExecFault] = []  # on the command lines of tmux control-mode streams
        self.journal: list[JournalEntry] = []
        self.exec_journal: list[ExecRecord] = []
        self.exec_streams: list[tuple[str, str, str, tuple[str, ...]]] = []  # (ns, pod, container, argv) at start
        self.faults: list[Fault] = []
        self.server_errors: list[BaseException] = []
        self.discovery = kmock.KubernetesScaffold()
        self.discovery.resources.load_data(_bundled_resources())
        self._store = _Store()
        self._schemas: dict[kmock.resource, jsonschema.protocols.Validator] = {}
        self._openapi: dict[kmock.resource, JsonObj] = {}
        self._custom: set[kmock.resource] = set()
        self._rv = 0
        self._events: list[tuple[int, kmock.resource, str, JsonObj]] = []
        self._event_rvs: list[int] = []
        self._events_floor = 0  # events with rv <= floor have been trimmed
        self._event_log_size = event_log_size
        self._changed = asyncio.Event()
        self._stopping = False
        self.outage = False  # see set_outage()
        self.bearer_tokens: set[str] | None = None  # see the attribute's doc in the class docstring
        self.partitions: dict[int, str] = {}  # listening port -> "reset" | "hang"; see partition()
        self._watch_epoch = 0  # bumped by expire_watches(): open watch streams end
        self._exec_tasks: set[asyncio.Future[tuple[bytes, bytes, int]]] = set()
        self._exec_transports: set[asyncio.BaseTransport] = set()  # open exec connections (cut by an outage)
        self._listeners: list[Callable[[kmock.resource, str, JsonObj], None]] = []
        self._runner: aiohttp.web.ServerRunner | None = None
        self._port: int | None = None
        self._crd_res = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        self._ns_res = kmock.resource("", "v1", "namespaces")
        self._pod_res = kmock.resource("", "v1", "pods")
        for path in crd_paths:
            for doc in yaml.safe_load_all(pathlib.Path(path).read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    self.add_crd(doc)
        for ns in namespaces:
            self._create(self._ns_res, None, {"metadata": {"name": ns}}, internal=True)

    # ---------------------------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (only after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> None:
        """Start serving on 127.0.0.1 on a random free port."""
        await self.discovery.__aenter__()
        server = aiohttp.web.Server(self._serve_http, access_log=None)  # the journal records requests
        self._runner = aiohttp.web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """End all watch streams and stop serving (idempotent)."""
        self._stopping = True
        self._notify()
        tasks = list(self._exec_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            await self.discovery.__aexit__(None, None, None)

    async def __aenter__(self) -> KubeEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: pathlib.Path, *, namespace: str = "default",
                         server: str | None = None) -> pathlib.Path:
        """Write a kubeconfig (no auth) pointing at ``server`` (default :attr:`url`; e.g. a URL from
        :meth:`add_port`); returns ``path``."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": server or self.url}}],
            "users": [{"name": "emulator", "user": {}}],
            "contexts": [{"name": "emulator",
                          "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace}}],
            "current-context": "emulator",
        }
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        return path

    # ---------------------------------------------------------------------------------- CRDs

    def add_crd(self, crd: JsonObj) -> None:
        """Register a CRD document (``apiextensions.k8s.io/v1``) for discovery, storage and validation."""
        spec = crd["spec"]
        group, names = spec["group"], spec["names"]
        namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        for version in spec.get("versions", []):
            if not version.get("served", True):
                continue
            res = kmock.resource(group, version["name"], names["plural"])
            subresources = set((version.get("subresources") or {}).keys())
            self.discovery.resources[res] = kmock.ResourceInfo(
                namespaced=namespaced,
                kind=names["kind"],
                singular=names.get("singular", names["kind"].lower()),
                verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
                shortnames=names.get("shortNames", []),
                categories=names.get("categories", []),
                subresources=subresources,
            )
            self._custom.add(res)
            schema = ((version.get("schema") or {}).get("openAPIV3Schema"))
            if schema:
                self._schemas[res] = jsonschema.Draft4Validator(_openapi_to_jsonschema(schema),
                                                                format_checker=_FORMATS)
                self._openapi[res] = schema
        stored = copy.deepcopy(crd)
        stored.setdefault("status", {
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
            "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                            "message": "the initial names have been accepted",
                            "lastTransitionTime": _now()}],
        })
        key = (self._crd_res, "", crd["metadata"]["name"])
        if key not in self._store:
            self._create(self._crd_res, None, stored, internal=True)

    # ---------------------------------------------------------------------------------- storage helpers

    def resource(self, spec: str | kmock.resource) -> kmock.resource:
        """Resolve ``"v1/pods"``, ``"pods"``, ``"agentbox.dev/v1alpha1/agentboxes"``, ``"agentboxes"`` or a
        :class:`kmock.resource` to the one served resource (core wins on ambiguity). Raises ``KeyError``."""
        pattern = spec if isinstance(spec, kmock.resource) else kmock.resource(spec)
        matches = [r for r in self.discovery.resources if pattern.check(r)]
        if len(matches) > 1:
            matches = [r for r in matches if r.group == ""] or [r for r in matches if r in self._custom]
        if len(matches) != 1:
            raise KeyError(f"no single served resource matches {spec!r}: {matches}")
        return matches[0]

    def get(self, resource: str | kmock.resource, namespace: str | None, name: str) -> JsonObj | None:
        """A deep copy of the stored object, or ``None``. ``namespace=None`` for cluster-scoped objects."""
        obj = self._store.get((self.resource(resource), namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(
        self, resource: str | kmock.resource, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[JsonObj]:
        """Deep copies of the stored objects of a resource (all namespaces if ``namespace`` is None)."""
        res = self.resource(resource)
        match = parse_label_selector(label_selector)
        return [copy.deepcopy(obj) for (_, ns, _), obj in self._store.of(res)
                if (namespace is None or ns == namespace) and match(_labels(obj))]

    @property
    def resource_version(self) -> int:
        """The last resourceVersion issued."""
        return self._rv

    async def create_object(self, resource: str | kmock.resource, body: JsonObj) -> JsonObj:
        """Store an object as "the system" (kubelet, another controller): like POST, but ``status`` is kept
        even where a status subresource exists. Validation, stamping and watch events as usual."""
        res = self.resource(resource)
        ns = body.get("metadata", {}).get("namespace") if self._info(res).namespaced else None
        return self._create(res, ns, body, internal=True)

    async def patch_object(
        self, resource: str | kmock.resource, namespace: str | None, name: str, patch: JsonObj
    ) -> JsonObj:
        """Merge-patch the whole object (spec and status alike) as "the system"; returns the new state."""
        res = self.resource(resource)
        key = (res, namespace or "", name)
        current = self._store.get(key)
        if current is None:
            raise _not_found(res, name)
        return self._update(res, key, _merge_patch(current, patch), subresource=None, internal=True)

    async def replace_status(self, resource: str | kmock.resource, namespace: str | None, name: str,
                             status: JsonObj) -> JsonObj | None:
        """Replace ``status`` wholesale as "the system" (a kubelet writing a Pod's status: a merge patch would
        keep a stale ``state.running`` next to a new ``state.waiting``); ``None`` if the object is gone."""
        res = self.resource(resource)
        key = (res, namespace or "", name)
        current = self._store.get(key)
        if current is None:
            return None
        new = copy.deepcopy(current)
        new["status"] = copy.deepcopy(status)
        return self._update(res, key, new, subresource="status", internal=True)

    def add_change_listener(self, listener: Callable[[kmock.resource, str, JsonObj], None]) -> None:
        """Call ``listener(resource, "ADDED"|"MODIFIED"|"DELETED", object)`` synchronously on every stored
        change (the object is the emulator's own copy: do not modify it). Used by the kubelet model."""
        self._listeners.append(listener)

    async def delete_object(self, resource: str | kmock.resource, namespace: str | None, name: str) -> None:
        """Delete as a client would (finalizers respected, cascade to owned objects)."""
        res = self.resource(resource)
        self._delete(res, (res, namespace or "", name), {})

    async def set_pod_phase(self, namespace: str, name: str, phase: str = "Running") -> JsonObj:
        """Play the kubelet: set ``status.phase``, the ``Ready`` condition and ``containerStatuses`` of a
        Pod (every container ``running`` when the phase is Running, else waiting ``ContainerCreating``)."""
        ready = "True" if phase == "Running" else "False"
        pod = self._store.get((self._pod_res, namespace, name)) or {}
        now = _now()
        statuses = [{"name": c.get("name"), "image": c.get("image"), "imageID": f"emulated://{c.get('image')}",
                     "ready": phase == "Running",
                     "started": phase == "Running", "restartCount": 0,
                     "state": {"running": {"startedAt": now}} if phase == "Running"
                     else {"waiting": {"reason": "ContainerCreating"}}}
                    for c in (pod.get("spec") or {}).get("containers") or []]
        return await self.patch_object(self._pod_res, namespace, name, {"status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": now}],
            "containerStatuses": statuses,
        }})

    async def evict_pod(self, namespace: str, name: str,
                        message: str = "The node was low on resource: memory.") -> JsonObj:
        """Play the kubelet evicting a Pod: its containers are killed (what ran in the pod is released) and
        the Pod stays stored with ``phase: Failed``, ``reason: Evicted``, as on a real node."""
        pod = self._store.get((self._pod_res, namespace, name)) or {}
        release = getattr(self.exec_handler, "release", None)
        if callable(release):
            release(namespace, name)
        now = _now()
        statuses = [{"name": c.get("name"), "image": c.get("image"), "imageID": f"emulated://{c.get('image')}",
                     "ready": False, "started": False,
                     "restartCount": 0, "state": {"terminated": {
                         "exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": now,
                         "message": "The container could not be located when the pod was terminated"}}}
                    for c in (pod.get("spec") or {}).get("containers") or []]
        return await self.patch_object(self._pod_res, namespace, name, {"status": {
            "phase": "Failed", "reason": "Evicted", "message": message,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": statuses,
        }})

    async def wait_for(
        self,
        resource: str | kmock.resource,
        namespace: str | None,
        name: str,
        predicate: Callable[[JsonObj | None], bool],
        timeout: float = 5.0,
    ) -> JsonObj | None:
        """Wait (without polling sleeps) until ``predicate(stored object or None)`` is true; return it.

        Raises ``TimeoutError`` with the last seen state after ``timeout`` seconds.
        """
        seen: list[JsonObj | None] = [None]

        def check() -> bool:
            seen[0] = self.get(resource, namespace, name)
            return predicate(seen[0])
        try:
            await self.wait_until(check, timeout)
        except TimeoutError:
            raise TimeoutError(f"condition not met for {resource} {namespace}/{name}; "
                               f"last state: {seen[0]}") from None
        return seen[0]

    async def wait_until(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``condition()`` is true, re-checking after every stored change (no polling sleeps).

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self._changed
            if condition():
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("condition not met")
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass

    # ---------------------------------------------------------------------------------- HTTP entry

    def set_outage(self, on: bool) -> None:
        """API server unreachable (True) or back (False). While out, every request's connection is reset
        without an answer (as a crashed API server or a cut network looks to a client), open watch streams
        are cut, and nothing is stored; the state is kept for when it comes back. Open exec connections
        (one-shot calls and live streams, which a real API server proxies to the kubelet) are cut too."""
        self.outage = on
        if on:
            self._notify()
            for transport in list(self._exec_transports):
                transport.abort()
            self._exec_transports.clear()

    async def add_port(self) -> str:
        """Serve the same API on one more loopback port and return its URL (``http://127.0.0.1:PORT``).
        Give each client (e.g. each operator replica) its own listener and kubeconfig: the journal then
        tells their requests apart (:attr:`JournalEntry.port`) and :meth:`partition` can cut one of them."""
        if self._runner is None:
            raise RuntimeError("the emulator is not started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        site = aiohttp.web.SockSite(self._runner, sock)
        await site.start()
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    def partition(self, port: int, mode: str | None = "reset") -> None:
        """Cut the network between the clients of one listening port and the API server (``mode``
        "reset": every request's connection is reset, as a refused or dropped connection looks; "hang":
        requests get no answer until the partition ends, as when packets are dropped), or heal it
        (``mode=None``). Open watch streams on that port are cut. Other ports are served as usual."""
        if mode is None:
            self.partitions.pop(port, None)
        else:
            if mode not in ("reset", "hang"):
                raise ValueError(f"unknown partition mode {mode!r}")
            self.partitions[port] = mode
        self._notify()

    def _cut(self, port: int) -> str | None:
        """How a request on `port` is cut right now ("reset", "hang"), or None when it is served."""
        return "reset" if self.outage else self.partitions.get(port)

    def expire_watches(self) -> None:
        """Compact the event history (every resourceVersion seen so far becomes too old) and end every open
        watch stream: a client resuming its watch from its last resourceVersion gets ``410 Gone`` (reason
        Expired) and must list again, as after an etcd compaction on a real API server."""
        self._events_floor = self._rv
        self._events.clear()
        self._event_rvs.clear()
        self._watch_epoch += 1
        self._notify()

    async def _serve_http(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        sockname = raw.transport.get_extra_info("sockname") if raw.transport is not None else None
        port = int(sockname[1]) if sockname else 0
        peername = raw.transport.get_extra_info("peername") if raw.transport is not None else None
        entry = JournalEntry(raw.method, raw.path, raw.query_string,
                             raw.headers.get("Content-Type", ""), None, raw.headers.get("User-Agent", ""), port,
                             peer_port=int(peername[1]) if peername else 0)
        self.journal.append(entry)
        hung = self._cut(port) == "hang"
        while hung and not self._stopping and self._cut(port) == "hang":
            changed = self._changed
            await changed.wait()
        gone = hung and (raw.transport is None or raw.transport.is_closing())  # the client left meanwhile
        if self._cut(port) or (hung and self._stopping) or gone:
            entry.status = 0
            if raw.transport is not None:
                raw.transport.abort()
            return aiohttp.web.Response(status=503)  # never delivered: the connection is gone
        try:
            if self.bearer_tokens is not None:
                auth = raw.headers.get("Authorization", "")
                scheme, _, token = auth.partition(" ")
                if scheme.lower() != "bearer" or token.strip() not in self.bearer_tokens:
                    raise ApiError(401, "Unauthorized", "Unauthorized")
            fault = await self._take_fault(raw)
            if fault is not None:
                raise ApiError(fault.status, "InternalError", "injected fault (test)")
            response = await self._route(raw, entry)
        except ApiError as exc:
            response = exc.response()
        except Exception as exc:  # a bug of the emulator: answer 500, and keep it for the test to see
            if isinstance(exc, ConnectionResetError) and (raw.transport is None or raw.transport.is_closing()):
                # The client went away (gave up waiting, timed out) before its answer or its exec upgrade
                # was written ("Cannot write to closing transport"): a normal end, as a real API server
                # sees it (one line; no 500 of its own, no traceback).
                logger.info("client went away during %s %s", raw.method, raw.path)
                if entry.status is None:
                    entry.status = 0
                return aiohttp.web.Response(status=503)  # never delivered: aiohttp drops the connection
            logger.exception("emulator failure on %s %s", raw.method, raw.path)
            self.server_errors.append(exc)
            response = ApiError(500, "InternalError", f"emulator failure: {exc!r}").response()
        if entry.status is None:
            entry.status = response.status
        entry.answered = time.time()
        return response

    def fail_next(self, method: str, path: str, *, status: int = 500, n: int = 1,
                  body_contains: str | None = None) -> None:
        """Answer the next ``n`` requests ``method path`` (exact path, e.g. a status subresource) whose
        body contains ``body_contains`` (if given) with ``status``, without applying them: a fault of the
        API server as a controller sees it."""
        self.faults.append(Fault(method.upper(), path, status, n, body_contains))

    async def _take_fault(self, raw: aiohttp.web.BaseRequest) -> Fault | None:
        for fault in self.faults:
            if fault.remaining <= 0 or fault.method != raw.method or fault.path != raw.path:
                continue
            if fault.body_contains is not None and fault.body_contains not in (await raw.read()).decode("utf-8", "replace"):
                continue
            fault.remaining -= 1
            return fault
        return None

    def _info(self, res: kmock.resource) -> kmock.ResourceInfo:
        return self.discovery.resources[res]

    async def _route(self, raw: aiohttp.web.BaseRequest, entry: JournalEntry) -> aiohttp.web.StreamResponse:
        p = _parse_path(raw.path)
        if p is None and raw.path.rstrip("/") == "/api/v1":
            return self._serve_core_discovery()  # kmock 0.8 answers groupVersion "/v1" here
        gv = raw.path.rstrip("/").split("/")
        if p is None and len(gv) == 4 and gv[1] == "apis" and any(
                r.group == gv[2] and r.version == gv[3] for r in self.discovery.resources):
            # kmock lists a subresource (agentboxes/status) with the kind's shortNames, which kubectl
            # then warns about on every `get abox`; a real API server gives them to the kind only.
            return self._serve_core_discovery(gv[2], gv[3])
        if p is None and raw.path.rstrip("/") == "/version":  # what `kubectl version` and clients probe
            return aiohttp.web.json_response({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-agentbox-emulator", "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
                "compiler": "gc", "platform": "linux/amd64"})
        if p is None:  # discovery: kmock's scaffold
            response = await self.discovery(raw)
            self.discovery._requests.clear()  # no history: kmock matches against it (quadratic)
            errors = self.discovery.errors
            for err in errors:
                if not isinstance(err, kmock.KubernetesError) or err.status >= 500:
                    self.server_errors.append(err)
            errors.clear()
            return response
        res = kmock.resource(p.group, p.version, p.plural)
        if res not in self.discovery.resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        info = self._info(res)
        if res == self._pod_res and p.subresource == "exec" and p.name:
            return await self._serve_exec(raw, p.namespace or "", p.name)
        if p.subresource not in (None, "status") or (p.subresource == "status" and "status" not in info.subresources):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if (info.namespaced and p.name is not None and p.namespace is None) or (
                not info.namespaced and p.namespace is not None):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        query = raw.query
        method = raw.method.upper()
        if method == "GET":
            if query.get("watch") in ("true", "1"):
                return await self._serve_watch(raw, entry, res, p)
            if p.name is None:
                return self._serve_list(res, p.namespace, query)
            obj = self._store.get((res, p.namespace or "", p.name))
            if obj is None:
                raise _not_found(res, p.name)
            return aiohttp.web.json_response(obj)
        body = await self._read_body(raw)
        if method == "POST" and p.name is None:
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
            return aiohttp.web.json_response(self._create(res, p.namespace, body), status=201)
        if method == "PUT" and p.name is not None:
            return aiohttp.web.json_response(self._put(res, p, body))
        if method == "PATCH" and p.name is not None:
            return aiohttp.web.json_response(self._patch(res, p, raw.content_type, body))
        if method == "DELETE" and p.name is not None and p.subresource is None:
            key = (res, p.namespace or "", p.name)
            return aiohttp.web.json_response(self._delete(res, key, body if isinstance(body, dict) else {}))
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource")

    def _serve_core_discovery(self, group: str = "", version: str = "v1") -> aiohttp.web.Response:
        """An APIResourceList of one group version (core `v1` by default), as a real API server's."""
        resources = []
        for res in sorted((r for r in self.discovery.resources if r.group == group and r.version == version),
                          key=lambda r: str(r.plural)):
            info = self._info(res)
            for sub in ["", *sorted(info.subresources)]:
                resources.append({
                    "name": f"{res.plural}/{sub}" if sub else res.plural,
                    "singularName": info.singular or "" if not sub else "",
                    "namespaced": bool(info.namespaced),
                    "kind": info.kind,
                    "verbs": (sorted(info.verbs) if not sub else ["get", "patch", "update"]
                              if sub in ("status", "finalize") else ["create", "get"]),
                    **({"shortNames": sorted(info.shortnames)} if info.shortnames and not sub else {}),
                    **({"categories": sorted(info.categories)} if info.categories and not sub else {}),
                })
        return aiohttp.web.json_response({"kind": "APIResourceList", "apiVersion": "v1",
                                          "groupVersion": f"{group}/{version}" if group else version,
                                          "resources": resources})

    @staticmethod
    async def _read_body(raw: aiohttp.web.BaseRequest) -> Any:
        data = await raw.read()
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise ApiError(400, "BadRequest", "the body of the request is not valid JSON") from None

    # ---------------------------------------------------------------------------------- reads

    def _matching(self, res: kmock.resource, namespace: str | None, query: Mapping[str, str],
                  name: str | None = None) -> Callable[[JsonObj], bool]:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))

        def match(obj: JsonObj) -> bool:
            meta = obj.get("metadata", {})
            return ((namespace is None or meta.get("namespace", "") == namespace)
                    and (name is None or meta.get("name") == name)
                    and labels(_labels(obj)) and fields(obj))
        return match

    def _serve_list(self, res: kmock.resource, namespace: str | None, query: Mapping[str, str]) -> aiohttp.web.Response:
        match = self._matching(res, namespace, query)
        items = [obj for _, obj in self._store.of(res) if match(obj)]
        return aiohttp.web.json_response({
            "apiVersion": f"{res.group}/{res.version}" if res.group else res.version,
            "kind": f"{self._info(res).kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        })

    async def _serve_watch(self, raw: aiohttp.web.BaseRequest, entry: JournalEntry, res: kmock.resource,
                           p: _Path) -> aiohttp.web.StreamResponse:
        port = entry.port
        query = raw.query
        match = self._matching(res, p.namespace, query, name=p.name)
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        rv_param = query.get("resourceVersion")
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        entry.status = 200
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        try:
            if rv_param in (None, "", "0"):
                cursor = self._rv
                initial = [obj for _, obj in self._store.of(res) if match(obj)]
                for obj in initial:
                    await response.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            else:
                cursor = int(rv_param) if rv_param.isdigit() else 0
                if cursor < self._events_floor:
                    gone = {"type": "ERROR", "object": {
                        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                        "message": f"too old resource version: {cursor} ({self._events_floor})",
                        "reason": "Expired", "code": 410}}
                    await response.write(json.dumps(gone).encode() + b"\n")
                    return response
            epoch = self._watch_epoch
            while not self._stopping and not self._cut(port) and epoch == self._watch_epoch:
                changed = self._changed
                start = bisect.bisect_right(self._event_rvs, cursor)
                if cursor < self._events_floor:
                    break  # fell behind the trimmed log: let the client re-list
                batch = self._events[start:]
                for rv, r, etype, obj in batch:
                    cursor = rv
                    if r == res and match(obj):
                        await response.write(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
                if batch:
                    continue
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    break
            if self._cut(port):
                if raw.transport is not None:
                    raw.transport.abort()
                return response
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            pass  # the client went away
        return response

    # ---------------------------------------------------------------------------------- writes

    def _emit(self, res: kmock.resource, etype: str, obj: JsonObj) -> None:
        self._events.append((self._rv, res, etype, copy.deepcopy(obj)))
        self._event_rvs.append(self._rv)
        for listener in self._listeners:
            try:
                listener(res, etype, obj)
            except Exception:  # a listener's bug must not break the write that triggered it
                logger.exception("emulator listener failed")
        if len(self._events) > 2 * self._event_log_size:
            cut = len(self._events) - self._event_log_size
            self._events_floor = self._event_rvs[cut - 1]
            del self._events[:cut]
            del self._event_rvs[:cut]
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _validate(self, res: kmock.resource, obj: JsonObj) -> None:
        validator = self._schemas.get(res)
        if validator is None:
            return
        errors = sorted(validator.iter_errors(obj), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        duplicates = list(_list_map_duplicates(self._openapi.get(res) or {}, obj, []))
        if not errors and not duplicates:
            return
        info = self._info(res)
        name = obj.get("metadata", {}).get("name", "")
        causes = [{"reason": "FieldValueInvalid", "message": f"Invalid value: {e.message}",
                   "field": _json_path(e.absolute_path)} for e in errors]
        causes += [{"reason": "FieldValueDuplicate", "message": f"Duplicate value: {key}", "field": _json_path(path)}
                   for path, key in duplicates]
        text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        raise ApiError(422, "Invalid", f'{info.kind}.{res.group} "{name}" is invalid: {text}',
                       {"name": name, "group": res.group, "kind": info.kind, "causes": causes})

    def _normalize(self, res: kmock.resource, obj: JsonObj) -> None:
        """Type-specific server-side rewrites (what apiserver strategies do)."""
        if res.group == "" and res.plural == "secrets":
            string_data = obj.pop("stringData", None)
            if string_data:
                data = dict(obj.get("data") or {})
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
                obj["data"] = data

    def _create(self, res: kmock.resource, namespace: str | None, body: JsonObj, *, internal: bool = False) -> JsonObj:
        info = self._info(res)
        obj = copy.deepcopy(body)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if info.namespaced:
            ns = namespace or meta.get("namespace")
            if not ns:
                raise ApiError(400, "BadRequest", "the namespace of the object is required")
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                                                  "the namespace sent on the request")
            if (self._ns_res, "", ns) not in self._store:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                               {"name": ns, "kind": "namespaces"})
            if self.namespace_terminating(ns):
                raise ApiError(403, "Forbidden", f'{res.plural} "{meta.get("name") or meta.get("generateName") or ""}" '
                                                 f"is forbidden: unable to create new content in namespace {ns} "
                                                 "because it is being terminated",
                               {"name": meta.get("name"), "kind": res.plural})
            meta["namespace"] = ns
        else:
            ns = ""
            meta.pop("namespace", None)
        name = meta.get("name")
        if not name and meta.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            while True:
                name = meta["generateName"] + "".join(_secrets.choice(alphabet) for _ in range(5))
                if (res, ns, name) not in self._store:
                    break
        if not name:
            raise ApiError(422, "Invalid", f"{info.kind} is invalid: metadata.name: Required value: "
                                           "name or generateName is required")
        meta["name"] = name
        key = (res, ns, name)
        if key in self._store:
            raise ApiError(409, "AlreadyExists", f'{_qualified(res)} "{name}" already exists',
                           {"name": name, "group": res.group, "kind": res.plural})
        obj["apiVersion"] = f"{res.group}/{res.version}" if res.group else res.version
        obj["kind"] = info.kind
        if not internal and res in self._custom and "status" in info.subresources:
            obj.pop("status", None)  # a CR's status is written through /status only
        if res == self._pod_res and not obj.get("status"):
            obj["status"] = {"phase": "Pending"}
        if res == self._ns_res and not obj.get("status"):
            obj["status"] = {"phase": "Active"}
        if res == self._ns_res:
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        self._normalize(res, obj)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        self._validate(res, obj)
        meta["resourceVersion"] = self._next_rv()
        self._store[key] = obj
        self._emit(res, "ADDED", obj)
        return obj

    def _put(self, res: kmock.resource, p: _Path, body: Any) -> JsonObj:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
        key = (res, p.namespace or "", p.name or "")
        current = self._store.get(key)
        if current is None:
            raise _not_found(res, key[2])
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, key[2]):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        rv = meta.get("resourceVersion")
        if rv not in (None, "") and str(rv) != current["metadata"]["resourceVersion"]:
            raise _conflict(res, key[2])
        return self._update(res, key, body, subresource=p.subresource)

    def _patch(self, res: kmock.resource, p: _Path, content_type: str, body: Any) -> JsonObj:
        key = (res, p.namespace or "", p.name or "")
        current = self._store.get(key)
        if current is None:
            raise _not_found(res, key[2])
        if content_type == "application/json-patch+json":
            if not isinstance(body, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            try:
                new = jsonpatch.JsonPatch(body).apply(copy.deepcopy(current))
            except jsonpatch.JsonPatchTestFailed as exc:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                               f"request: test operation failed: {exc}") from None
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                               f"request: {exc}") from None
        elif content_type == "application/strategic-merge-patch+json" and res in self._custom:
            # A real API server has no strategic merge for custom resources (no patch strategy in their schema).
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                                        "accepted media types include: application/json-patch+json, "
                                                        "application/merge-patch+json, application/apply-patch+yaml")
        elif content_type in _MERGE_TYPES:
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv not in (None, "") and str(rv) != current["metadata"]["resourceVersion"]:
                raise _conflict(res, key[2])
            new = _merge_patch(current, body)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                        f"accepted media types include: application/json-patch+json, "
                                                        f"application/merge-patch+json, "
                                                        f"application/strategic-merge-patch+json")
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patched object is not a JSON object")
        return self._update(res, key, new, subresource=p.subresource)

    def _update(self, res: kmock.resource, key: _Key, new: JsonObj, *, subresource: str | None,
                internal: bool = False) -> JsonObj:
        """Commit a full new state of an existing object with the apiserver's rules (see module doc)."""
        info = self._info(res)
        current = self._store[key]
        if subresource == "status":
            result = copy.deepcopy(current)
            if "status" in new:
                result["status"] = copy.deepcopy(new["status"])
            else:
                result.pop("status", None)
        else:
            result = copy.deepcopy(new)
            if not internal and "status" in info.subresources:
                if "status" in current:
                    result["status"] = copy.deepcopy(current["status"])
                else:
                    result.pop("status", None)
        meta = result.get("metadata")
        if not isinstance(meta, dict):
            meta = result["metadata"] = {}
        cmeta = current["metadata"]
        for k in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "generation", "resourceVersion"):
            if k in cmeta:
                meta[k] = cmeta[k]
            else:
                meta.pop(k, None)
        result["apiVersion"], result["kind"] = current["apiVersion"], current["kind"]
        self._normalize(res, result)
        if cmeta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(cmeta.get("finalizers") or [])
            if added:
                raise ApiError(422, "Invalid", f'{info.kind} "{key[2]}" is invalid: metadata.finalizers: '
                                               f"Forbidden: no new finalizers can be added if the object is being deleted")
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if result.get("spec") != current.get("spec"):
            meta["generation"] = int(cmeta.get("generation", 1)) + 1
        if result == current:
            return current  # a no-op write does not bump the resourceVersion
        self._validate(res, result)
        meta["resourceVersion"] = self._next_rv()
        self._store[key] = result
        self._emit(res, "MODIFIED", result)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(res, key)
        return result

    def _delete(self, res: kmock.resource, key: _Key, options: JsonObj) -> JsonObj:
        current = self._store.get(key)
        if current is None:
            raise _not_found(res, key[2])
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise _conflict(res, key[2])
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != current["metadata"]["resourceVersion"]:
            raise _conflict(res, key[2])
        orphan = options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents") is True
        if res == self._ns_res:
            return self._delete_namespace(key)
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return current
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = _now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked["metadata"]["resourceVersion"] = self._next_rv()
            self._store[key] = marked
            self._emit(res, "MODIFIED", marked)
            return marked
        return self._remove(res, key, cascade=not orphan)

    def _delete_namespace(self, key: _Key) -> JsonObj:
        """A Namespace goes as on a real cluster: ``deletionTimestamp`` and ``phase: Terminating`` first
        (its ``spec.finalizers: [kubernetes]``), then the namespace controller deletes every object in it
        (objects with finalizers stay Terminating until those are removed), and the Namespace itself is
        removed once it is empty.  Creating objects in a terminating namespace answers 403."""
        current = self._store[key]
        name = key[2]
        if not current["metadata"].get("deletionTimestamp"):
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = _now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked.setdefault("status", {})["phase"] = "Terminating"
            marked["metadata"]["resourceVersion"] = self._next_rv()
            self._store[key] = marked
            self._emit(self._ns_res, "MODIFIED", marked)
            current = marked
        for other in [k for k in self._store if k[1] == name and k[0] != self._ns_res]:
            obj = self._store.get(other)
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                self._delete(other[0], other, {})
        self._finish_namespace(name)
        return current

    def _finish_namespace(self, name: str) -> None:
        """Remove a terminating Namespace once no object is left in it."""
        key = (self._ns_res, "", name)
        ns = self._store.get(key)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if any(k[1] == name for k in self._store if k[0] != self._ns_res):
            return
        self._remove(self._ns_res, key, cascade=False)

    def namespace_terminating(self, name: str) -> bool:
        """The Namespace exists and is being deleted."""
        ns = self._store.get((self._ns_res, "", name))
        return bool(ns and ns["metadata"].get("deletionTimestamp"))

    def _remove(self, res: kmock.resource, key: _Key, *, cascade: bool = True) -> JsonObj:
        obj = self._store.pop(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(res, "DELETED", obj)
        if res == self._pod_res and self.exec_handler is not None:
            release = getattr(self.exec_handler, "release", None)
            if release is not None:
                release(key[1], key[2])
        if res == self._crd_res:
            self._remove_crd(obj)
        if cascade:
            self._collect_garbage(obj, namespace_gone=key[2] if res == self._ns_res else None)
        if key[1] and self.namespace_terminating(key[1]):
            self._finish_namespace(key[1])
        return obj

    def _remove_crd(self, crd: JsonObj) -> None:
        """A deleted CRD stops being served (requests for it answer 404) and its objects are deleted, as
        the API server does (it removes every custom resource before the CRD goes)."""
        spec = crd.get("spec") or {}
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        gone = {r for r in self._custom if r.group == group and r.plural == plural}
        for key in [k for r in gone for k, _ in self._store.of(r)]:
            if key in self._store:
                self._remove(key[0], key)
        for res in gone:
            self.discovery.resources.pop(res, None)
            self._custom.discard(res)
            self._schemas.pop(res, None)
            self._openapi.pop(res, None)

    def _collect_garbage(self, owner: JsonObj, namespace_gone: str | None) -> None:
        """Delete dependents whose owners are all gone (background GC), and a deleted namespace's objects."""
        live_uids = {o["metadata"]["uid"] for o in self._store.values()}
        victims: list[_Key] = []
        for key, obj in self._store.items():
            if namespace_gone is not None and key[1] == namespace_gone:
                victims.append(key)
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            owners = {ref.get("uid") for ref in refs}
            if owner["metadata"]["uid"] in owners and not (owners & live_uids):
                victims.append(key)
        for key in victims:
            if key in self._store:
                self._delete(key[0], key, {})

    # ---------------------------------------------------------------------------------- exec

    async def _serve_exec(self, raw: aiohttp.web.BaseRequest, namespace: str, name: str) -> aiohttp.web.StreamResponse:
        pod = self._store.get((self._pod_res, namespace, name))
        if pod is None:
            raise _not_found(self._pod_res, name)
        argv = list(raw.query.getall("command", []))
        if not argv:
            raise ApiError(400, "BadRequest", "you must specify at least 1 command")
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = raw.query.get("container") or (names[0] if names else "")
        if names and container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        phase = (pod.get("status") or {}).get("phase")
        if self.require_running and phase != "Running":
            raise ApiError(400, "BadRequest", f"unable to upgrade connection: pod {name} is not running "
                                              f"(phase {phase})")
        if self.exec_handler is None:
            raise ApiError(400, "BadRequest", "exec is not configured in this emulator")
        refuse = getattr(self.exec_handler, "refuse", None)
        problem = refuse(namespace, name, container) if refuse is not None else None
        if problem:
            raise ApiError(400, "BadRequest", f"unable to upgrade connection: {problem}")
        if raw.headers.get("Upgrade", "").lower() != "websocket":
            raise ApiError(400, "BadRequest", "Upgrade request required")
        transport = raw.transport
        if transport is not None:
            self._exec_transports.add(transport)
        try:
            return await self._serve_exec_upgraded(raw, namespace, name, container, argv)
        finally:
            if transport is not None:
                self._exec_transports.discard(transport)

    async def _serve_exec_upgraded(self, raw: aiohttp.web.BaseRequest, namespace: str, name: str, container: str,
                                   argv: list[str]) -> aiohttp.web.StreamResponse:
        fault = next((f for f in self.exec_faults if f.applies(name, argv)), None)
        if fault is not None and fault.when == "before" and fault.on_match is not None:
            fault.on_match()
        if fault is not None and fault.mode == "refuse":
            raise ApiError(500, "InternalError", f"error dialing backend: dial tcp: connect: connection refused")
        if fault is None and raw.query.get("stdin") in ("true", "1") and getattr(self.exec_handler, "spawn", None):
            # interactive: streamed as the kubelet streams it (an injected fault keeps the one-shot path)
            return await self._serve_exec_stream(raw, namespace, name, container, argv)
        ws = aiohttp.web.WebSocketResponse(protocols=_CHANNEL_PROTOCOLS, compress=False)  # see _serve_exec_stream
        await ws.prepare(raw)
        protocol = ws.ws_protocol or ""
        want_stdin = raw.query.get("stdin") in ("true", "1")
        stdin = await self._read_stdin(ws, protocol) if want_stdin else None
        if fault is not None and fault.mode in ("hang", "drop"):
            if fault.mode == "hang":
                while not self._stopping and not ws.closed:
                    await asyncio.sleep(0.2)
            await ws.close()
            return ws
        task = asyncio.ensure_future(self.exec_handler(namespace, name, container, argv, stdin))
        self._exec_tasks.add(task)
        task.add_done_callback(self._exec_tasks.discard)
        try:
            out, err, rc = await task
        except Exception as exc:
            logger.exception("exec handler failed")
            out, err, rc = b"", f"exec handler failed: {exc!r}\n".encode(), 126
        if fault is not None and fault.mode == "slow":
            await asyncio.sleep(fault.delay_s)
        if fault is not None and fault.when == "after" and fault.on_match is not None:
            fault.on_match()
        self.exec_journal.append(ExecRecord(namespace, name, container, tuple(argv), rc, protocol))
        await self._send_exit(ws, out, err, rc)
        return ws

    async def _serve_exec_stream(self, raw: aiohttp.web.BaseRequest, namespace: str, name: str, container: str,
                                 argv: list[str]) -> aiohttp.web.WebSocketResponse:
        """An exec with stdin, streamed as the API server proxies it from the kubelet: channel-0 frames go to
        the command's stdin as they arrive (v5 ``[255, 0]`` closes it; v4 has no close signal, so stdin
        stays open until the connection closes), stdout and stderr go out as frames as the command prints,
        then the channel-3 status.  The client closing the connection kills the command."""
        # No permessage-deflate (RFC 7692): the API server's websocket streams (apimachinery's
        # httpstream/wsstream, on golang.org/x/net/websocket) never negotiate it; aiohttp's default would
        # deflate every frame both ways, a cost a real cluster does not have.
        ws = aiohttp.web.WebSocketResponse(protocols=_CHANNEL_PROTOCOLS, heartbeat=None, compress=False)
        await ws.prepare(raw)
        protocol = ws.ws_protocol or ""
        self.exec_streams.append((namespace, name, container, tuple(argv)))
        try:
            proc = await self.exec_handler.spawn(namespace, name, container, argv)  # type: ignore[union-attr]
        except (FileNotFoundError, PermissionError) as exc:
            rc = 127 if isinstance(exc, FileNotFoundError) else 126
            self.exec_journal.append(ExecRecord(namespace, name, container, tuple(argv), rc, protocol))
            await self._send_exit(ws, b"", f'exec: "{argv[0]}": {exc.strerror}\n'.encode(), rc)
            return ws
        except LookupError as exc:  # the kubelet model: the container stopped meanwhile
            self.exec_journal.append(ExecRecord(namespace, name, container, tuple(argv), 126, protocol))
            await self._send_exit(ws, b"", f"{exc}\n".encode(), 126)
            return ws
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        send_lock = asyncio.Lock()
        control = "-C" in argv[:3] and argv[:1] == ["tmux"]
        # stream faults (control mode): commands forwarded to tmux, replies seen, armed "after" faults
        ctl: dict[str, Any] = {"sent": 0, "ended": 0, "dead": False, "armed": [], "scan": b""}

        def fire_after(chunk: bytes) -> bool:
            """Count tmux's replies to our commands in stdout; True when the chunk must not be sent."""
            ctl["scan"] += chunk
            *lines, ctl["scan"] = ctl["scan"].split(b"\n")
            hold = False
            for line in lines:
                parts = line.rstrip(b"\r").split(b" ")
                if parts[0] in (b"%end", b"%error") and len(parts) == 4 and parts[3] != b"0":
                    ctl["ended"] += 1
                    for target, fault in list(ctl["armed"]):
                        if target <= ctl["ended"]:
                            ctl["armed"].remove((target, fault))
                            if fault.on_match is not None:
                                fault.on_match()
                            if fault.mode == "cut":
                                asyncio.ensure_future(ws.close())
                                hold = True
                            elif fault.mode == "drop":
                                ctl["dead"] = True
            return hold or ctl["dead"]

        def filter_stdin(data: bytes) -> bytes:
            """What of one stdin frame reaches tmux (stream faults applied). A frame is one write of the
            client: a process killed before it wrote sent none of its lines, so a "before" fault matching any
            line drops the whole frame."""
            if not (control and self.stream_faults) or ctl["dead"]:
                return b"" if ctl["dead"] else data
            lines = data.splitlines(keepends=True)
            matched: list[ExecFault | None] = []
            for line in lines:
                try:
                    words = ["tmux", *shlex.split(line.decode("utf-8", "replace"))]
                except ValueError:
                    words = ["tmux", line.decode("utf-8", "replace")]
                fault = next((f for f in self.stream_faults if f.applies(name, words)), None)
                if fault is not None and fault.when == "before":
                    if fault.on_match is not None:
                        fault.on_match()
                    if fault.mode in ("cut", "drop"):
                        if fault.mode == "cut":
                            asyncio.ensure_future(ws.close())
                        ctl["dead"] = True
                        return b""
                matched.append(fault)
            for fault in matched:
                ctl["sent"] += 1
                if fault is not None and fault.when == "after":
                    ctl["armed"].append((ctl["sent"], fault))
            return data

        async def pump(reader: asyncio.StreamReader, channel: int) -> None:
            while chunk := await reader.read(_FRAME_CHUNK):
                if control and channel == _STDOUT and self.stream_faults and fire_after(chunk):
                    continue  # the client was killed (or cut off) before this reply reached it
                async with send_lock:
                    if ws.closed:
                        return
                    try:
                        await ws.send_bytes(bytes([channel]) + chunk)
                    except (ConnectionError, aiohttp.ClientConnectionResetError):
                        return

        async def feed() -> None:
            stdin = proc.stdin
            assert stdin is not None
            async for msg in ws:
                data = _frame_bytes(msg)
                if data is None:
                    break
                if not data:
                    continue
                if data[0] == _CLOSE and len(data) > 1 and data[1] == _STDIN and protocol == V5_PROTOCOL:
                    stdin.close()
                elif data[0] == _STDIN and not stdin.is_closing():
                    try:
                        stdin.write(filter_stdin(data[1:]))
                        await stdin.drain()
                    except (ConnectionError, BrokenPipeError):
                        pass
            # the client went away: the API server tears the stream down and the command with it
            if proc.returncode is None:
                await LocalExec._kill(proc)

        pumps = asyncio.gather(pump(proc.stdout, _STDOUT), pump(proc.stderr, _STDERR))
        feeder = asyncio.ensure_future(feed())
        waiter = asyncio.ensure_future(proc.wait())
        self._exec_tasks.update((feeder, waiter))
        try:
            await asyncio.wait({waiter, feeder}, return_when=asyncio.FIRST_COMPLETED)
            await pumps
            rc = await waiter
        except asyncio.CancelledError:
            await LocalExec._kill(proc)
            raise
        finally:
            feeder.cancel()
            self._exec_tasks.discard(feeder)
            self._exec_tasks.discard(waiter)
        rc = rc if rc >= 0 else 128 - rc
        self.exec_journal.append(ExecRecord(namespace, name, container, tuple(argv), rc, protocol))
        await self._send_exit(ws, b"", b"", rc)
        return ws

    @staticmethod
    async def _send_exit(ws: aiohttp.web.WebSocketResponse, out: bytes, err: bytes, rc: int) -> None:
        """Send remaining output, the channel-3 status of exit code ``rc``, and close."""
        try:
            for channel, data in ((_STDOUT, out), (_STDERR, err)):
                for i in range(0, len(data), _FRAME_CHUNK):
                    await ws.send_bytes(bytes([channel]) + data[i:i + _FRAME_CHUNK])
            if rc == 0:
                status: JsonObj = {"metadata": {}, "status": "Success"}
            else:
                status = {"metadata": {}, "status": "Failure",
                          "message": f"command terminated with non-zero exit code: exit code {rc}",
                          "reason": "NonZeroExitCode",
                          "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]}}
            await ws.send_bytes(bytes([_STATUS]) + json.dumps(status).encode())
            await ws.close()
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            pass

    @staticmethod
    async def _read_stdin(ws: aiohttp.web.WebSocketResponse, protocol: str) -> bytes:
        """Collect channel-0 frames until the v5 close-stdin signal, the socket closing, or (v4, which
        has no close signal) 0.5 s without input."""
        idle = 10.0 if protocol == V5_PROTOCOL else 0.5
        chunks: list[bytes] = []
        while True:
            try:
                msg = await asyncio.wait_for(ws.receive(), idle)
            except TimeoutError:
                break
            data = _frame_bytes(msg)
            if data is None:
                break
            if not data:
                continue
            if data[0] == _CLOSE and len(data) > 1 and data[1] == _STDIN:
                break
            if data[0] == _STDIN:
                chunks.append(data[1:])
        return b"".join(chunks)
