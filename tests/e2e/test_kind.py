"""Opt-in end-to-end layer against a real cluster (kind), driven by KUBECONFIG.

Skipped unless AGENTBOX_E2E=1 and KUBECONFIG point at a kind cluster (its context name starts with
`kind-`): the tests create namespaces and objects and must never touch another cluster.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.e2e


def _kind_context() -> str | None:
    if os.environ.get("AGENTBOX_E2E") != "1" or not os.environ.get("KUBECONFIG"):
        return None
    from kubernetes import config

    _, active = config.list_kube_config_contexts(config_file=os.environ["KUBECONFIG"])
    name = (active or {}).get("name", "")
    return name if name.startswith("kind-") else None


requires_kind = pytest.mark.skipif(
    _kind_context() is None,
    reason="no kind cluster: set AGENTBOX_E2E=1 and KUBECONFIG to a kind cluster (kind create cluster --config kind-config.yaml)",
)


@requires_kind
def test_crds_install_and_accept_the_examples():
    import uuid

    import yaml
    from kubernetes import client, config, utils

    api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    for path in ("crds/agentboxes.yaml", "crds/subscriptions.yaml"):
        try:
            utils.create_from_yaml(api, path)
        except utils.FailToCreateError as exc:
            if not all(e.status == 409 for e in exc.api_exceptions):
                raise
    ns = f"agentbox-e2e-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    try:
        custom = client.CustomObjectsApi(api)
        with open("examples/claude-subscription.yaml") as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        sub = next(d for d in docs if d["kind"] == "Subscription")
        custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "subscriptions", sub)
        bad = dict(sub, metadata={"name": "bad"}, spec=dict(sub["spec"], reserve={"fiveHourPercent": 96}))
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "subscriptions", bad)
        assert err.value.status == 422
    finally:
        core.delete_namespace(ns)


@requires_kind
def test_box_policy_refuses_a_privileged_template_at_apply():
    """The chart's ValidatingAdmissionPolicy in a real API server (Kubernetes 1.30+): a privileged template is
    refused at create with the rule's message; the examples are admitted."""
    import pathlib
    import time
    import uuid

    import helm_python as helm
    import yaml
    from kubernetes import client, config, utils

    api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    version = client.VersionApi(api).get_code()
    if (int(version.major), int(version.minor.rstrip("+"))) < (1, 30):
        pytest.skip(f"ValidatingAdmissionPolicy v1 needs Kubernetes 1.30+, the cluster runs {version.git_version}")
    for path in ("crds/agentboxes.yaml", "crds/subscriptions.yaml"):
        try:
            utils.create_from_yaml(api, path)
        except utils.FailToCreateError as exc:
            if not all(e.status == 409 for e in exc.api_exceptions):
                raise
    chart = pathlib.Path(__file__).resolve().parents[2] / "charts" / "agentbox-controller"
    release = f"e2e{uuid.uuid4().hex[:6]}"
    rendered = helm.Chart.load(chart).render({}, name=release, namespace="default", is_install=True)
    text = next(t for p, t in rendered.items() if p.endswith("templates/boxpolicy.yaml"))
    policy, binding = [d for d in yaml.safe_load_all(text) if d]
    adm = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    ns = f"agentbox-e2e-{uuid.uuid4().hex[:6]}"
    adm.create_validating_admission_policy(policy)
    adm.create_validating_admission_policy_binding(binding)
    core.create_namespace({"metadata": {"name": ns}})
    try:
        with open("examples/claude-box.yaml") as fh:
            good = next(d for d in yaml.safe_load_all(fh) if d and d["kind"] == "AgentBox")
        bad = yaml.safe_load(yaml.safe_dump(good))
        bad["metadata"]["name"] = "privileged"
        bad["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        deadline = time.monotonic() + 60
        while True:  # the policy takes a moment to be loaded by the API server
            try:
                custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "agentboxes", bad)
            except client.ApiException as exc:
                assert exc.status in (403, 422), exc
                assert "securityContext.privileged" in exc.body and "box policy rule privileged" in exc.body
                break
            custom.delete_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "agentboxes", "privileged")
            assert time.monotonic() < deadline, "the box policy never refused the privileged template"
            time.sleep(2)
        custom.create_namespaced_custom_object("agentbox.dev", "v1alpha1", ns, "agentboxes", good)
    finally:
        core.delete_namespace(ns)
        adm.delete_validating_admission_policy_binding(binding["metadata"]["name"])
        adm.delete_validating_admission_policy(policy["metadata"]["name"])
