"""Fixture `operator_process`: start the real `agentbox-controller run` as its own OS process against a
`world` (its kubeconfig, its settings as AGENTBOX_* variables), killed with the test (PR_SET_PDEATHSIG, and
SIGKILL at teardown). As bench/faults.py does; for scenarios that need a process to die (SIGKILL) or two
replicas with their own identities and Lease clients."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from agentbox_sim.world import World

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pdeathsig() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def operator_env(world: World) -> dict[str, str]:
    """The process environment: no AGENTBOX_* of ours, the world's kubeconfig and settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
    env.update({"KUBECONFIG": str(world.kubeconfig), "PYTHONPATH": str(ROOT)})
    for key, value in world.settings.model_dump(mode="json").items():
        if value is not None:
            env["AGENTBOX_" + key.upper()] = json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)
    return env


def start_operator_process(world: World, logfile: pathlib.Path, *args: str,
                           kubeconfig: pathlib.Path | None = None) -> subprocess.Popen[bytes]:
    """`python -m controller run --namespace <world's> --liveness '' <args>`; output to `logfile`."""
    env = operator_env(world)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    out = open(logfile, "ab")  # noqa: SIM115 -- the child holds it; closed with the process
    try:
        return subprocess.Popen([sys.executable, "-m", "controller", "run", "--namespace", world.namespace,
                                 "--liveness", "", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_pdeathsig, cwd=str(ROOT))
    finally:
        out.close()


@pytest.fixture
def operator_process(world: World, tmp_path: pathlib.Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """A factory: `operator_process(name, *args, kubeconfig=None)` starts one operator process whose output
    goes to tmp_path/<name>.log; every process still running is SIGKILLed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str, kubeconfig: pathlib.Path | None = None) -> subprocess.Popen[bytes]:
        proc = start_operator_process(world, tmp_path / f"{name}.log", *args, kubeconfig=kubeconfig)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
