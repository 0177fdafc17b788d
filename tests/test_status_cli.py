"""`kubectl agentbox status` / `agentbox-controller status` against the emulated cluster: the installed
`kubectl-agentbox` console script reads the emulator through a kubeconfig (kubectl's rules: $KUBECONFIG, the
context's namespace, -n, -A), prints the boxes and subscriptions as a table, wide or JSON, redraws with
--watch, and fails in one line without a cluster or without the CRDs. The view itself is unit-tested below."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from controller import constants as C
from agentbox_sim.world import World
from controller.statusview import bar, build_view, duration, render_table, route
from tests.harness.world_fixtures import FAST

PLUGIN = Path(sys.executable).parent / "kubectl-agentbox"
def z(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def statuses(NOW: datetime) -> tuple[dict[str, Any], dict[str, Any]]:  # noqa: N803
    """The seeded statuses, relative to the instant they are written (the assertions allow a minute)."""
    SUB_STATUS = {
        "claude-a": {"state": "Reserved", "windows": {"fiveHour": {"utilization": 83.0, "resetsAt": z(NOW + timedelta(hours=1, minutes=20))},
                                                      "weekly": {"utilization": 21.0, "resetsAt": z(NOW + timedelta(days=4))}},
                     "reservedUntil": z(NOW + timedelta(hours=1, minutes=20)),
                     "threshold": "Boxes stop at 80% of the 5-hour limit; the weekly limit has no reserve.",
                     "message": "Reserved until later: keeping 20% of the 5-hour limit",
                     "loginExpiresAt": z(NOW + timedelta(hours=7, minutes=30)), "readAt": z(NOW)},
        "claude-b": {"state": "Disconnected", "windows": {"fiveHour": {"utilization": 5.0}},
                     "threshold": "No reserve: boxes run until a limit is reached.",
                     "conditions": [{"type": "CredentialsValid", "status": "False", "reason": "RefreshRefused",
                                     "message": "The provider refused to renew the login; update the login Secret 'login-b'",
                                     "lastTransitionTime": z(NOW)}]},
    }
    BOX_STATUS = {
        "box-a": {"state": "RateLimited", "subscription": "claude-a", "nextSubscription": "claude-c", "pod": "box-a",
                  "resumeAt": z(NOW + timedelta(minutes=12)),
                  "tabs": [{"name": "main", "state": "RateLimited", "resumeAt": z(NOW + timedelta(minutes=12)),
                            "message": "waiting for the 5-hour reset"},
                           {"name": "side", "state": "AwaitingInput", "message": "an approval prompt"}],
                  "conditions": [{"type": "Ready", "status": "True", "reason": "Running", "lastTransitionTime": z(NOW)},
                                 {"type": "NeedsAttention", "status": "True", "reason": "ResumeFailed",
                                  "message": "tab side: a resume did not take effect", "lastTransitionTime": z(NOW)}]},
    }
    return SUB_STATUS, BOX_STATUS


SUB_STATUS, _ = statuses(datetime.now(timezone.utc))   # for the parts that do not depend on time


async def _seed(world: World) -> None:
    sub_status, box_status = statuses(datetime.now(timezone.utc).replace(microsecond=0))
    await world.add_subscription("claude-a", "anthropic", "login-a", "credentials.json",
                                 reserve={"fiveHourPercent": 20}, displayName="dev@example.com")
    await world.add_subscription("claude-b", "anthropic", "login-b", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a",
                        whenAgentStops={"rotation": {"enabled": True}})
    for name, status in sub_status.items():
        await world.patch(world.sub_path(name) + "/status", {"status": status})
    for name, status in box_status.items():
        await world.patch(world.box_path(name) + "/status", {"status": status})
    # Another namespace, seen only with -A.
    await world.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    await world.create(f"/apis/{C.GROUP}/{C.VERSION}/namespaces/team-b/{C.SUBSCRIPTION_PLURAL}", {
        "apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND, "metadata": {"name": "codex-x"},
        "spec": {"provider": "openai", "credentialsSecretRef": {"name": "l", "key": "auth.json"}}})


@pytest_asyncio.fixture
async def world(tmp_path):
    async with World(tmp_path / "world", FAST) as w:
        await _seed(w)
        yield w


async def plugin(args: list[str], kubeconfig: Path | str, timeout: float = 60,
                 argv0: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the plugin without blocking the event loop (the emulator answers from this loop)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(kubeconfig), HOME=str(Path(kubeconfig).parent))
    proc = await asyncio.create_subprocess_exec(*(argv0 or [str(PLUGIN)]), *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


@pytest.mark.component
async def test_status_table_shows_the_fleet_in_the_contexts_namespace(world: World):
    out = await plugin(["status"], world.kubeconfig)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "NAMESPACE" not in text, "one namespace: no namespace column"
    assert "codex-x" not in text, "the context's namespace only"
    sub_a = next(line for line in text.splitlines() if line.startswith("claude-a"))
    assert "Reserved" in sub_a and "████████|░" in sub_a and "83%" in sub_a and "resets in 1h" in sub_a
    assert "21%" in sub_a and ("resets in 3d23h" in sub_a or "resets in 4d0h" in sub_a)
    assert "in 7h" in sub_a, "login expiry"
    assert "reserve: Boxes stop at 80% of the 5-hour limit; the weekly limit has no reserve." in text
    assert "! Disconnected: log in again" in text and "RefreshRefused" in text
    box = next(line for line in text.splitlines() if line.startswith("box-a"))
    assert "claude-code" in box and "on claude-a · next claude-c" in box
    assert "main RateLimited (resume in 11m)" in box or "main RateLimited (resume in 12m)" in box
    assert "side AwaitingInput" in box
    assert "! NeedsAttention (ResumeFailed): tab side: a resume did not take effect" in text


@pytest.mark.component
async def test_status_all_namespaces_wide_and_json(world: World):
    wide = await plugin(["status", "-A", "-o", "wide"], world.kubeconfig)
    assert wide.returncode == 0, wide.stderr
    assert wide.stdout.splitlines()[0].startswith("NAMESPACE")
    assert any(line.startswith("team-b") and "codex-x" in line for line in wide.stdout.splitlines())
    assert "dev@example.com" in wide.stdout and "main: waiting for the 5-hour reset" in wide.stdout
    js = await plugin(["status", "-n", "default", "-o", "json"], world.kubeconfig)
    view = json.loads(js.stdout)
    assert [s["name"] for s in view["subscriptions"]] == ["claude-a", "claude-b"]
    a = view["subscriptions"][0]
    assert a["windows"]["fiveHour"]["utilization"] == 83.0 and a["windows"]["fiveHour"]["stopsAt"] == 80.0
    assert 7 * 3600 < a["loginExpiresInSeconds"] <= 7.5 * 3600
    assert a["threshold"] == SUB_STATUS["claude-a"]["threshold"]
    b = view["boxes"][0]
    assert b["route"] == "on claude-a · next claude-c" and b["ready"] == "True"
    assert [t["state"] for t in b["tabs"]] == ["RateLimited", "AwaitingInput"]
    # The same through the main command.
    same = await plugin(["status", "-o", "json"], world.kubeconfig, argv0=[sys.executable, "-m", "controller"])
    timeless = lambda boxes: [{k: v for k, v in b.items() if not k.endswith("InSeconds") and k != "tabs"}  # noqa: E731
                              for b in boxes]
    assert timeless(json.loads(same.stdout)["boxes"]) == timeless(view["boxes"])


@pytest.mark.component
async def test_status_watch_redraws_until_interrupted(world: World):
    env = {**os.environ, "KUBECONFIG": str(world.kubeconfig)}
    proc = await asyncio.create_subprocess_exec(str(PLUGIN), "status", "--watch", "--interval", "0.3", env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    seen = ""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and seen.count("\x1b[2J") < 3:
            try:
                chunk = await asyncio.wait_for(proc.stdout.read(4096), 1.0)  # type: ignore[union-attr]
            except asyncio.TimeoutError:
                continue
            seen += chunk.decode()
        assert seen.count("\x1b[2J") >= 3, "three frames"
        assert seen.count("on claude-a · next claude-c") >= 3
    finally:
        proc.send_signal(signal.SIGINT)
        # Read what it printed meanwhile and after: a plugin blocked on a full pipe (frames every 0.3 s that
        # this test stopped reading, under load) could not exit, and its last flush at exit would wait forever.
        try:
            await asyncio.wait_for(proc.communicate(), 15)
        except asyncio.TimeoutError:
            stack = await _py_stack(proc.pid)
            proc.kill()
            await proc.wait()
            pytest.fail(f"the plugin did not exit within 15 s of Ctrl-C; its stack:\n{stack}")
    assert proc.returncode == 0


async def _py_stack(pid: int) -> str:
    """The Python stack of a live process by py-spy (a diagnostic for a hang), or why there is none."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return "(no py-spy)"
    dump = await asyncio.create_subprocess_exec(spy, "dump", "--pid", str(pid), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(dump.communicate(), 20)
    return out.decode(errors="replace")


@pytest.mark.component
async def test_status_without_crds_or_cluster_fails_in_one_line(world: World, tmp_path: Path):
    await world.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{C.AGENTBOX_PLURAL}.{C.GROUP}")
    out = await plugin(["status"], world.kubeconfig)
    assert out.returncode == 4, (out.returncode, out.stderr)
    assert out.stderr == f"status: {C.AGENTBOX_PLURAL}.{C.GROUP} not found: are the agentbox-controller CRDs installed?\n"
    missing = await plugin(["status"], tmp_path / "absent-kubeconfig")
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    bad = tmp_path / "kc"
    bad.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                                   "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                                   "users": [{"name": "u", "user": {}}],
                                   "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    down = await plugin(["status"], bad)
    assert down.returncode == 3
    assert down.stderr == "status: no cluster: the API server at https://127.0.0.1:1 does not answer (MaxRetryError)\n"


# ---------------------------------------------------------------------------------------------- the view (unit)
@pytest.mark.unit
def test_bars_durations_and_routes():
    assert bar(0) == "░" * 10 and bar(100) == "█" * 10 and bar(150) == "█" * 10
    assert bar(40, 80) == "████░░░░|░", "the reserve's stop point marked ahead of the usage"
    assert bar(85, 80) == "████████|░" and bar(95, 80) == "█" * 10, "the mark shows while its cell is free"
    assert bar(None) == "·" * 10
    assert [duration(s) for s in (5, 125, 7500, 360000, -90)] == ["5s", "2m", "2h05m", "4d4h", "1m ago"]
    assert route("a", "b") == "on a · next b" and route("a", None) == "on a" and route("a", "a") == "on a"
    assert route(None, "b") == "-"


@pytest.mark.unit
def test_view_never_raises_on_missing_or_malformed_status():
    now = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    boxes = [{"metadata": {"namespace": "n", "name": "x"}, "spec": {"agent": "codex"}},
             {"metadata": {"namespace": "n", "name": "y"}, "spec": {}, "status": {"tabs": ["junk", {"name": "t"}],
                                                                                   "resumeAt": "not a time"}}]
    subs = [{"metadata": {"namespace": "n", "name": "s"}, "spec": {"provider": "openai"},
             "status": {"windows": {"fiveHour": "junk", "weekly": {"utilization": "high"}}}}]
    view = build_view(boxes, subs, now)
    assert view["boxes"][0]["state"] == "Pending" and view["boxes"][1]["tabs"] == [
        {"name": "t", "state": "Unknown", "resumeAt": None, "resumeInSeconds": None, "message": None}]
    assert view["subscriptions"][0]["threshold"] == "No reserve: boxes run until a limit is reached."
    text = render_table(view, wide=True)
    assert "codex" in text and "·········" in text
    assert render_table(build_view([], [], now)) == "No AgentBoxes or Subscriptions found.\n"


class _Api:
    closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("presses", [1, 2])
def test_watch_ctrl_c_during_a_fetch_lands_between_frames(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], presses: int):
    """Ctrl-C while a frame is fetched: one press finishes the fetch, draws nothing more and closes the client;
    a second press (an API server that hangs) leaves at once without touching the client's pool."""
    from controller import cli_status

    api = _Api()
    fetched = []

    def fetch(_api: Any, _ns: str | None) -> tuple[list[Any], list[Any]]:
        fetched.append(1)
        for _ in range(presses):
            signal.raise_signal(signal.SIGINT)
        return [], []

    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(cli_status, "connect", lambda *_: (api, "default"))
    monkeypatch.setattr(cli_status, "fetch", fetch)
    ns = cli_status.argparse.Namespace(kubeconfig=None, context=None, all_namespaces=False, namespace=None,
                                       watch=True, interval=60.0, output="table")
    assert cli_status.run_status(ns) == 0
    assert fetched == [1] and "\x1b[2J" not in capsys.readouterr().out
    assert api.closed == (1 if presses == 1 else 0)
    assert signal.getsignal(signal.SIGINT) is before
