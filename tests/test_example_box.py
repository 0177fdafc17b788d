"""The example box exactly as examples/ defines it (same image user, same template), run by the kubelet
model with the real images/box/entrypoint.sh and a scripted agent, watched by the real operator; and
status telling the truth about a crash-looping container or a missing tmux session."""

from __future__ import annotations

import copy
import math
import time
from datetime import datetime, timezone

import pytest
import yaml

from controller import constants as C
from agentbox_sim.kubelet import REPO_ROOT, example_box_image, kubelet_unavailable, scripted_agent
from agentbox_sim.world import World, claude_login, eventually, utc_in

pytestmark = [pytest.mark.component,
              pytest.mark.skipif(kubelet_unavailable() is not None, reason=str(kubelet_unavailable()))]
IMAGE = "ghcr.io/agentbox-dev/agentbox-box:0.1.0"


def example(name: str) -> dict:
    docs = [d for d in yaml.safe_load_all((REPO_ROOT / "examples" / name).read_text()) if d]
    return docs[0]


def ready(world: World, box: str) -> dict:
    conds = ((world.box(box) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == C.COND_READY), {})


async def start(world: World, reset: float, box: dict | None = None) -> dict:
    await world.start_kubelet({IMAGE: example_box_image(**{
        "/usr/local/bin/claude": scripted_agent("claude-code", "--reset-epoch", f"{reset:.0f}")})},
        backoff_base=0.5, backoff_cap=1.0)
    world.provider.add_login("tok-a", "acct-a")
    reset_at = datetime.fromtimestamp(reset, timezone.utc)
    world.provider.set_windows("acct-a", five_hour=(100.0, reset_at), weekly=(40.0, utc_in(86400)))
    # As the README says: kubectl create secret generic claude-login --from-file=credentials.json=...
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.create(world.sub_path(), example("claude-subscription.yaml"))
    box = box or example("claude-box.yaml")
    assert box["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    await world.create(world.box_path(), box)
    world.start_operator()
    return box


async def test_the_example_box_is_watched_limited_and_resumed(world: World):
    reset = float(math.ceil(time.time() + 12))
    await start(world, reset)
    kubelet = world.kubelet
    await eventually(lambda: ready(world, "claude-box").get("status") == "True", 30, what="the example box Ready")
    assert world.box("claude-box")["status"]["state"] in ("Running", "RateLimited")
    # The entrypoint's contract, seen inside the pod: login copied for UID 1000, statusline configured.
    home = kubelet.host_path("default", "claude-box", "/home/agent")
    creds = home / ".claude/.credentials.json"
    assert creds.stat().st_uid == 1000 and "tok-a" in creds.read_text()
    assert "agentbox-statusline" in (home / ".claude/settings.json").read_text()
    await eventually(lambda: any(t.get("state") == "RateLimited" for t in
                                 (world.box("claude-box").get("status") or {}).get("tabs") or []), 20,
                     what="tab main RateLimited")
    await eventually(lambda: {"LimitDetected", "Resumed"} <= {e["reason"] for e in world.events("claude-box")}, 40,
                     what="LimitDetected then Resumed")
    log = (home / "agent.log").read_text()
    assert '"continue"' in log
    # The controller's exec ran as the container's user, inside the pod.
    assert kubelet.run("default", "claude-box", ["id", "-u"]).stdout.strip() == "1000"


async def test_a_crash_looping_box_is_not_ready_and_says_why(world: World):
    box = example("claude-box.yaml")
    box = copy.deepcopy(box)
    box["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", "echo starting; exit 2"]
    await start(world, time.time() + 3600, box)
    await eventually(lambda: ready(world, "claude-box").get("reason") == C.R_CONTAINER_WAITING
                     and "CrashLoopBackOff" in ready(world, "claude-box").get("message", ""), 30,
                     what="Ready False ContainerWaiting CrashLoopBackOff")
    status = world.box("claude-box")["status"]
    assert ready(world, "claude-box")["status"] == "False"
    assert "last exit code 2" in ready(world, "claude-box")["message"]
    assert status["state"] == "Pending"
    pod = world.kube.get("v1/pods", "default", "claude-box")
    assert pod["status"]["phase"] == "Running"  # the phase alone would have said Running


async def test_a_box_without_its_tmux_session_is_not_ready(world: World):
    box = copy.deepcopy(example("claude-box.yaml"))
    box["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "600"]
    await start(world, time.time() + 3600, box)
    await eventually(lambda: ready(world, "claude-box").get("reason") == C.R_SESSION_MISSING, 30,
                     what="Ready False SessionMissing")
    assert ready(world, "claude-box")["status"] == "False"
    assert world.box("claude-box")["status"]["state"] != "Running"
