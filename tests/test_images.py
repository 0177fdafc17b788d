"""The Dockerfiles, checked as far as this machine allows without a container runtime: what they COPY
exists; the controller image's package (built from exactly the files its Dockerfile copies) installs and
`agentbox-controller run --help` works as the image's user on a read-only root; the chart runs the
controller image as the image's own user. (The box image's entrypoint runs through the kubelet model:
tests/test_kubelet.py and tests/test_example_box.py.)

The install test costs ~6-10 s (a wheel build and a pip install of the package only, no dependencies:
those come read-only from the project's venv, installed by `make venv` from the same pyproject.toml).
"""

from __future__ import annotations

import json
import pathlib
import shlex
import shutil
import subprocess
import sys
import sysconfig

import pytest
import yaml

from agentbox_sim.kubelet import REPO_ROOT, SIM_PYTHON, SIM_ROOT, _dockerfile_lines, kubelet_unavailable

CONTROLLER_DOCKERFILE = REPO_ROOT / "images/controller/Dockerfile"


def instructions(path: pathlib.Path) -> list[tuple[str, str]]:
    return [(line.split(" ", 1)[0].upper(), line.split(" ", 1)[1].strip() if " " in line else "")
            for line in _dockerfile_lines(path.read_text())]


def build_stage_copies(path: pathlib.Path) -> list[str]:
    """Context paths the Dockerfile COPYs (not --from another stage)."""
    out = []
    for word, rest in instructions(path):
        if word == "COPY" and "--from" not in rest:
            toks = [t for t in shlex.split(rest) if not t.startswith("--")]
            out.extend(toks[:-1])
    return out


@pytest.mark.parametrize("dockerfile", ["images/controller/Dockerfile", "images/box/Dockerfile"])
def test_dockerfile_copies_exist(dockerfile: str):
    copies = build_stage_copies(REPO_ROOT / dockerfile)
    assert copies, "the Dockerfile copies nothing?"
    for src in copies:
        assert (REPO_ROOT / src).exists(), f"{dockerfile} copies {src}, which does not exist"


def test_chart_runs_the_controller_as_the_image_user():
    user = next(rest for word, rest in reversed(instructions(CONTROLLER_DOCKERFILE)) if word == "USER")
    uid, gid = (int(x) for x in user.split(":"))
    values = yaml.safe_load((REPO_ROOT / "charts/agentbox-controller/values.yaml").read_text())
    psc = values["podSecurityContext"]
    assert (psc["runAsUser"], psc["runAsGroup"]) == (uid, gid)
    assert values["securityContext"]["readOnlyRootFilesystem"] is True
    entry = next(rest for word, rest in reversed(instructions(CONTROLLER_DOCKERFILE)) if word == "ENTRYPOINT")
    assert json.loads(entry) == ["agentbox-controller"]


@pytest.mark.skipif(kubelet_unavailable() is not None, reason=str(kubelet_unavailable()))
def test_controller_package_installs_and_runs_help_as_the_image_user_on_a_read_only_root(tmp_path: pathlib.Path):
    src = tmp_path / "src"
    src.mkdir()
    for rel in build_stage_copies(CONTROLLER_DOCKERFILE):  # exactly the build context the image gets
        path = REPO_ROOT / rel
        (shutil.copytree if path.is_dir() else shutil.copy2)(path, src / rel)
    opt = tmp_path / "opt"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                          "--target", str(opt), str(src)], capture_output=True, text=True, timeout=300)
    if res.returncode != 0 and "Could not find a version that satisfies the requirement setuptools" in res.stderr:
        pytest.skip("no package index or cache for the build backend (setuptools): offline")
    assert res.returncode == 0, res.stderr[-2000:]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(opt)], check=True)  # as the Dockerfile does
    user = next(rest for word, rest in reversed(instructions(CONTROLLER_DOCKERFILE)) if word == "USER")
    uid, gid = (int(x) for x in user.split(":"))
    deps = sysconfig.get_paths()["purelib"]
    run = ("import sys, controller; from importlib.metadata import entry_points; "
           "assert controller.__file__.startswith('/opt/agentbox/'), controller.__file__; "
           "ep, = [e for e in entry_points(group='console_scripts') if e.name == 'agentbox-controller']; "
           "sys.argv = ['agentbox-controller', 'run', '--help']; sys.exit(ep.load()())")
    spec = {"mode": "run", "uid": uid, "gid": gid, "groups": [gid], "cwd": "/", "read_only_root": True,
            "mounts": [[str(opt), "/opt/agentbox", True], [deps, "/opt/deps", True],
                       [sys.base_prefix, f"{SIM_ROOT}/python", True]],
            "env": {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": "/opt/agentbox:/opt/deps", "HOME": "/nonexistent"},
            "argv": [SIM_PYTHON, "-c", run]}
    res = subprocess.run([sys.executable, "-m", "agentbox_sim.container_init", json.dumps(spec)],
                         capture_output=True, text=True, timeout=120, cwd=str(REPO_ROOT))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "usage: agentbox-controller run" in res.stdout
    assert "--namespace" in res.stdout


def test_chart_kube_version_covers_what_the_crds_and_the_box_policy_need():
    import re

    chart = yaml.safe_load((REPO_ROOT / "charts/agentbox-controller/Chart.yaml").read_text())
    low = tuple(int(x) for x in re.match(r">=\s*(\d+)\.(\d+)", chart["kubeVersion"]).groups())
    crds = "".join(p.read_text() for p in (REPO_ROOT / "crds").glob("*.yaml"))
    if "fieldPath:" in crds:
        assert low >= (1, 28), "CRD validation rules with fieldPath need Kubernetes 1.28+"
    if "ValidatingAdmissionPolicy" in (REPO_ROOT / "charts/agentbox-controller/templates/boxpolicy.yaml").read_text():
        assert low >= (1, 30), "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy needs Kubernetes 1.30+"


def _bare_path(tmp_path: pathlib.Path, *tools: str) -> str:
    """A PATH with the basic shell tools only, plus fake `tools` that fail (e.g. a docker without daemon)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("sh", "bash", "sed", "tail", "tee", "dirname", "cat", "mktemp", "rm", "grep"):
        found = shutil.which(name)
        if found:
            (bindir / name).symlink_to(found)
    for tool in tools:
        (bindir / tool).write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
        (bindir / tool).chmod(0o755)
    return str(bindir)


def test_make_images_says_clearly_when_no_builder_works(tmp_path: pathlib.Path):
    env = {"PATH": _bare_path(tmp_path, "docker"), "HOME": str(tmp_path)}
    res = subprocess.run(["bash", "hack/images.sh", "c:1", "b:1"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "no container image builder found" in res.stderr
    assert "daemon is not reachable" in res.stderr and "Podman" in res.stderr and "Buildah" in res.stderr
    assert "No image is published yet" in res.stderr


def test_kind_up_needs_kind_and_kubectl(tmp_path: pathlib.Path):
    env = {"PATH": _bare_path(tmp_path), "HOME": str(tmp_path), "CONTROLLER_IMAGE": "c:1", "BOX_IMAGE": "b:1"}
    res = subprocess.run(["bash", "hack/kind-up.sh"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "'kind' not found" in res.stderr
