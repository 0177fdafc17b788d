"""examples/persistent-home.yaml as written, run by the kubelet model with the real images/box/entrypoint.sh
and the real operator: the agents' home is a PersistentVolumeClaim, so what Codex keeps there (its sessions,
which `codex resume --last` reads) survives the pod (here: the box deleted and applied again); the approval and sandbox
modes of the example are in ~/.codex/config.toml (where `codex resume --last`, which the controller types,
also reads them); the login is re-installed from the box Secret at each start."""

from __future__ import annotations

import time

import pytest
import yaml

from controller import constants as C
from agentbox_sim.kubelet import REPO_ROOT, example_box_image, kubelet_unavailable, scripted_agent
from agentbox_sim.world import World, codex_login, eventually, utc_in

pytestmark = [pytest.mark.component,
              pytest.mark.skipif(kubelet_unavailable() is not None, reason=str(kubelet_unavailable()))]
IMAGE = "ghcr.io/agentbox-dev/agentbox-box:0.1.0"


def docs(name: str) -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all((REPO_ROOT / "examples" / name).read_text()) if d}


def pod_uid(world: World, name: str) -> str | None:
    pod = world.kube.get("v1/pods", world.namespace, name)
    return pod["metadata"]["uid"] if pod and (pod.get("status") or {}).get("phase") == "Running" else None


@pytest.mark.timeout(120)
async def test_the_home_survives_the_pod_and_the_modes_are_in_the_agents_settings(world: World):
    example = docs("persistent-home.yaml")
    codex = next(d for d in yaml.safe_load_all((REPO_ROOT / "examples" / "codex.yaml").read_text())
                 if d and d["kind"] == C.SUBSCRIPTION_KIND)
    await world.start_kubelet({IMAGE: example_box_image(**{
        "/usr/local/bin/codex": scripted_agent("codex", "--reset-epoch", f"{time.time() + 3600:.0f}",
                                               "--start-working")})}, backoff_base=0.5, backoff_cap=1.0)
    world.provider.add_login("tok-x", "acct-x")
    world.provider.set_windows("acct-x", five_hour=(10.0, utc_in(3600)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("codex-login", "auth.json", codex_login("tok-x", "acct-x"))
    await world.create(world.sub_path(), codex)
    await world.create(f"/api/v1/namespaces/{world.namespace}/persistentvolumeclaims", example["PersistentVolumeClaim"])
    box = example["AgentBox"]
    name = box["metadata"]["name"]
    await world.create(world.box_path(), box)
    world.start_operator()
    first = await eventually(lambda: pod_uid(world, name), 40, what="the box pod running")
    claim = world.kubelet.claim_dir(world.namespace, "codex-home")
    config = claim / ".codex" / "config.toml"
    modes = {'approval_policy = "never"', 'sandbox_mode = "workspace-write"'}
    await eventually(lambda: config.exists() and (claim / ".codex" / "auth.json").exists()
                     and modes <= set(config.read_text().splitlines()), 20, what="the entrypoint wrote the home")
    text = config.read_text()
    # Top-level keys, before any [table] (TOML would file them under the table otherwise).
    assert modes <= set(text.split("\n[", 1)[0].splitlines()), text
    assert "[notice]" in text, "the entrypoint's own settings are kept"
    # What Codex keeps: a session file, written as the container's user in its home.
    out = world.kubelet.run(world.namespace, name, ["sh", "-c", "mkdir -p $HOME/.codex/sessions/2026 && "
                                                    "echo '{\"turn\": 1}' > $HOME/.codex/sessions/2026/rollout.jsonl && id -u"])
    assert out.returncode == 0 and out.stdout.strip() == "1000", out.stderr
    session = claim / ".codex" / "sessions" / "2026" / "rollout.jsonl"
    assert session.stat().st_uid == 1000
    # The box and its pod go (the pod by garbage collection: the box owns it) and the box is applied again:
    # a new pod on the same claim. (The claim is not owned by the box, so it stays.)
    await world.delete(world.box_path(name))
    await eventually(lambda: world.box(name) is None and world.kube.get("v1/pods", world.namespace, name) is None,
                     30, what="box and pod gone")
    assert session.exists(), "the claim outlives the pod"
    await world.create(world.box_path(), box)
    second = await eventually(lambda: (uid := pod_uid(world, name)) and uid != first and uid, 60,
                              what="a new box pod running")
    assert second != first
    assert session.read_text() == '{"turn": 1}\n', "the conversation survived the pod"
    assert '"tok-x"' in (claim / ".codex" / "auth.json").read_text(), "the login is installed again"
    assert config.read_text() == text, "settings kept, modes written once"
    # Without the claim the pod cannot start, as on a real node.
    assert world.kube.get("v1/persistentvolumeclaims", world.namespace, "codex-home") is not None


@pytest.mark.unit
@pytest.mark.parametrize("var,value", [("AGENTBOX_CODEX_APPROVAL_POLICY", "always"),
                                       ("AGENTBOX_CODEX_SANDBOX_MODE", "none"),
                                       ("AGENTBOX_CLAUDE_PERMISSION_MODE", "yolo"),
                                       ("AGENTBOX_CODEX_APPROVAL_POLICY", 'never"\n[x]')])
def test_an_unknown_mode_stops_the_entrypoint_in_one_line(tmp_path, var: str, value: str):
    """Before tmux starts: the value never reaches a settings file (no TOML or JSON injection)."""
    import shutil
    import subprocess

    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "AGENTBOX_CREDENTIALS_DIR": str(tmp_path / "none"),
           var: value}
    out = subprocess.run(["sh", str(REPO_ROOT / "images/box/entrypoint.sh")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and var in out.stderr, out.stderr
    config = home / ".codex" / "config.toml"
    assert "approval_policy" not in config.read_text() and "[x]" not in config.read_text()
    assert "defaultMode" not in (home / ".claude" / "settings.json").read_text()
