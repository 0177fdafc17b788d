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
