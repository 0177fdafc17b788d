"""The emulator's kubelet model: volumes as a kubelet writes them, the container's user, command/env,
restarts and containerStatuses; and the example box image's entrypoint run through it."""

from __future__ import annotations

import asyncio
import base64
import os
import pathlib
import signal
import stat
import subprocess
import time

import pytest
import pytest_asyncio
import yaml

from controller.kube.objects import make_box_secret, make_pod
from agentbox_sim.kube import KubeEmulator, LocalExec
from agentbox_sim.kubelet import (ImageConfig, Kubelet, KubeletExec, REPO_ROOT, _pids_in_namespace, example_box_image,
                                    image_from_dockerfile, kubelet_unavailable, scripted_agent, write_projection)
from agentbox_sim.world import claude_login

NEEDS_ROOT = pytest.mark.skipif(kubelet_unavailable() is not None, reason=str(kubelet_unavailable()))
SHELL_IMAGE = "emulated/shell:1"


def shell_image() -> ImageConfig:
    """A minimal image: the host's /bin/sh, user 1000:1000, home /home/user."""
    return ImageConfig(entrypoint=["sh"], cmd=["-c", "sleep 600"], uid=1000, gid=1000,
                       env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/user"}, workdir="/home/user",
                       owned_dirs={"/home/user": (1000, 1000, 0o755), "/tmp": (0, 0, 0o1777)})


@pytest_asyncio.fixture
async def kubelet(kube: KubeEmulator, local_exec: LocalExec, tmp_path: pathlib.Path):
    if kubelet_unavailable():
        pytest.skip(kubelet_unavailable())
    k = Kubelet(kube, {SHELL_IMAGE: shell_image(),
                       "ghcr.io/agentbox-dev/agentbox-box:0.1.0": example_box_image(**{
                           "/usr/local/bin/claude": scripted_agent("claude-code", "--reset-epoch", "4102444800")})},
                tmp_path / "kubelet", backoff_base=0.2, backoff_cap=0.4)
    kube.exec_handler = KubeletExec(k, local_exec)
    await k.start()
    try:
        yield k
    finally:
        await k.stop()


def ctr_status(pod: dict | None) -> dict:
    return (((pod or {}).get("status") or {}).get("containerStatuses") or [{}])[0]


async def wait_pod(kube: KubeEmulator, name: str, pred, timeout: float = 15.0) -> dict:
    return await kube.wait_for("v1/pods", "default", name, lambda o: o is not None and pred(o), timeout=timeout)


def test_image_model_follows_the_box_dockerfile():
    img = image_from_dockerfile(REPO_ROOT / "images/box/Dockerfile")
    assert (img.uid, img.gid) == (1000, 1000)
    assert img.env["HOME"] == "/home/agent" and img.workdir == "/home/agent/work"
    assert img.entrypoint == ["/usr/local/bin/agentbox-entrypoint"]
    assert img.files["/usr/local/bin/agentbox-entrypoint"] == ((REPO_ROOT / "images/box/entrypoint.sh").read_bytes(), 0o755)
    assert img.owned_dirs["/home/agent"][:2] == (1000, 1000)


@NEEDS_ROOT
def test_projection_modes_owner_and_fs_group(tmp_path: pathlib.Path):
    files = {"credentials.json": (b"{}", 0o400)}
    write_projection(tmp_path / "plain", files, None)
    st = os.stat(tmp_path / "plain" / "credentials.json")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o400)
    assert os.readlink(tmp_path / "plain" / "credentials.json") == "..data/credentials.json"
    write_projection(tmp_path / "grouped", files, 1000)
    st = os.stat(tmp_path / "grouped" / "credentials.json")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 1000, 0o440)
    data_dir = os.stat(tmp_path / "grouped" / "..data")
    assert data_dir.st_gid == 1000 and data_dir.st_mode & stat.S_ISGID


