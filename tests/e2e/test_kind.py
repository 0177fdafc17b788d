"""Opt-in end-to-end layer against a real kind cluster (`make kind-up`, then `make e2e`).

Runs only with AGENTBOX_E2E=1, and refuses (fails) when the kube context is not a kind one (its name
starts with `kind-` and its server is on a loopback address): the tests install a chart, create namespaces
and objects, and must never touch another cluster. Needs the controller and box images loaded into the kind
nodes (`make kind-up` builds and loads them; CONTROLLER_IMAGE / BOX_IMAGE name them).

The box test: the chart installed (helm, or the chart rendered by the embedded Helm SDK and applied), a
Subscription with a placeholder login (its usage reads fail: resuming works from the screen), and the example
box template whose tab runs a scripted Claude Code (tests/e2e/scripted-claude.js, mounted from a ConfigMap:
the box image has node, not Python) that stops on its 5-hour limit; waits for LimitDetected then Resumed.
The same box template and scripted agent run through the emulator's kubelet model in make test
(tests/test_e2e_box.py), so what this test adds is the real API server, kubelet, images and chart.
"""

from __future__ import annotations

import base64
import math
import os
import pathlib
import shutil
import subprocess
import time
import uuid
from urllib.parse import urlparse

import pytest
import yaml

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAG = yaml.safe_load((ROOT / "charts/agentbox-controller/Chart.yaml").read_text())["appVersion"]
CONTROLLER_IMAGE = os.environ.get("CONTROLLER_IMAGE", f"ghcr.io/agentbox-dev/agentbox-controller:{TAG}")
BOX_IMAGE = os.environ.get("BOX_IMAGE", f"ghcr.io/agentbox-dev/agentbox-box:{TAG}")
RELEASE_NS = "agentbox-system"


def kind_context() -> tuple[str | None, str]:
    """(kubeconfig path, context name) when the active context is a kind cluster; (None, why) otherwise."""
    from kubernetes import config

    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except Exception as exc:  # noqa: BLE001 - no kubeconfig at all
        return None, f"no usable kubeconfig at {path} ({type(exc).__name__})"
    name = (active or {}).get("name", "")
    cluster = (active or {}).get("context", {}).get("cluster", "")
    with open(path) as fh:
        clusters = {c["name"]: c["cluster"] for c in (yaml.safe_load(fh) or {}).get("clusters") or []}
    host = urlparse((clusters.get(cluster) or {}).get("server", "")).hostname or ""
    if not name.startswith("kind-") or host not in ("127.0.0.1", "localhost", "::1"):
        return None, f"refusing kube context {name!r} (server {host!r}): not a kind cluster"
    return path, name


@pytest.fixture(scope="module")
def kind():
    """The kind cluster's kubeconfig and context; skipped without AGENTBOX_E2E=1, failed on another cluster."""
    if os.environ.get("AGENTBOX_E2E") != "1":
        pytest.skip("opt-in: AGENTBOX_E2E=1 with a kind cluster (make kind-up && make e2e)")
    path, context = kind_context()
    if path is None:
        pytest.fail(context)
    return path, context


def _api(kind):
    from kubernetes import config

    return config.new_client_from_config(config_file=kind[0], context=kind[1])


def install_chart(kind) -> None:
    """The chart, cluster-wide (each test uses its own namespace), short scan intervals."""
    repo, tag = CONTROLLER_IMAGE.rsplit(":", 1)
    values = {"image": {"repository": repo, "tag": tag}, "clusterWide": True,
              "settings": {"scanIntervalS": 2, "resumeMarginS": 5, "humanIdleS": 5, "usageIntervalS": 30}}
    kube = ["kubectl", "--kubeconfig", kind[0], "--context", kind[1]]
    if shutil.which("helm"):
        vals = ROOT / "tmp" / "e2e-values.yaml"
        vals.parent.mkdir(exist_ok=True)
        vals.write_text(yaml.safe_dump(values))
        subprocess.run(["helm", "--kubeconfig", kind[0], "--kube-context", kind[1], "upgrade", "--install", "agentbox",
                        str(ROOT / "charts/agentbox-controller"), "-n", RELEASE_NS, "--create-namespace",
                        "-f", str(vals), "--wait"], check=True)
        return
    import helm_python as helm

    rendered = helm.Chart.load(str(ROOT / "charts/agentbox-controller")).render(
        values, name="agentbox", namespace=RELEASE_NS, is_install=True)
    docs = "\n---\n".join(d for p, d in sorted(rendered.items())
                          if p.endswith(".yaml") and "/tests/" not in p and d.strip())
    subprocess.run([*kube, "create", "namespace", RELEASE_NS], check=False, capture_output=True)
    subprocess.run([*kube, "apply", "-f", "-"], input=docs.encode(), check=True)
    subprocess.run([*kube, "-n", RELEASE_NS, "rollout", "status", "deploy/agentbox-agentbox-controller",
                    "--timeout=180s"], check=True)


