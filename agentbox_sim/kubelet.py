"""A kubelet model for the API emulator: runs the containers of stored Pods as real processes, as a
kubelet and a container runtime would, where it matters for boxes.

What it models (and tests rely on):

* **Volumes** (``secret``, ``configMap``, ``emptyDir``) materialised as a kubelet's atomic writer does:
  a ``..<timestamp>`` directory holding the files, a ``..data`` symlink to it, one symlink per key; files
  owned by root with ``items[].mode`` / ``defaultMode`` (default 0644); with a pod ``fsGroup`` every file
  and directory gets that group, files ``|= 0440`` (read-only volumes), directories ``|= 0550`` and setgid
  (kubelet ``SetVolumeOwnership``); Secret and ConfigMap volumes are mounted read-only (kernel-enforced:
  ``EROFS``); a missing Secret keeps the container in ``ContainerCreating``; Secret updates are projected
  into running pods. A ``persistentVolumeClaim`` needs the claim to exist and maps to a directory that
  outlives the pod (root-owned 0755 when new, group-owned setgid ``g+rwx`` with a pod ``fsGroup``).
* **The container's user**: ``runAsUser``/``runAsGroup`` (container over pod over the image's ``USER``),
  supplementary groups ``[gid, *supplementalGroups, fsGroup]``; ``runAsNonRoot`` with uid 0 is a
  ``CreateContainerConfigError``.  The process really runs as that uid/gid (``setgroups``/``setgid``/
  ``setuid`` after the mounts), in its own mount namespace with the volumes, the image's files and a
  private ``/tmp`` bound at their container paths; ``readOnlyRootFilesystem`` makes that namespace's ``/``
  read-only (volumes and the image's writable directories stay as mounted).
* ``command``/``args`` (override the image's ``ENTRYPOINT``/``CMD``), ``env`` (``value`` with ``$(VAR)``
  expansion, ``valueFrom.secretKeyRef``/``configMapKeyRef``/``fieldRef`` name and namespace),
  ``workingDir`` (else the image's ``WORKDIR``).
* **Restarts**: ``restartPolicy`` Always/OnFailure/Never; back-off doubling from ``backoff_base`` to
  ``backoff_cap`` seconds (a kubelet: 10 s to 300 s), reset after ``backoff_reset`` seconds of running;
  ``containerStatuses`` with ``state`` (``waiting`` ``ContainerCreating``/``CrashLoopBackOff``/
  ``ErrImagePull``/``CreateContainerConfigError``, ``running``, ``terminated``), ``lastState.terminated``
  (exit code, reason ``Error``/``Completed``), ``restartCount``, ``ready``, ``started``; pod ``phase``
  (Pending until a container started; Running while one runs or restarts; Succeeded/Failed when all
  ended for good) and the ``Ready``/``ContainersReady`` conditions (no probes: ready = running).
  When a container ends, every process left in its mount namespace is killed (its tmux server too).
  The namespace is pinned (an open fd) while the container is tracked: the kernel hands a freed
  namespace's id to the next one created, and the cleanup matches processes by that id.
* **Exec** (:class:`KubeletExec`): runs in the container's mount namespace, as its user, with its
  environment and working directory; a container that is not running answers 400.

Images are not pulled: :class:`ImageConfig` describes one (:func:`image_from_dockerfile` reads the
project's Dockerfiles so the model follows them); an unknown image is ``ErrImagePull``.  Every container
also gets the emulation's tools read-only: the test's Python at ``/opt/agentbox-sim/python`` and this
repository at ``/opt/agentbox-sim/src`` (for scripted agents).  Not modelled: probes, init containers,
resource limits, ``tini`` (an ``ENTRYPOINT`` prefix ``tini --`` is dropped), image layers other than the
files the Dockerfile ``COPY``s (host directories are seen through), user names (numeric ids only).

Needs root with ``CAP_SYS_ADMIN`` (mount namespaces, ``setuid``): :func:`kubelet_unavailable` says why
not, for tests to skip with the reason.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import json
import logging
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from typing import Any

from agentbox_sim.kube import KubeEmulator, LocalExec

logger = logging.getLogger("agentbox.sim.kubelet")

JsonObj = dict[str, Any]
SIM_ROOT = "/opt/agentbox-sim"
SIM_PYTHON = f"{SIM_ROOT}/python/bin/python3"
SIM_SRC = f"{SIM_ROOT}/src"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
_INIT = [sys.executable, "-m", "agentbox_sim.container_init"]


def kubelet_unavailable() -> str | None:
    """Why the kubelet model cannot run here (``None`` when it can): it needs root and mount namespaces."""
    if os.geteuid() != 0:
        return "the kubelet model runs containers as other users in mount namespaces: it needs root"
    res = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if res.returncode != 0:
        return "the kubelet model needs mount namespaces (unshare -m failed: no CAP_SYS_ADMIN?)"
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ImageConfig:
    """What the model knows of an image.

    Attributes:
        entrypoint, cmd: the image's ``ENTRYPOINT`` and ``CMD`` (exec form).
        uid, gid: the image's ``USER`` (numeric).
        env: the image's ``ENV`` (``PATH`` included).
        workdir: the image's ``WORKDIR`` ("/" if none).
        files: container path -> (file content, mode): what the Dockerfile ``COPY``s, plus test extras
            (e.g. a scripted ``claude`` at ``/usr/local/bin/claude``).
        owned_dirs: container directory -> (uid, gid, mode) created empty and writable per container
            (``HOME`` and ``WORKDIR`` owned by ``USER``, ``/tmp`` 1777).
    """

    entrypoint: list[str]
    cmd: list[str] = dataclasses.field(default_factory=list)
    uid: int = 0
    gid: int = 0
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    workdir: str = "/"
    files: dict[str, tuple[bytes, int]] = dataclasses.field(default_factory=dict)
    owned_dirs: dict[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)

    def with_files(self, files: Mapping[str, str | bytes], mode: int = 0o755) -> ImageConfig:
        """A copy with extra files (container path -> content), e.g. scripted agents on ``PATH``."""
        extra = {p: (c.encode() if isinstance(c, str) else c, mode) for p, c in files.items()}
        return dataclasses.replace(self, files={**self.files, **extra})


def _dockerfile_lines(text: str) -> list[str]:
    """Instructions with continuations joined and comments dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def image_from_dockerfile(dockerfile: pathlib.Path, context: pathlib.Path = REPO_ROOT) -> ImageConfig:
    """Read the final stage of a Dockerfile into an :class:`ImageConfig`.

    Understood: ``ENV`` (``K=V`` pairs), ``USER uid[:gid]`` (numeric), ``WORKDIR``, ``ENTRYPOINT``/``CMD``
    (exec form; a leading ``/usr/bin/tini --`` is dropped), ``COPY [--chmod=M] src dst`` from the build
    context.  ``HOME`` and ``WORKDIR`` become directories owned by ``USER`` (BuildKit creates ``WORKDIR``
    with the user's ownership), ``/tmp`` a 1777 directory.  ``RUN`` is not run.

    Raises:
        ValueError: an instruction uses a form this reader does not understand (shell-form ENTRYPOINT,
            a non-numeric USER).
    """
    lines = _dockerfile_lines(dockerfile.read_text())
    args: dict[str, str] = {}
    img = ImageConfig(entrypoint=[])
    path_default = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    img.env = {"PATH": path_default}
    for line in lines:
        word, _, rest = line.partition(" ")
        word = word.upper()
        rest = rest.strip()
        if word == "FROM":  # a new stage: only the last one counts
            img = ImageConfig(entrypoint=[], env={"PATH": path_default})
        elif word == "ARG":
            k, _, v = rest.partition("=")
            args[k] = v
        elif word == "ENV":
            for tok in shlex.split(rest):
                k, _, v = tok.partition("=")
                img.env[k] = v
        elif word == "USER":
            uid, _, gid = rest.partition(":")
            if not uid.isdigit() or (gid and not gid.isdigit()):
                raise ValueError(f"{dockerfile}: USER {rest!r}: the model needs numeric ids")
            img.uid, img.gid = int(uid), int(gid or uid)
        elif word == "WORKDIR":
            img.workdir = rest
        elif word in ("ENTRYPOINT", "CMD"):
            if not rest.startswith("["):
                raise ValueError(f"{dockerfile}: {word} must use the exec form")
            argv = json.loads(rest)
            if word == "ENTRYPOINT":
                if argv[:2] == ["/usr/bin/tini", "--"]:
                    argv = argv[2:]
                img.entrypoint = argv
            else:
                img.cmd = argv
        elif word == "COPY":
            toks = shlex.split(rest)
            mode = 0o644
            opts = [t for t in toks if t.startswith("--")]
            toks = [t for t in toks if not t.startswith("--")]
            if any(o.startswith("--from") for o in opts):
                continue  # from another stage: not a context file
            for o in opts:
                if o.startswith("--chmod="):
                    mode = int(o.split("=", 1)[1], 8)
            *srcs, dst = toks
            for src in srcs:
                path = context / src
                if path.is_file():
                    target = dst if not dst.endswith("/") else dst + path.name
                    img.files[target] = (path.read_bytes(), mode)
    home = img.env.get("HOME")
    if home:
        img.owned_dirs[home] = (img.uid, img.gid, 0o755)
    if img.workdir != "/":
        img.owned_dirs.setdefault(img.workdir, (img.uid, img.gid, 0o755))
    img.owned_dirs["/tmp"] = (0, 0, 0o1777)
    return img


