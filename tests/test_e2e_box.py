"""The kind e2e's box (tests/e2e/test_kind.py: the example template, a ConfigMap-mounted scripted Claude Code
in node, typed by the real entrypoint) run through the emulator's kubelet model and the real operator, so
the e2e's own moving parts are checked in make test; and the e2e's refusal of non-kind contexts."""

from __future__ import annotations

import importlib.util
import math
import shutil
import time
from datetime import datetime, timezone

import pytest
import yaml

from agentbox_sim.kubelet import REPO_ROOT, example_box_image, kubelet_unavailable
from agentbox_sim.world import World, claude_login, eventually, utc_in

spec = importlib.util.spec_from_file_location("e2e_kind", REPO_ROOT / "tests/e2e/test_kind.py")
e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2e)


def _kubeconfig(tmp_path, context: str, server: str):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return path


@pytest.mark.parametrize("context,server,ok", [
    ("kind-agentbox", "https://127.0.0.1:40000", True),
    ("prod", "https://127.0.0.1:40000", False),
    ("kind-agentbox", "https://10.1.2.3:6443", False),   # named like kind, but a remote server
    ("gke_x_y_z", "https://34.1.2.3", False),
])
def test_e2e_refuses_contexts_that_are_not_kind(tmp_path, monkeypatch, context, server, ok):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path, context, server)))
    path, why = e2e.kind_context()
    assert (path is not None) == ok, why


@pytest.mark.component
@pytest.mark.skipif(kubelet_unavailable() is not None or shutil.which("node") is None,
                    reason=str(kubelet_unavailable() or "node is not installed (the scripted agent is node)"))
async def test_the_e2e_box_is_limited_and_resumed_through_the_kubelet_model(world: World):
    reset = math.ceil(time.time() + 10)
    await world.start_kubelet({e2e.BOX_IMAGE: example_box_image()}, backoff_base=0.5, backoff_cap=1.0)
    world.provider.add_login("sk-ant-oat01-e2e", "acct-e2e")
    world.provider.set_windows("acct-e2e", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                               weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", e2e.placeholder_login())
    await world.create(world.sub_path(), yaml.safe_load((REPO_ROOT / "examples/claude-subscription.yaml").read_text()))
    cm, box = e2e.e2e_box(world.namespace, reset)
    await world.kube.create_object("v1/configmaps", cm)
    await world.create(world.box_path(), box)
    world.start_operator()
    await eventually(lambda: "LimitDetected" in {e["reason"] for e in world.events("claude-box")}, 30,
                     what="LimitDetected")
    await eventually(lambda: "Resumed" in {e["reason"] for e in world.events("claude-box")}, 40, what="Resumed")
    screen = world.kubelet.run("default", "claude-box", ["tmux", "capture-pane", "-p", "-t", "=agentbox:main"]).stdout
    assert "Continuing the task" in screen
