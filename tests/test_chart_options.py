"""The chart's optional objects and subchart use: `global` accepted, the `helm test` hook, NetworkPolicy,
PodDisruptionBudget. Rendered by the real Helm engine (helpers of tests/test_chart.py) and validated
strictly against the pinned Kubernetes schemas."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from test_chart import CHART, KUBE_VERSION, LINT_KUBE_VERSION, NAMESPACE, by_kind, container, one, render

from controller import metrics

pytestmark = pytest.mark.unit

OPTIONS_ON = {
    "networkPolicy": {"enabled": True,
                      "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
                      "egressTo": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
    "podDisruptionBudget": {"enabled": True},
    "global": {"imageRegistry": "registry.example", "storageClass": "fast"},
}


def test_options_render_valid_objects_and_lint():
    docs = render(OPTIONS_ON)
    for kind in ("NetworkPolicy", "PodDisruptionBudget", "Pod"):
        kubernetes_validate.validate(one(docs, kind), KUBE_VERSION, strict=True)
    report = helm.lint(CHART, OPTIONS_ON, strict=True, kube_version=LINT_KUBE_VERSION, namespace=NAMESPACE)
    assert report["errors"] == []
    assert not by_kind(render(), "NetworkPolicy") and not by_kind(render(), "PodDisruptionBudget")


def test_values_schema_accepts_global_as_a_subchart_would_get_it():
    chart = helm.Chart.load(CHART)
    chart.validate_schema({"global": {"imageRegistry": "registry.example", "anything": {"nested": True}}})
    for bad in ({"networkPolicy": {"egressPorts": []}}, {"networkPolicy": {"bogus": 1}}, {"tests": {"image": ""}}):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


def test_helm_test_hook_reads_the_build_info_through_the_metrics_service():
    docs = render()
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    svc = one(docs, "Service")
    port = svc["spec"]["ports"][0]["port"]
    script = pod["spec"]["containers"][0]["command"][-1]
    assert f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:{port}/metrics" in script
    # The line it greps for is one the controller exports (an Info metric gets `_info`).
    names = {f"{fam.name}_info" for fam in metrics.REGISTRY.collect() if fam.type == "info"}
    assert any(f"'^{name}{{'" in script for name in names), script
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["automountServiceAccountToken"] is False
    assert not by_kind(render({"metrics": {"enabled": False}}), "Pod")
    assert not by_kind(render({"tests": {"enabled": False}}), "Pod")


def _port_names(docs: list[dict[str, Any]]) -> set[str]:
    return {p["name"] for p in container(docs)["ports"]}


def test_network_policy_opens_only_the_controller_ports_and_its_egress():
    docs = render(OPTIONS_ON)
    np = one(docs, "NetworkPolicy")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ingress = {p["port"]: rule for rule in np["spec"]["ingress"] for p in rule["ports"]}
    assert set(ingress) == {"health", "metrics"} and set(ingress) <= _port_names(docs)
    assert ingress["metrics"]["from"] == OPTIONS_ON["networkPolicy"]["metricsFrom"]
    assert "from" not in ingress["health"]
    egress = [(p["port"], p["protocol"]) for rule in np["spec"]["egress"] for p in rule["ports"]]
    assert sorted(egress) == [(53, "TCP"), (53, "UDP"), (443, "TCP"), (6443, "TCP")]
    no_metrics = one(render({**OPTIONS_ON, "metrics": {"enabled": False}}), "NetworkPolicy")
    assert [p["port"] for rule in no_metrics["spec"]["ingress"] for p in rule["ports"]] == ["health"]


def test_pod_disruption_budget_selects_the_controller():
    docs = render(OPTIONS_ON)
    pdb = one(docs, "PodDisruptionBudget")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    ha = one(render({"replicas": 2, "podDisruptionBudget": {"minAvailable": 1}}), "PodDisruptionBudget")
    assert ha["spec"] == {"minAvailable": 1, "selector": pdb["spec"]["selector"]}


def test_chart_readme_names_every_top_level_value():
    import yaml

    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [k for k in values if f"`{k}" not in readme]
    assert missing == [], f"charts/agentbox-controller/README.md does not mention {missing}"
    assert "helm test" in readme and "`global`" in readme
