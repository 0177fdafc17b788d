"""The emulated container runtime's init step: enter (or create) a container's mount namespace, drop
to the container's user, and exec its command.  Run by :mod:`agentbox_sim.kubelet` as root, as
``python -m agentbox_sim.container_init '<json spec>'``; never imported by the operator.

Spec (JSON object):

* ``mode``: ``"run"`` (start a container: new private mount namespace with ``mounts`` bound in) or
  ``"join"`` (exec into a running one: ``setns`` into the mount namespace of process ``pid``);
* ``mounts``: ``[[host_dir, container_path, read_only], ...]`` (``run`` only; targets are created on the
  host as empty directories: the namespace makes the bind visible to the container only); ``read_only``
  ``"overlay"`` lays ``host_dir`` read-only over the host's own ``container_path`` (an image's files);
* ``uid``, ``gid`` (ints), ``groups`` (supplementary gids), ``cwd`` (container path), ``env`` (dict),
  ``argv`` (list; ``argv[0]`` looked up on the container's ``PATH``);
* ``read_only_root`` (``run`` only, optional): remount this namespace's ``/`` read-only (the mounts keep
  their own flags), for ``readOnlyRootFilesystem``;
* ``ready_fd`` (``run`` only, optional): an inherited Unix socket; once the mounts are in place, before the
  user switch, the namespace id (``mnt:[N]``) is sent on it with an open fd of the namespace (SCM_RIGHTS),
  and it is closed. The kubelet holds that fd while it tracks the container: a namespace's id is reused
  by the next namespace the kernel creates once the last reference goes.

Exit codes when the command cannot be started are those of a container runtime: 127 not found,
126 not executable, 128 for namespace or mount failures (message on stderr).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import socket
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, flags: int) -> None:
    _check(_libc.mount(src.encode() if src else None, dst.encode(), None, ctypes.c_ulong(flags), None),
           f"mount {dst}")


def enter(spec: dict) -> None:
    """Set up the namespace (run) or join it (join); raises OSError on failure."""
    if spec["mode"] == "run":
        _check(_libc.unshare(CLONE_NEWNS), "unshare")
        _mount(None, "/", MS_REC | MS_PRIVATE)
        mounts = spec.get("mounts") or []
        for host, target, read_only in mounts:  # all binds first: nested targets are created writable
            os.makedirs(target, exist_ok=True)
            if read_only == "overlay":  # image files over a host directory: a read-only union
                _check(_libc.mount(b"overlay", target.encode(), b"overlay", ctypes.c_ulong(MS_RDONLY),
                                   f"lowerdir={host}:{target}".encode()), f"overlay {target}")
            else:
                _mount(host, target, MS_BIND | MS_REC)
        for host, target, read_only in mounts:
            if read_only is True:
                _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        if spec.get("read_only_root"):  # readOnlyRootFilesystem: this namespace's "/" only
            _mount(None, "/", MS_BIND | MS_REMOUNT | MS_RDONLY)
        fd = spec.get("ready_fd")
        if fd is not None:  # the namespace's id and an fd of it (which pins it) to the kubelet
            ns = os.open("/proc/self/ns/mnt", os.O_RDONLY)
            try:
                with socket.socket(fileno=int(fd)) as sock:
                    socket.send_fds(sock, [os.readlink("/proc/self/ns/mnt").encode()], [ns])
            finally:
                os.close(ns)
    else:
        fd = os.open(f"/proc/{int(spec['pid'])}/ns/mnt", os.O_RDONLY)
        try:
            _check(_libc.setns(fd, CLONE_NEWNS), "setns")
        finally:
            os.close(fd)


def main() -> int:
    spec = json.loads(sys.argv[1])
    try:
        enter(spec)
        os.setgroups([int(g) for g in spec.get("groups") or []])
        os.setgid(int(spec["gid"]))
        os.setuid(int(spec["uid"]))
    except OSError as exc:
        sys.stderr.write(f"container init: {exc}\n")
        return 128
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    try:
        os.chdir(spec.get("cwd") or "/")
    except OSError as exc:
        sys.stderr.write(f"container init: chdir to working directory {spec.get('cwd')!r}: {exc.strerror}\n")
        return 128
    argv = [str(a) for a in spec["argv"]]
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        sys.stderr.write(f'exec: "{argv[0]}": executable file not found in $PATH\n')
        return 127
    except PermissionError:
        sys.stderr.write(f'exec: "{argv[0]}": permission denied\n')
        return 126
    except OSError as exc:
        sys.stderr.write(f'exec: "{argv[0]}": {exc.strerror}\n')
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