def _pod(name: str, container: dict, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": SHELL_IMAGE, **container}], **spec}}


@NEEDS_ROOT
async def test_user_command_env_workdir_and_read_only_secret(kube, kubelet):
    await kube.create_object("v1/secrets", {"metadata": {"name": "s", "namespace": "default"},
                                            "data": {"k": base64.b64encode(b"v").decode()}})
    await kube.create_object("v1/pods", _pod(
        "p", {"command": ["sh", "-c"], "args": ["echo $(GREETING) $WHO; sleep 600"],
              "env": [{"name": "WHO", "value": "w"}, {"name": "GREETING", "value": "hi-$(WHO)"}],
              "workingDir": "/tmp", "volumeMounts": [{"name": "v", "mountPath": "/etc/emulated-secret"}],
              "securityContext": {"runAsUser": 1001}},
        securityContext={"runAsGroup": 2000, "supplementalGroups": [3000]},
        volumes=[{"name": "v", "secret": {"secretName": "s"}}]))
    pod = await wait_pod(kube, "p", lambda o: o["status"]["phase"] == "Running")
    assert ctr_status(pod)["ready"] is True and "running" in ctr_status(pod)["state"]
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    res = kubelet.run("default", "p", ["sh", "-c", "id -u; id -g; id -G; pwd; cat /etc/emulated-secret/k; echo; "
                                       "ls -l /etc/emulated-secret/..data/k; touch /etc/emulated-secret/x"])
    lines = res.stdout.splitlines()
    assert lines[:4] == ["1001", "2000", "2000 3000", "/tmp"]
    assert lines[4] == "v" and lines[5].startswith("-rw-r--r-- 1 root root")
    assert res.returncode != 0 and "Read-only file system" in res.stderr
    assert "hi-w w" in kubelet.logs("default", "p", "c")


@NEEDS_ROOT
async def test_crash_loop_back_off_and_last_exit_code(kube, kubelet):
    await kube.create_object("v1/pods", _pod("crash", {"command": ["sh", "-c", "exit 3"]}))
    pod = await wait_pod(kube, "crash", lambda o: ctr_status(o).get("restartCount", 0) >= 2
                         and "waiting" in ctr_status(o)["state"])
    s = ctr_status(pod)
    assert s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert s["lastState"]["terminated"]["exitCode"] == 3 and s["lastState"]["terminated"]["reason"] == "Error"
    assert pod["status"]["phase"] == "Running"  # a crash-looping pod stays Running, as on a cluster
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"


@NEEDS_ROOT
async def test_restart_policy_never_and_on_failure(kube, kubelet):
    await kube.create_object("v1/pods", _pod("never", {"command": ["sh", "-c", "exit 4"]}, restartPolicy="Never"))
    await kube.create_object("v1/pods", _pod("done", {"command": ["true"]}, restartPolicy="OnFailure"))
    pod = await wait_pod(kube, "never", lambda o: o["status"]["phase"] == "Failed")
    assert ctr_status(pod)["state"]["terminated"]["exitCode"] == 4 and ctr_status(pod)["restartCount"] == 0
    pod = await wait_pod(kube, "done", lambda o: o["status"]["phase"] == "Succeeded")
    assert ctr_status(pod)["state"]["terminated"]["reason"] == "Completed"


@NEEDS_ROOT
async def test_missing_secret_keeps_container_creating_then_starts(kube, kubelet):
    await kube.create_object("v1/pods", _pod("wait", {"volumeMounts": [{"name": "v", "mountPath": "/etc/x"}]},
                                             volumes=[{"name": "v", "secret": {"secretName": "late"}}]))
    pod = await wait_pod(kube, "wait", lambda o: (ctr_status(o).get("state") or {}).get("waiting", {}).get("message"))
    assert pod["status"]["phase"] == "Pending"
    assert 'secret "late" not found' in ctr_status(pod)["state"]["waiting"]["message"]
    await kube.create_object("v1/secrets", {"metadata": {"name": "late", "namespace": "default"}, "data": {}})
    await wait_pod(kube, "wait", lambda o: o["status"]["phase"] == "Running")


@NEEDS_ROOT
async def test_run_as_non_root_refuses_uid_0(kube, kubelet):
    await kube.create_object("v1/pods", _pod("root", {"securityContext": {"runAsUser": 0, "runAsNonRoot": True}}))
    pod = await wait_pod(kube, "root", lambda o: "waiting" in ctr_status(o).get("state", {})
                         and ctr_status(o)["state"]["waiting"]["reason"] == "CreateContainerConfigError")
    assert "runAsNonRoot" in ctr_status(pod)["state"]["waiting"]["message"]


@NEEDS_ROOT
async def test_exec_into_a_container_that_is_not_running_is_refused(kube, kubelet, core_v1):
    from kubernetes.stream import stream

    await kube.create_object("v1/pods", _pod("crash2", {"command": ["sh", "-c", "exit 1"]}))
    await wait_pod(kube, "crash2", lambda o: "waiting" in ctr_status(o).get("state", {})
                   and ctr_status(o)["state"]["waiting"]["reason"] == "CrashLoopBackOff")
    from kubernetes.client.exceptions import ApiException
    with pytest.raises(ApiException):
        await asyncio.to_thread(stream, core_v1.connect_get_namespaced_pod_exec, "crash2", "default",
                                command=["true"], container="c", stderr=True, stdout=True, stdin=False, tty=False)


@NEEDS_ROOT
async def test_deleting_the_pod_kills_every_process_of_its_containers(kube, kubelet):
    await kube.create_object("v1/pods", _pod("bg", {"command": ["sh", "-c", "setsid sleep 600 & exec sleep 600"]}))
    await wait_pod(kube, "bg", lambda o: o["status"]["phase"] == "Running")
    ns_id = kubelet.pods[("default", "bg")].containers["c"].ns_id
    await kube.wait_until(lambda: len(_pids_in_namespace(ns_id)) >= 2, timeout=5)
    await kube.delete_object("v1/pods", "default", "bg")
    await kube.wait_until(lambda: ("default", "bg") not in kubelet.pods, timeout=5)
    assert _pids_in_namespace(ns_id) == []


@NEEDS_ROOT
async def test_a_namespace_freed_under_a_tracked_container_is_not_reused_and_killed_with_it(kube, kubelet):
    """The kernel gives a freed mount namespace's id to the next namespace created (lowest free inode).
    The kubelet matches a container's processes by that id when it cleans the container up, so it pins the
    namespace (an open fd) while it tracks the container: a namespace created by anyone meanwhile gets
    another id and its processes survive that cleanup."""
    await kube.create_object("v1/pods", _pod("gone", {"command": ["sleep", "600"]}))
    await wait_pod(kube, "gone", lambda o: o["status"]["phase"] == "Running")
    ctr = kubelet.pods[("default", "gone")].containers["c"]
    ns_id, pid = ctr.ns_id, ctr.pid
    # Synchronously (the kubelet runs on this event loop and cannot react in between): the container's
    # only process dies, then a bystander gets a new namespace of its own.
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _pids_in_namespace(ns_id) and time.monotonic() < deadline:
        time.sleep(0.01)
    bystander = subprocess.Popen(["unshare", "-m", "sleep", "60"], start_new_session=True)
    try:
        time.sleep(0.2)
        assert os.readlink(f"/proc/{bystander.pid}/ns/mnt") != ns_id  # the pinned id was not handed out
        await wait_pod(kube, "gone", lambda o: ctr_status(o).get("restartCount", 0) >= 1
                       and "running" in ctr_status(o)["state"])
        assert bystander.poll() is None  # the cleanup of "gone" left the bystander running
    finally:
        bystander.kill()
        bystander.wait()


# ---------------------------------------------------------------------------------------------- example box

def example_box() -> dict:
    doc = yaml.safe_load((REPO_ROOT / "examples/claude-box.yaml").read_text())
    doc["metadata"].update(namespace="default", uid="0000-box")
    return doc


async def start_example_box(kube: KubeEmulator, box: dict) -> dict:
    """Create the box credentials Secret and the pod exactly as the controller builds them."""
    await kube.create_object("v1/secrets", make_box_secret(box, "credentials.json", claude_login("tok-1")))
    pod = make_pod(box, box["spec"]["template"], box["spec"]["agent"], with_credentials=True)
    await kube.create_object("v1/pods", pod)
    return pod


@NEEDS_ROOT
async def test_the_example_box_starts_its_session_through_the_real_entrypoint(kube, kubelet):
    box = example_box()
    await start_example_box(kube, box)
    pod = await wait_pod(kube, "claude-box", lambda o: "running" in ctr_status(o).get("state", {})
                         or ctr_status(o).get("restartCount", 0) > 0)
    assert ctr_status(pod).get("restartCount", 0) == 0, kubelet.logs("default", "claude-box", "box")
    async def session() -> bool:
        res = await asyncio.to_thread(kubelet.run, "default", "claude-box",
                                      ["tmux", "list-windows", "-t", "=agentbox", "-F", "#W"])
        return res.returncode == 0 and res.stdout.split() == ["main"]
    from agentbox_sim.world import eventually
    await eventually(session, 10, what="tmux session agentbox with tab main")
    home = kubelet.host_path("default", "claude-box", "/home/agent")
    creds = home / ".claude/.credentials.json"
    st = creds.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1000, 0o600)
    assert "tok-1" in creds.read_text()
    import json
    settings = json.loads((home / ".claude/settings.json").read_text())
    assert settings["statusLine"]["command"] == "/usr/local/bin/agentbox-statusline"
    # The tab runs the agent the entrypoint typed for AGENTBOX_AGENT=claude-code (here the scripted one).
    await eventually(lambda: "limit" in kubelet.run("default", "claude-box", [
        "tmux", "capture-pane", "-p", "-t", "=agentbox:main"]).stdout, 15, what="the agent's screen")
    who = kubelet.run("default", "claude-box", ["id", "-u"]).stdout.strip()
    assert who == "1000"  # exec runs as the container's user
    # The statusline command the entrypoint configured, run as Claude Code runs it (JSON on stdin).
    line = kubelet.run("default", "claude-box", ["/usr/local/bin/agentbox-statusline"],
                       stdin='{"model": {"display_name": "Opus"}, "workspace": {"current_dir": "/home/agent/work"}}')
    assert line.returncode == 0 and line.stdout.strip() == "Opus · work"
    saved = home / ".agentbox/statusline.json"
    assert json.loads(saved.read_text())["model"]["display_name"] == "Opus"
    assert (saved.stat().st_uid, stat.S_IMODE(saved.stat().st_mode)) == (1000, 0o600)


