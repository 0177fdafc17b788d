"""Adversarial scenarios (issue 9): a box, or someone who can create pods and Secrets in the namespace,
acts as the attacker against the real operator running in the emulated world.

Ownership (finding 3): a pod or a Secret created beforehand under a box's names is not the box's.
The controller execs, pushes logins and writes Secrets only into objects whose controller
ownerReference carries the box's UID; a squatter gets Ready=False with reason PodNotOwned /
SecretNotOwned, one Warning Event, and nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys

import pytest

from agentbox_sim.world import TabSpec, World, eventually

from harness.world_fixtures import FAST

pytestmark = pytest.mark.component

TOKEN_PATH = {"anthropic": "/v1/oauth/token", "openai": "/oauth/token"}


def settings(world: World, **kw) -> None:
    world.settings = world.settings.model_copy(update={
        "login_refresh_before_s": 3.0, "login_retry_s": 0.5, "usage_interval_s": 30.0,
        "anthropic_token_url": world.provider.url + TOKEN_PATH["anthropic"],
        "openai_token_url": world.provider.url + TOKEN_PATH["openai"], **kw})


def ready(world: World, box: str) -> dict:
    conds = ((world.box(box) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready"), {})


def execs_into(world: World, pod: str) -> int:
    return sum(1 for r in world.kube.exec_journal if r.pod == pod)


@pytest.mark.timeout(60)
async def test_squatting_pod_gets_no_exec_and_no_login(world: World):
    """A pod made beforehand under the box's name (not owned by the box) is never exec'd into, never
    gets the refreshed login, and the box says PodNotOwned once; a real box beside it is served."""
    settings(world)
    world.provider.token_ttl_s["anthropic"] = 6.0
    world.start_operator()
    login = world.provider.issue_login("anthropic", "acct-a", 6.0)
    await world.add_secret("login-a", "credentials.json", login)
    await world.add_subscription("shared", "anthropic", "login-a", "credentials.json")
    # The squatter: a running pod named like the box, with a login file of its own.
    await world.create(f"/api/v1/namespaces/{world.namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "victim"},
        "spec": {"containers": [{"name": "box", "image": "attacker:latest"}]}})
    planted = json.dumps({"claudeAiOauth": {"accessToken": "planted", "refreshToken": "planted-r",
                                            "expiresAt": 4102444800000}})
    (world.pod_dir("victim") / ".claude").mkdir(parents=True, exist_ok=True)
    (world.pod_dir("victim") / ".claude/.credentials.json").write_text(planted)
    await world.run_pod("victim", [TabSpec("main", [sys.executable, "-c", "import time; time.sleep(600)"])])
    await world.add_box("victim", "claude-code", "shared")
    await world.add_box("good", "claude-code", "shared")
    await world.run_pod("good", [TabSpec("main", [sys.executable, "-c", "import time; time.sleep(600)"])])

    await eventually(lambda: ready(world, "victim").get("reason") == "PodNotOwned", 15, what="PodNotOwned")
    # Logins keep moving on the subscription (refreshes every few seconds) while we watch.
    await eventually(lambda: sum(r.status == 200 for r in world.provider.refreshes) >= 2, 20, what="two refreshes")
    await eventually(lambda: "agentbox" in (world.login_file("good") or ""), 10, what="the good box got the login")
    await asyncio.sleep(2.0)  # several scans of both boxes
    assert execs_into(world, "victim") == 0, "exec'd into a pod the box does not own"
    assert world.login_file("victim") == planted, "a login was pushed into the squatter"
    assert execs_into(world, "good") > 0
    box = world.box("victim") or {}
    assert box["status"].get("state") == "Error"
    assert "not owned" in ready(world, "victim")["message"]
    warnings = [e for e in world.events("victim") if e.get("reason") == "PodNotOwned"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
    # The squatter's pod object is untouched.
    pod = world.kube.get("v1/pods", world.namespace, "victim") or {}
    assert not (pod.get("metadata") or {}).get("ownerReferences")
    assert pod["spec"]["containers"][0]["image"] == "attacker:latest"


@pytest.mark.timeout(60)
async def test_squatting_secret_is_never_written(world: World):
    """A Secret `<box>-credentials` that the box does not own keeps its data; the box says
    SecretNotOwned once and gets no pod (which would mount the squatter's Secret)."""
    world.start_operator()
    await world.add_secret("login-a", "credentials.json",
                           world.provider.issue_login("anthropic", "acct-a", 3600.0))
    await world.add_subscription("shared", "anthropic", "login-a", "credentials.json")
    squat = base64.b64encode(b"attacker data").decode()
    await world.create(f"/api/v1/namespaces/{world.namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "victim-credentials"},
        "data": {"credentials.json": squat}})
    await world.add_box("victim", "claude-code", "shared")
    await eventually(lambda: ready(world, "victim").get("reason") == "SecretNotOwned", 15, what="SecretNotOwned")
    await asyncio.sleep(FAST.retry_delay_s * 2 + 0.5)  # the reconcile retries at least twice
    sec = world.kube.get("v1/secrets", world.namespace, "victim-credentials") or {}
    assert sec["data"] == {"credentials.json": squat}, "the squatter's Secret was written"
    assert not (sec.get("metadata") or {}).get("ownerReferences")
    assert world.kube.get("v1/pods", world.namespace, "victim") is None
    warnings = [e for e in world.events("victim") if e.get("reason") == "SecretNotOwned"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
    assert "victim-credentials" in warnings[0]["message"]


@pytest.mark.timeout(60)
async def test_secret_of_another_type_carrying_the_box_uid_is_never_written(world: World):
    """Someone who may create Secrets (but not the controller's rights) pre-creates `<box>-credentials`
    as a service-account-token Secret whose ownerReference names the box's UID. The controller does not
    take the UID alone as proof: a Secret of another type is not its own (SecretNotOwned, never
    patched, no pod that would mount it)."""
    await world.add_secret("login-a", "credentials.json",
                           world.provider.issue_login("anthropic", "acct-a", 3600.0))
    await world.add_subscription("shared", "anthropic", "login-a", "credentials.json")
    await world.add_box("victim", "claude-code", "shared")
    uid = (world.box("victim") or {})["metadata"]["uid"]
    token = base64.b64encode(b"sa-token-of-the-namespace").decode()
    await world.create(f"/api/v1/namespaces/{world.namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "victim-credentials",
                     "annotations": {"kubernetes.io/service-account.name": "default"},
                     "ownerReferences": [{"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentBox",
                                          "name": "victim", "uid": uid, "controller": True}]},
        "data": {"token": token}})
    world.start_operator()
    await eventually(lambda: ready(world, "victim").get("reason") == "SecretNotOwned", 15, what="SecretNotOwned")
    await asyncio.sleep(FAST.retry_delay_s * 2 + 0.5)  # the reconcile retries at least twice
    sec = world.kube.get("v1/secrets", world.namespace, "victim-credentials") or {}
    assert sec["data"] == {"token": token}, "the controller wrote into a Secret of another type"
    assert world.kube.get("v1/pods", world.namespace, "victim") is None
    assert "kubernetes.io/service-account-token" in ready(world, "victim")["message"]


@pytest.mark.timeout(60)
async def test_box_pod_mounts_only_the_login_key(world: World):
    """The credentials volume projects the login file's key only (`items`), so nothing else a Secret of
    that name holds reaches the box."""
    world.start_operator()
    await world.add_secret("login-a", "credentials.json",
                           world.provider.issue_login("anthropic", "acct-a", 3600.0))
    await world.add_subscription("shared", "anthropic", "login-a", "credentials.json")
    await world.add_box("good", "claude-code", "shared")
    await eventually(lambda: world.kube.get("v1/pods", world.namespace, "good"), 15, what="the box pod")
    pod = world.kube.get("v1/pods", world.namespace, "good") or {}
    vols = [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert len(vols) == 1
    assert vols[0]["secret"]["items"] == [{"key": "credentials.json", "path": "credentials.json"}]
