"""`agentbox-controller demo --keep`, as a user runs it: every scene checked (exit 0 only when all happened),
then the emulated cluster stays up and `kubectl agentbox status` reads it through the printed KUBECONFIG;
Ctrl-C stops it with the demo's exit code."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.component

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(sys.executable).parent / "kubectl-agentbox"


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    out = ""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            out += line
            if marker in line:
                return out
    raise AssertionError(f"no {marker!r} within {timeout:.0f} s; output so far:\n{out[-3000:]}")


@pytest.mark.timeout(300)
def test_demo_plays_every_scene_and_keep_leaves_a_cluster_to_look_at():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_") and k != "KUBECONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "controller", "demo", "--keep"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out = _read_until(proc, "export KUBECONFIG=", 240)
        assert "Demo passed: every expected step happened." in out, out[-4000:]
        for scene in ("Rotation: rotate-box switched from team-a to team-c", "Group exhausted: group-box moved to night-b",
                      "Reserve: reserve-box stopped at 80%", "Reserve: lifted at the reset", "Claude got exactly one"):
            assert any(line.startswith("  [ok] " + scene) for line in out.splitlines()), scene
        assert "[FAILED]" not in out
        assert "The fleet now (kubectl agentbox status):" in out and "on team-c" in out
        kubeconfig = out.rsplit("export KUBECONFIG=", 1)[1].split()[0]
        rest = _read_until(proc, "tmux -S", 30)
        assert "attach -t =agentbox" in rest
        status = subprocess.run([str(PLUGIN), "status", "-o", "json"], capture_output=True, text=True, timeout=60,
                                env={**env, "KUBECONFIG": kubeconfig})
        assert status.returncode == 0, status.stderr
        view = json.loads(status.stdout)
        boxes = {b["name"]: b for b in view["boxes"]}
        assert set(boxes) == {"claude-box", "codex-box", "rotate-box", "group-box", "reserve-box"}
        assert boxes["rotate-box"]["subscription"] == "team-c" and boxes["group-box"]["subscription"] == "night-b"
        subs = {s["name"]: s for s in view["subscriptions"]}
        assert subs["shared"]["threshold"] == "Boxes stop at 80% of the 5-hour limit; the weekly limit has no reserve."
        assert subs["team-a"]["state"] == "Exhausted" and subs["team-a"]["windows"]["fiveHour"]["utilization"] == 100.0
        table = subprocess.run([str(PLUGIN), "status"], capture_output=True, text=True, timeout=60,
                               env={**env, "KUBECONFIG": kubeconfig})
        assert "on team-c · next team-b" in table.stdout, table.stdout
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0
