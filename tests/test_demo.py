"""`agentbox-controller demo --keep`, as a user runs it: every scene checked (exit 0 only when all happened),
then the emulated cluster stays up and `kubectl agentbox status` reads it through the printed KUBECONFIG;
Ctrl-C stops it with the demo's exit code."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.component

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(sys.executable).parent / "kubectl-agentbox"


class Lines:
    """Lines of a process's stdout, read by a thread (select() on a buffered pipe misses buffered lines)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def until(self, marker: str, timeout: float) -> str:
        out = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
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
        lines = Lines(proc)
        out = lines.until("export KUBECONFIG=", 240)
        assert "Demo passed: every expected step happened." in out, out[-4000:]
        for scene in ("Rotation: rotate-box switched from team-a to team-c", "Group exhausted: group-box moved to night-b",
                      "Reserve: reserve-box stopped at 80%", "Reserve: lifted at the reset", "Claude got exactly one"):
            assert any(line.startswith("  [ok] " + scene) for line in out.splitlines()), scene
        assert "[FAILED]" not in out
        assert "The fleet now (kubectl agentbox status):" in out and "on team-c" in out
        kubeconfig = out.rsplit("export KUBECONFIG=", 1)[1].split()[0]
        rest = lines.until("tmux -S", 30)
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
        proc.send_signal(signal.SIGINT)   # Ctrl-C
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0
    assert "Stopping the emulated cluster." in lines.until("Stopping the emulated cluster.", 5)