@NEEDS_ROOT
async def test_a_0400_root_owned_login_without_fs_group_crash_loops_the_example_box(kube, kubelet):
    """The kubelet model reproduces issue 11's bug: mounted 0400 root-owned, no fsGroup, the entrypoint
    (set -eu, UID 1000) cannot copy the login and exits; the pod crash-loops while its phase is Running."""
    box = example_box()
    await kube.create_object("v1/secrets", make_box_secret(box, "credentials.json", claude_login("tok-1")))
    pod = make_pod(box, box["spec"]["template"], box["spec"]["agent"], with_credentials=True)
    pod["spec"].pop("securityContext", None)
    for vol in pod["spec"]["volumes"]:
        if "secret" in vol:
            vol["secret"]["defaultMode"] = 0o400
    await kube.create_object("v1/pods", pod)
    got = await wait_pod(kube, "claude-box", lambda o: ctr_status(o).get("restartCount", 0) >= 1
                         and "waiting" in ctr_status(o)["state"])
    assert ctr_status(got)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert ctr_status(got)["lastState"]["terminated"]["exitCode"] != 0
    assert got["status"]["phase"] == "Running"
    assert "Permission denied" in kubelet.logs("default", "claude-box", "box")


def test_box_pod_gets_an_fs_group_only_when_the_template_sets_none():
    box = example_box()
    pod = make_pod(box, box["spec"]["template"], "claude-code", with_credentials=True)
    assert pod["spec"]["securityContext"]["fsGroup"] == 1000
    vol = next(v for v in pod["spec"]["volumes"] if "secret" in v)
    assert vol["secret"]["defaultMode"] == 0o440
    tmpl = {"spec": {"securityContext": {"runAsGroup": 4242}, "containers": [{"name": "box", "image": "x"}]}}
    assert make_pod(box, tmpl, "claude-code", True)["spec"]["securityContext"] == {"runAsGroup": 4242, "fsGroup": 4242}
    tmpl = {"spec": {"securityContext": {"fsGroup": 7}, "containers": [{"name": "box", "image": "x"}]}}
    assert make_pod(box, tmpl, "claude-code", True)["spec"]["securityContext"] == {"fsGroup": 7}
    tmpl = {"spec": {"containers": [{"name": "box", "image": "x"}]}}
    assert "securityContext" not in make_pod(box, tmpl, "shell", False)["spec"]