def example_box_image(**extra_files: str) -> ImageConfig:
    """The example box image (``images/box/Dockerfile``), plus extra files (path -> script text)."""
    img = image_from_dockerfile(REPO_ROOT / "images/box/Dockerfile")
    return img.with_files(extra_files) if extra_files else img


def scripted_agent(agent: str, *args: str, log: str = "$HOME/agent.log") -> str:
    """A shell script standing for an agent CLI in an image: runs :mod:`agentbox_sim.fake_agent` with
    the emulation's Python (``agent``: ``claude-code`` | ``codex``; ``args``: the fake agent's options;
    ``log``: where it records keys, ``$HOME`` expanded in the container)."""
    return ("#!/bin/sh\n"
            f'AGENTBOX_FAKE_LOG="{log}" PYTHONPATH={SIM_SRC} exec {SIM_PYTHON} -m agentbox_sim.fake_agent '
            f'{shlex.quote(agent)} {shlex.join(args)} "$@"\n')


# --------------------------------------------------------------------------------------------------------
# Volumes
# --------------------------------------------------------------------------------------------------------

def write_projection(target: pathlib.Path, files: Mapping[str, tuple[bytes, int]], fs_group: int | None) -> None:
    """Write files as a kubelet's atomic writer: ``..<ts>/`` with the files, ``..data`` -> it, ``key`` ->
    ``..data/key``; owner root, the given modes; then the ``fsGroup`` ownership pass (read-only volume).

    ``files``: relative path -> (content, mode).  Replaces a previous projection atomically.
    """
    target.mkdir(parents=True, exist_ok=True)
    os.chown(target, 0, 0)
    target.chmod(0o1777)  # a tmpfs mount's root, as a kubelet leaves it
    stamp = target / (".." + datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S.") + uuid.uuid4().hex[:9])
    stamp.mkdir(mode=0o755)
    os.chown(stamp, 0, 0)
    for rel, (content, mode) in files.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chown(path, 0, 0)
        path.chmod(mode)
    old = os.readlink(target / "..data") if (target / "..data").is_symlink() else None
    tmp_link = target / "..data_tmp"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(stamp.name)
    os.replace(tmp_link, target / "..data")
    for rel in files:
        top = rel.split("/")[0]
        link = target / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    if old and old != stamp.name:
        shutil.rmtree(target / old, ignore_errors=True)
    if fs_group is not None:
        for root, dirs, names in os.walk(target):
            for d in dirs:
                _own(pathlib.Path(root) / d, fs_group, is_dir=True)
            for n in names:
                _own(pathlib.Path(root) / n, fs_group, is_dir=False)
        _own(target, fs_group, is_dir=True)


def _own(path: pathlib.Path, fs_group: int, *, is_dir: bool) -> None:
    """kubelet ``SetVolumeOwnership`` for a read-only volume: group ``fsGroup``, ``|= 0440`` (dirs also
    ``0110`` and setgid).  Symlinks are left alone (lchown only)."""
    if path.is_symlink():
        os.lchown(path, -1, fs_group)
        return
    os.chown(path, -1, fs_group)
    mode = path.stat().st_mode & 0o7777
    mask = 0o440 | (0o2110 if is_dir else 0)
    path.chmod(mode | mask)


class VolumeError(Exception):
    """A volume cannot be set up yet (the container stays ``ContainerCreating``); message as a kubelet's."""


class ConfigError(Exception):
    """The container's configuration is unusable (``CreateContainerConfigError``)."""


# --------------------------------------------------------------------------------------------------------
# The kubelet
# --------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Container:
    name: str
    image: str
    state: JsonObj = dataclasses.field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JsonObj = dataclasses.field(default_factory=dict)
    restarts: int = 0
    streak: int = 0             # crashes since the back-off was last reset
    started_once: bool = False
    done: bool = False          # ended for good (restart policy)
    pid: int | None = None      # main process while running
    ns_id: str | None = None    # its mount namespace ("mnt:[N]") while running
    ns_fd: int | None = None    # an open fd of that namespace: pins it, so its id is not reused meanwhile
    uid: int = 0
    gid: int = 0
    groups: list[int] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    cwd: str = "/"
    container_id: str = ""


@dataclasses.dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    containers: dict[str, _Container]
    task: asyncio.Task[None] | None = None
    ip: str = ""
    started_at: str = dataclasses.field(default_factory=_now)


class Kubelet:
    """Runs the containers of the emulator's Pods (see the module doc).

    Args:
        kube: the emulator; the kubelet listens to its stored changes.
        images: image reference -> :class:`ImageConfig`.
        root: host directory for pod data (``<root>/<ns>/<pod>/``: volumes, container-writable dirs, logs).
        backoff_base, backoff_cap, backoff_reset: restart back-off in seconds (a kubelet: 10, 300, 600).
        stop_grace: seconds between SIGTERM and SIGKILL when a container is stopped.

    Use ``await kubelet.start()`` (runs the pods already stored, then follows changes) and
    ``await kubelet.stop()`` (kills every container).
    """

    def __init__(self, kube: KubeEmulator, images: Mapping[str, ImageConfig], root: pathlib.Path, *,
                 backoff_base: float = 0.5, backoff_cap: float = 5.0, backoff_reset: float = 60.0,
                 stop_grace: float = 1.0) -> None:
        self.kube = kube
        self.images = dict(images)
        self.root = pathlib.Path(root)
        self.backoff_base, self.backoff_cap, self.backoff_reset = backoff_base, backoff_cap, backoff_reset
        self.stop_grace = stop_grace
        self.pods: dict[tuple[str, str], _Pod] = {}
        self._tmp_root = pathlib.Path(tempfile.mkdtemp(prefix="abx-kubelet-"))
        self._ips = 1
        self._stopping = False

    async def start(self) -> None:
        """Run the stored pods and follow pod and Secret changes."""
        self.kube.add_change_listener(self._on_change)
        for pod in self.kube.objects("v1/pods"):
            self._on_change(self.kube.resource("v1/pods"), "ADDED", pod)

    async def stop(self) -> None:
        """Kill every container and forget the pods."""
        self._stopping = True
        for key in list(self.pods):
            await self._drop(*key)
        shutil.rmtree(self._tmp_root, ignore_errors=True)

    # ------------------------------------------------------------------ paths
    def pod_dir(self, namespace: str, pod: str) -> pathlib.Path:
        """Host directory of a pod's data."""
        return self.root / namespace / pod

    def host_path(self, namespace: str, pod: str, container_path: str) -> pathlib.Path:
        """Where a container path of an image-owned directory or a volume lives on the host (for tests
        reading a box's files the way the box sees them); the first container's mounts are used."""
        st = self.pods.get((namespace, pod))
        obj = self.kube.get("v1/pods", namespace, pod)
        if st is None or obj is None:
            raise KeyError(f"pod {namespace}/{pod} is not run by the kubelet")
        ctr = next(iter(st.containers.values()))
        best: tuple[str, pathlib.Path] | None = None
        for host, target, _ in self._mounts(obj, ctr.name, ctr.image):
            if (container_path == target or container_path.startswith(target.rstrip("/") + "/")) and \
                    (best is None or len(target) > len(best[0])):
                best = (target, pathlib.Path(host))
        if best is None:
            raise KeyError(f"{container_path} is not on a volume or image directory of {namespace}/{pod}")
        return best[1] / os.path.relpath(container_path, best[0])

    def logs(self, namespace: str, pod: str, container: str) -> str:
        """What a container wrote to stdout/stderr (all its runs)."""
        path = self.pod_dir(namespace, pod) / "logs" / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ------------------------------------------------------------------ events
    def _on_change(self, res: Any, etype: str, obj: JsonObj) -> None:
        if self._stopping:
            return
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        if res.group == "" and res.plural == "pods":
            if etype == "DELETED" or meta.get("deletionTimestamp"):
                if key in self.pods:
                    asyncio.get_running_loop().create_task(self._drop(*key))
            elif key not in self.pods:
                ctrs = {c["name"]: _Container(c["name"], c.get("image", "")) for c in
                        (obj.get("spec") or {}).get("containers") or []}
                st = _Pod(key[0], key[1], meta.get("uid", ""), ctrs, ip=f"10.244.0.{self._ips}")
                self._ips += 1
                self.pods[key] = st
                st.task = asyncio.get_running_loop().create_task(self._run_pod(st))
        elif res.group == "" and res.plural == "secrets" and etype == "MODIFIED":
            for st in self.pods.values():
                pod = self.kube.get("v1/pods", st.namespace, st.name)
                if pod is not None and st.namespace == key[0]:
                    self._refresh_secret_volumes(pod, key[1])

    async def _drop(self, namespace: str, name: str) -> None:
        st = self.pods.pop((namespace, name), None)
        if st is None:
            return
        if st.task is not None:
            st.task.cancel()
            await asyncio.gather(st.task, return_exceptions=True)
        for ctr in st.containers.values():
            await self._kill_container(ctr)
        shutil.rmtree(self.pod_dir(namespace, name), ignore_errors=True)
        shutil.rmtree(self._tmp_root / f"{namespace}.{name}", ignore_errors=True)

    # ------------------------------------------------------------------ pod lifecycle
    async def _run_pod(self, st: _Pod) -> None:
        try:
            await asyncio.gather(*(self._run_container(st, c) for c in st.containers.values()))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("kubelet: pod %s/%s failed", st.namespace, st.name)

    def _delay(self, restarts: int) -> float:
        return min(self.backoff_base * (2 ** max(restarts - 1, 0)), self.backoff_cap)

    async def _run_container(self, st: _Pod, ctr: _Container) -> None:
        attempts = 0  # failed starts (volumes, config) before the container ever ran
        while True:
            pod = self.kube.get("v1/pods", st.namespace, st.name)
            if pod is None:
                return
            spec = pod.get("spec") or {}
            policy = spec.get("restartPolicy") or "Always"
            image = self.images.get(ctr.image)
            if image is None:
                ctr.state = {"waiting": {"reason": "ErrImagePull", "message": f'image "{ctr.image}" is not '
                                         "known to the emulated runtime"}}
                await self._write_status(st)
                return
            try:
                self._setup_volumes(pod)
                argv = self._configure(pod, ctr, image)
            except VolumeError as exc:
                ctr.state = {"waiting": {"reason": "ContainerCreating", "message": str(exc)}}
                await self._write_status(st)
                attempts += 1
                await asyncio.sleep(self._delay(attempts))
                continue
            except ConfigError as exc:
                ctr.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                await self._write_status(st)
                attempts += 1
                await asyncio.sleep(self._delay(attempts))
                continue
            t0 = time.monotonic()
            rc, started, finished = await self._start_and_wait(st, pod, ctr, image, argv)
            ran_for = time.monotonic() - t0
            terminated = {"exitCode": rc, "reason": "Completed" if rc == 0 else "Error",
                          "startedAt": started, "finishedAt": finished, "containerID": ctr.container_id}
            restart = policy == "Always" or (policy == "OnFailure" and rc != 0)
            if not restart:
                ctr.state = {"terminated": terminated}
                ctr.done = True
                await self._write_status(st)
                return
            if ran_for >= self.backoff_reset:
                ctr.streak = 0
            ctr.streak += 1
            delay = self._delay(ctr.streak)
            ctr.last_state = {"terminated": terminated}
            ctr.state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                f"back-off {delay:g}s restarting failed container={ctr.name} pod={st.name}_{st.namespace}"
                f"({st.uid})")}}
            await self._write_status(st)
            await asyncio.sleep(delay)
            ctr.restarts += 1

    async def _start_and_wait(self, st: _Pod, pod: JsonObj, ctr: _Container, image: ImageConfig,
                              argv: list[str]) -> tuple[int, str, str]:
        logs = self.pod_dir(st.namespace, st.name) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # The namespace comes back as an fd over a socket (SCM_RIGHTS): held open, it keeps the namespace
        # alive until the container is cleaned up. A freed namespace's inode is reused by the next one the
        # kernel creates, so without the pin the cleanup of one container (processes matched by "mnt:[N]")
        # could kill another's (another pod's, or another kubelet's on the same host).
        ready_r, ready_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cspec = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == ctr.name), {})
        spec = {"mode": "run", "mounts": self._mounts(pod, ctr.name, ctr.image), "uid": ctr.uid,
                "gid": ctr.gid, "groups": ctr.groups, "cwd": ctr.cwd, "env": ctr.env, "argv": argv,
                "ready_fd": ready_w.fileno(),
                "read_only_root": bool((cspec.get("securityContext") or {}).get("readOnlyRootFilesystem"))}
        ctr.container_id = "emulated://" + uuid.uuid4().hex
        started = _now()
        with open(logs / f"{ctr.name}.log", "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *_INIT, json.dumps(spec), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=str(REPO_ROOT), pass_fds=(ready_w.fileno(),), start_new_session=True)
        ready_w.close()
        try:
            msg, fds, _flags, _addr = await asyncio.to_thread(socket.recv_fds, ready_r, 100, 1)
        finally:
            ready_r.close()
        ns_id, ns_fd = msg.decode(), (fds[0] if fds else None)
        for extra in fds[1:]:
            os.close(extra)
        if ns_fd is not None:
            os.set_inheritable(ns_fd, False)
        if not ns_id and ns_fd is not None:
            os.close(ns_fd)
            ns_fd = None
        try:
            if ns_id:
                ctr.pid, ctr.ns_id, ctr.ns_fd = proc.pid, ns_id, ns_fd
                ctr.started_once = True
                ctr.state = {"running": {"startedAt": started}}
                await self._write_status(st)
            rc = await proc.wait()
        except asyncio.CancelledError:
            await self._kill_container(ctr)
            raise
        ctr.pid = None
        await self._kill_namespace(ctr)
        return (rc if rc >= 0 else 128 - rc), started, _now()

    # ------------------------------------------------------------------ configuration
    def _configure(self, pod: JsonObj, ctr: _Container, image: ImageConfig) -> list[str]:
        """Resolve user, env, working dir and argv of a container (raises ConfigError)."""
        spec = pod.get("spec") or {}
        cspec = next(c for c in spec.get("containers") or [] if c.get("name") == ctr.name)
        psc, csc = spec.get("securityContext") or {}, cspec.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser", image.uid))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", image.gid if uid == image.uid else 0))
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root and int(uid) == 0:
            raise ConfigError("container has runAsNonRoot and image will run as root")
        groups = [int(gid), *[int(g) for g in psc.get("supplementalGroups") or []]]
        if psc.get("fsGroup") is not None:
            groups.append(int(psc["fsGroup"]))
        ctr.uid, ctr.gid, ctr.groups = int(uid), int(gid), list(dict.fromkeys(groups))
        env = {**image.env, "HOSTNAME": pod["metadata"]["name"]}
        for item in cspec.get("env") or []:
            name = item.get("name")
            if "value" in item:
                env[name] = _expand(str(item.get("value") or ""), env)
            elif item.get("valueFrom"):
                env[name] = self._value_from(pod, item["valueFrom"], name)
            else:
                env[name] = ""
        ctr.env = env
        ctr.cwd = cspec.get("workingDir") or image.workdir or "/"
        command = [_expand(a, env) for a in cspec["command"]] if cspec.get("command") else list(image.entrypoint)
        if cspec.get("args"):
            args = [_expand(a, env) for a in cspec["args"]]
        elif cspec.get("command"):
            args = []
        else:
            args = list(image.cmd)
        argv = [*command, *args]
        if not argv:
            raise ConfigError("no command specified")
        return argv

    def _value_from(self, pod: JsonObj, source: JsonObj, name: str) -> str:
        ns = pod["metadata"]["namespace"]
        for kind, res in (("secretKeyRef", "v1/secrets"), ("configMapKeyRef", "v1/configmaps")):
            ref = source.get(kind)
            if ref:
                obj = self.kube.get(res, ns, ref.get("name", ""))
                data = (obj or {}).get("data") or {}
                if ref.get("key") not in data:
                    if ref.get("optional"):
                        return ""
                    what = "secret" if kind == "secretKeyRef" else "configmap"
                    raise ConfigError(f'{what} "{ref.get("name")}" not found' if obj is None else
                                      f"couldn't find key {ref.get('key')} in {what.capitalize()} {ns}/{ref.get('name')}")
                value = data[ref["key"]]
                return base64.b64decode(value).decode() if kind == "secretKeyRef" else str(value)
        field = (source.get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.name":
            return str(pod["metadata"]["name"])
        if field == "metadata.namespace":
            return str(ns)
        raise ConfigError(f"env {name}: valueFrom not supported by the emulated kubelet")

    # ------------------------------------------------------------------ volumes and mounts
    def _volume_dir(self, pod: JsonObj, volume: str) -> pathlib.Path:
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            if vol.get("name") == volume and "persistentVolumeClaim" in vol:
                return self.claim_dir(pod["metadata"]["namespace"], vol["persistentVolumeClaim"].get("claimName", ""))
        return self.pod_dir(pod["metadata"]["namespace"], pod["metadata"]["name"]) / "volumes" / volume

    def claim_dir(self, namespace: str, claim: str) -> pathlib.Path:
        """Host directory of a PersistentVolumeClaim's volume: outlives the pods that mount it."""
        return self.root / ".claims" / namespace / claim

    def _setup_volumes(self, pod: JsonObj) -> None:
        spec = pod.get("spec") or {}
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        for vol in spec.get("volumes") or []:
            target = self._volume_dir(pod, vol["name"])
            if "emptyDir" in vol:
                if not target.exists():
                    target.mkdir(parents=True)
                    target.chmod(0o777)
                    if fs_group is not None:
                        os.chown(target, -1, int(fs_group))
                        target.chmod(0o2777)
            elif "secret" in vol or "configMap" in vol:
                target.parent.mkdir(parents=True, exist_ok=True)
                write_projection(target, self._projected_files(pod, vol), fs_group)
            elif "persistentVolumeClaim" in vol:
                # A provisioned volume: root-owned 0755 when new; with fsGroup the kubelet makes it group-owned,
                # group-writable and setgid (SetVolumeOwnership). Its content survives the pod.
                claim = vol["persistentVolumeClaim"].get("claimName", "")
                if self.kube.get("v1/persistentvolumeclaims", pod["metadata"]["namespace"], claim) is None:
                    raise VolumeError(f'persistentvolumeclaim "{claim}" not found')
                if not target.exists():
                    target.mkdir(parents=True)
                    target.chmod(0o755)
                if fs_group is not None:
                    os.chown(target, -1, int(fs_group))
                    target.chmod(target.stat().st_mode & 0o7777 | 0o2070)
            else:
                raise VolumeError(f"volume {vol['name']!r}: only secret, configMap, emptyDir and "
                                  "persistentVolumeClaim are emulated")

    def _projected_files(self, pod: JsonObj, vol: JsonObj) -> dict[str, tuple[bytes, int]]:
        ns = pod["metadata"]["namespace"]
        is_secret = "secret" in vol
        src = vol["secret"] if is_secret else vol["configMap"]
        ref = src.get("secretName") if is_secret else src.get("name")
        obj = self.kube.get("v1/secrets" if is_secret else "v1/configmaps", ns, ref or "")
        if obj is None:
            if src.get("optional"):
                return {}
            kind = "secret" if is_secret else "configmap"
            raise VolumeError(f'MountVolume.SetUp failed for volume "{vol["name"]}" : {kind} "{ref}" not found')
        raw = obj.get("data") or {}
        data = {k: (base64.b64decode(v) if is_secret else str(v).encode()) for k, v in raw.items()}
        default = int(src.get("defaultMode", 0o644))
        items = src.get("items")
        if not items:
            return {k: (v, default) for k, v in data.items()}
        out = {}
        for item in items:
            if item["key"] not in data:
                if src.get("optional"):
                    continue
                raise VolumeError(f'MountVolume.SetUp failed for volume "{vol["name"]}" : configmap references '
                                  f"non-existent config key: {item['key']}")
            out[item.get("path") or item["key"]] = (data[item["key"]], int(item.get("mode", default)))
        return out

    def _refresh_secret_volumes(self, pod: JsonObj, secret: str) -> None:
        fs_group = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            if (vol.get("secret") or {}).get("secretName") == secret and self._volume_dir(pod, vol["name"]).exists():
                try:
                    write_projection(self._volume_dir(pod, vol["name"]), self._projected_files(pod, vol), fs_group)
                except VolumeError:
                    pass  # a kubelet keeps the last projection

    def _mounts(self, pod: JsonObj, container: str, image_ref: str) -> list[list[Any]]:
        """[host, container path, read-only] for a container: image files and dirs, sim tools, volumes."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        base = self.pod_dir(ns, name)
        image = self.images.get(image_ref) or ImageConfig(entrypoint=[])
        cspec = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == container), {})
        read_only_root = bool((cspec.get("securityContext") or {}).get("readOnlyRootFilesystem"))
        mounts: list[list[Any]] = []
        # Image files: each directory holding COPY'd files is a read-only union over the host's directory.
        for cdir in sorted({os.path.dirname(p) for p in image.files}):
            mounts.append([str(self._image_dir(base / "image" / container, cdir, image)), cdir, "overlay"])
        for cdir, (uid, gid, mode) in sorted(image.owned_dirs.items()):
            host = (self._tmp_root / f"{ns}.{name}" / container) if cdir == "/tmp" else \
                base / "rootfs" / container / cdir.lstrip("/")
            if not host.exists():
                host.mkdir(parents=True)
                os.chown(host, uid, gid)
                host.chmod(mode)
            mounts.append([str(host), cdir, read_only_root])  # the image's layer: read-only with the root
        mounts.append([sys.base_prefix, f"{SIM_ROOT}/python", True])
        mounts.append([str(REPO_ROOT), SIM_SRC, True])
        vols = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
        for m in cspec.get("volumeMounts") or []:
            vol = vols.get(m.get("name"))
            if vol is None:
                continue
            ro = bool(m.get("readOnly")) or "secret" in vol or "configMap" in vol or \
                bool((vol.get("persistentVolumeClaim") or {}).get("readOnly"))
            host = self._volume_dir(pod, vol["name"])
            if m.get("subPath"):
                host = host / m["subPath"]
            mounts.append([str(host), m["mountPath"], ro])
        # Parents before children, so a mount inside another (HOME/work) is not hidden by it.
        mounts.sort(key=lambda m: m[1].rstrip("/").count("/"))
        return mounts

    @staticmethod
    def _image_dir(root: pathlib.Path, cdir: str, image: ImageConfig) -> pathlib.Path:
        host = root / cdir.lstrip("/")
        if not host.exists():
            host.mkdir(parents=True)
            for path, (content, mode) in image.files.items():
                if os.path.dirname(path) == cdir:
                    f = host / os.path.basename(path)
                    f.write_bytes(content)
                    f.chmod(mode)
        return host

    # ------------------------------------------------------------------ status
    async def _write_status(self, st: _Pod) -> None:
        if self._stopping or (st.namespace, st.name) not in self.pods:
            return
        pod = self.kube.get("v1/pods", st.namespace, st.name)
        if pod is None:
            return
        statuses = []
        for c in st.containers.values():
            running = "running" in c.state
            s: JsonObj = {"name": c.name, "image": c.image, "imageID": f"emulated://{c.image}",
                          "ready": running, "started": running, "restartCount": c.restarts, "state": c.state}
            if c.last_state:
                s["lastState"] = c.last_state
            if c.container_id:
                s["containerID"] = c.container_id
            statuses.append(s)
        ctrs = list(st.containers.values())
        if ctrs and all(c.done for c in ctrs):
            failed = any(c.state["terminated"]["exitCode"] != 0 for c in ctrs)
            phase = "Failed" if failed else "Succeeded"
        elif any(c.started_once for c in ctrs):
            phase = "Running"
        else:
            phase = "Pending"
        ready = "True" if ctrs and all("running" in c.state for c in ctrs) else "False"
        old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}

        def cond(type_: str, value: str, reason: str | None = None) -> JsonObj:
            prev = old.get(type_)
            ltt = prev.get("lastTransitionTime") if prev and prev.get("status") == value else _now()
            out = {"type": type_, "status": value, "lastTransitionTime": ltt}
            if reason and value != "True":
                out["reason"] = reason
            return out
        status = {
            "phase": phase,
            "conditions": [cond("PodScheduled", "True"), cond("Initialized", "True"),
                           cond("ContainersReady", ready, "ContainersNotReady"), cond("Ready", ready, "ContainersNotReady")],
            "containerStatuses": statuses,
            "hostIP": "10.0.0.1", "podIP": st.ip, "podIPs": [{"ip": st.ip}], "startTime": st.started_at,
            "qosClass": "BestEffort",
        }
        await self.kube.replace_status("v1/pods", st.namespace, st.name, status)

    # ------------------------------------------------------------------ processes
    async def _kill_container(self, ctr: _Container) -> None:
        if ctr.pid is not None:
            try:
                os.killpg(ctr.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        await self._kill_namespace(ctr)

    async def _kill_namespace(self, ctr: _Container) -> None:
        """Kill every process left in the container's mount namespace (SIGTERM, then SIGKILL)."""
        if not ctr.ns_id:
            return
        ns_id = ctr.ns_id
        deadline = time.monotonic() + self.stop_grace
        sig = signal.SIGTERM
        while True:
            pids = _pids_in_namespace(ns_id)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                sig = signal.SIGKILL
            await asyncio.sleep(0.05)
        if ctr.ns_fd is not None:
            os.close(ctr.ns_fd)
        ctr.ns_id = ctr.ns_fd = None
        ctr.pid = None

    # ------------------------------------------------------------------ exec
    def running(self, namespace: str, pod: str, container: str) -> _Container | None:
        """The container's record if it runs now."""
        st = self.pods.get((namespace, pod))
        ctr = st.containers.get(container) if st else None
        return ctr if ctr is not None and ctr.pid is not None and ctr.ns_id else None

    def exec_argv(self, namespace: str, pod: str, container: str, argv: list[str]) -> list[str]:
        """The host argv running ``argv`` inside a running container (its namespace, user, env, cwd)."""
        ctr = self.running(namespace, pod, container)
        if ctr is None:
            raise LookupError(f'container not found ("{container}")')
        spec = {"mode": "join", "pid": ctr.pid, "uid": ctr.uid, "gid": ctr.gid, "groups": ctr.groups,
                "cwd": ctr.cwd, "env": ctr.env, "argv": argv}
        return [*_INIT, json.dumps(spec)]

    def run(self, namespace: str, pod: str, argv: list[str], container: str | None = None,
            timeout: float = 10.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command in a container from a test (blocking; as ``kubectl exec [-i]`` would)."""
        name = container or next(iter(self.pods[(namespace, pod)].containers))
        return subprocess.run(self.exec_argv(namespace, pod, name, argv), capture_output=True, text=True,
                              timeout=timeout, cwd=str(REPO_ROOT), check=False, input=stdin)


def _pids_in_namespace(ns_id: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/mnt") == ns_id:
                    out.append(int(entry))
            except OSError:
                continue
    return out


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known variables replaced, ``$$`` -> ``$``, unknown left as is."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(sub, text)


class KubeletExec(LocalExec):
    """The emulator's exec handler when a :class:`Kubelet` runs the pods: commands run inside the container
    (namespace, user, env, working directory); pods the kubelet does not run fall back to
    :class:`LocalExec` behaviour (the tests that play the kubelet themselves)."""

    def __init__(self, kubelet: Kubelet, fallback: LocalExec) -> None:
        super().__init__(fallback.sandbox_root, fallback.tmux_socket_for, timeout=fallback.timeout, env=fallback.env)
        self.kubelet = kubelet
        self.fallback = fallback

    def refuse(self, namespace: str, pod: str, container: str) -> str | None:
        """A container the kubelet runs must be running to exec into it."""
        if (namespace, pod) in self.kubelet.pods and self.kubelet.running(namespace, pod, container) is None:
            return f'container not found ("{container}")'
        return None

    async def __call__(self, namespace: str, pod: str, container: str, argv: list[str],
                       stdin: bytes | None) -> tuple[bytes, bytes, int]:
        if (namespace, pod) not in self.kubelet.pods:
            return await self.fallback(namespace, pod, container, argv, stdin)
        self.calls += 1
        try:
            real = self.kubelet.exec_argv(namespace, pod, container, argv)
        except LookupError as exc:
            return b"", f"{exc}\n".encode(), 126
        proc = await asyncio.create_subprocess_exec(
            *real, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(REPO_ROOT),
            start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), self.timeout)
        except TimeoutError:
            await self._kill(proc)
            return b"", f"exec: killed after {self.timeout}s\n".encode(), 137
        except asyncio.CancelledError:
            await self._kill(proc)
            raise
        rc = proc.returncode if proc.returncode is not None else 1
        return out, err, rc if rc >= 0 else 128 - rc

    async def spawn(self, namespace: str, pod: str, container: str, argv: list[str]) -> asyncio.subprocess.Process:
        """Start a streamed exec inside the container (as its user), stdin/stdout/stderr as pipes.

        :raises LookupError: the container does not run (the caller answers rc 126)."""
        if (namespace, pod) not in self.kubelet.pods:
            return await self.fallback.spawn(namespace, pod, container, argv)
        self.calls += 1
        real = self.kubelet.exec_argv(namespace, pod, container, argv)
        return await asyncio.create_subprocess_exec(
            *real, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=str(REPO_ROOT), start_new_session=True)

    def release(self, namespace: str, pod: str) -> None:
        """A pod removed from storage: the kubelet kills its containers (on the DELETED event)."""
        if (namespace, pod) not in self.kubelet.pods:
            self.fallback.release(namespace, pod)