def e2e_box(namespace: str, reset_epoch: int) -> list[dict]:
    """The scripted-agent box: the example box template plus a ConfigMap holding the scripted Claude Code."""
    box = yaml.safe_load((ROOT / "examples/claude-box.yaml").read_text())
    ctr = box["spec"]["template"]["spec"]["containers"][0]
    ctr["image"] = BOX_IMAGE
    ctr["env"] = [*(ctr.get("env") or []),
                  {"name": "AGENTBOX_COMMAND", "value": f"node /opt/scripted/claude.js {reset_epoch}"}]
    ctr["volumeMounts"] = [{"name": "scripted", "mountPath": "/opt/scripted", "readOnly": True}]
    box["spec"]["template"]["spec"]["volumes"] = [{"name": "scripted", "configMap": {"name": "scripted-claude"}}]
    box["metadata"]["namespace"] = namespace
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripted-claude", "namespace": namespace},
          "data": {"claude.js": (ROOT / "tests/e2e/scripted-claude.js").read_text()}}
    return [cm, box]


def placeholder_login() -> str:
    """A Claude Code login file that parses but is no real account (usage reads get 401)."""
    return ('{"claudeAiOauth": {"accessToken": "sk-ant-oat01-e2e", "refreshToken": "sk-ant-ort01-e2e", '
            '"expiresAt": 4102444800000, "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}')


def test_a_box_is_limited_then_resumed_on_kind(kind):
    from kubernetes import client, utils

    install_chart(kind)
    api = _api(kind)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"agentbox-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        core.create_namespaced_secret(ns, {"metadata": {"name": "claude-login"},
                                           "data": {"credentials.json": base64.b64encode(placeholder_login().encode()).decode()}})
        sub = yaml.safe_load((ROOT / "examples/claude-subscription.yaml").read_text())
        custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "subscriptions", sub)
        reset = int(math.ceil((time.time() + 90) / 60) * 60)  # Claude Code shows minutes: a whole minute
        cm, box = e2e_box(ns, reset)
        utils.create_from_dict(api, cm, namespace=ns)
        custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "agentboxes", box)

        def reasons() -> list[str]:
            evs = core.list_namespaced_event(ns, field_selector="involvedObject.name=claude-box").items
            return [e.reason for e in sorted(evs, key=lambda e: e.metadata.creation_timestamp)]

        deadline = time.time() + 180
        while "LimitDetected" not in reasons():
            assert time.time() < deadline, f"no LimitDetected; events: {reasons()}"
            time.sleep(2)
        deadline = reset + 180
        while "Resumed" not in reasons():
            assert time.time() < deadline, f"no Resumed after the reset; events: {reasons()}"
            time.sleep(2)
        got = reasons()
        assert got.index("LimitDetected") < got.index("Resumed")
        status = custom.get_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "agentboxes", "claude-box")["status"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
    finally:
        core.delete_namespace(ns)


def test_crds_accept_the_examples_and_refuse_a_bad_reserve(kind):
    from kubernetes import client

    api = _api(kind)
    install_chart(kind)
    ns = f"agentbox-e2e-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    try:
        custom = client.CustomObjectsApi(api)
        sub = yaml.safe_load((ROOT / "examples/claude-subscription.yaml").read_text())
        custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "subscriptions", sub)
        bad = dict(sub, metadata={"name": "bad"}, spec=dict(sub["spec"], reserve={"fiveHourPercent": 96}))
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "subscriptions", bad)
        assert err.value.status == 422
    finally:
        core.delete_namespace(ns)