@NEEDS_ROOT
async def test_read_only_root_filesystem_leaves_only_volumes_writable(kube, kubelet):
    await kube.create_object("v1/pods", _pod(
        "ro", {"securityContext": {"readOnlyRootFilesystem": True},
               "volumeMounts": [{"name": "scratch", "mountPath": "/home/user/scratch"}]},
        volumes=[{"name": "scratch", "emptyDir": {}}]))
    await wait_pod(kube, "ro", lambda o: o["status"]["phase"] == "Running")
    res = kubelet.run("default", "ro", ["sh", "-c", "touch /home/user/x 2>&1; touch /tmp/x 2>&1; "
                                                    "touch /home/user/scratch/ok && echo scratch-ok"])
    assert res.stdout.count("Read-only file system") == 2 and "scratch-ok" in res.stdout


@NEEDS_ROOT
async def test_configmap_items_modes_and_secret_updates_projected(kube, kubelet):
    await kube.create_object("v1/configmaps", {"metadata": {"name": "cm", "namespace": "default"},
                                               "data": {"a": "A", "b": "B"}})
    await kube.create_object("v1/secrets", {"metadata": {"name": "s2", "namespace": "default"},
                                            "data": {"k": base64.b64encode(b"one").decode()}})
    await kube.create_object("v1/pods", _pod(
        "proj", {"volumeMounts": [{"name": "cm", "mountPath": "/etc/cm"}, {"name": "s", "mountPath": "/etc/s"}]},
        volumes=[{"name": "cm", "configMap": {"name": "cm", "items": [{"key": "b", "path": "sub/b.txt", "mode": 0o600}]}},
                 {"name": "s", "secret": {"secretName": "s2", "defaultMode": 0o444}}]))
    await wait_pod(kube, "proj", lambda o: o["status"]["phase"] == "Running")
    cm_dir = kubelet.host_path("default", "proj", "/etc/cm")
    assert sorted(p.name for p in cm_dir.iterdir() if not p.name.startswith("..")) == ["sub"]
    st = os.stat(cm_dir / "sub" / "b.txt")
    assert stat.S_IMODE(st.st_mode) == 0o600 and (cm_dir / "sub" / "b.txt").read_text() == "B"
    # As the uid 1000 container: a 0600 root-owned file is unreadable, the 0444 Secret file readable.
    res = kubelet.run("default", "proj", ["sh", "-c", "cat /etc/cm/sub/b.txt; cat /etc/s/k"])
    assert "Permission denied" in res.stderr and res.stdout == "one"
    await kube.patch_object("v1/secrets", "default", "s2", {"data": {"k": base64.b64encode(b"two").decode()}})
    res = kubelet.run("default", "proj", ["cat", "/etc/s/k"])
    assert res.stdout == "two"  # a kubelet projects Secret updates into running pods
