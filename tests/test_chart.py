"""The Helm chart, rendered by the real Helm engine (helm-python-sdk, Helm v4 Go SDK): lint, schema
validation of every built-in object against a pinned Kubernetes version (kubernetes-validate), the
monitoring objects checked structurally, alert and dashboard expressions naming only exported metrics,
CRD templates equal to the generated CRDs, values in step with the controller's settings and CLI."""

from __future__ import annotations

import json
import pathlib
import re
import typing
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from controller import metrics
from controller.__main__ import build_parser
from controller.crdgen import render_crds
from controller.notify import Notifier
from controller.settings import Settings

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "agentbox-controller"
KUBE_VERSION = "1.33"          # schemas used by kubernetes-validate
LINT_KUBE_VERSION = "v1.33.0"  # .Capabilities.KubeVersion for helm lint
RELEASE, NAMESPACE = "agentbox", "agentbox-system"

# Value sets every test renders: defaults, the namespaced mode, and every toggle on.
NAMESPACED = {"clusterWide": False, "watchNamespaces": ["team-a", "team-b"]}
ALL_ON = {
    "replicas": 2,  # leader election is on by default
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                "prometheusRule": {"enabled": True}, "grafanaDashboard": {"enabled": True}},
    "webhook": {"enabled": True, "secretName": "agentbox-webhook", "style": "slack", "clusterName": "kind"},
    "image": {"digest": "sha256:" + "a" * 64},
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
}
NAMESPACED_ALL_ON = {**ALL_ON, **NAMESPACED}
CLUSTER_WIDE = {"clusterWide": True}
PEERING = {"replicas": 2, "leaderElection": {"enabled": False}, "peering": {"enabled": True}}
CASES = {"default": {}, "cluster-wide": CLUSTER_WIDE, "namespaced": NAMESPACED, "all-on": ALL_ON, "namespaced-all-on": NAMESPACED_ALL_ON,
         "crds-folder": {"crds": {"templated": False}}, "peering": {**PEERING, **NAMESPACED},
         "no-election": {"leaderElection": {"enabled": False}}}

MONITORING = {"ServiceMonitor", "PrometheusRule"}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Render the chart (as `helm install` would) and return every object."""
    chart = helm.Chart.load(CHART)
    out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, (kind, [d["metadata"]["name"] for d in found])
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(docs)["env"]}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(CASES[request.param])


# ---------------------------------------------------------------------------------------------- lint
@pytest.mark.parametrize("case", ["default", "namespaced-all-on"])
def test_lint_strict(case: str):
    report = helm.lint(CHART, CASES[case], strict=True, kube_version=LINT_KUBE_VERSION, namespace=NAMESPACE)
    assert report["errors"] == []
    # severity 1 (info) is only "icon is recommended"
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# ---------------------------------------------------------------------------------------------- schemas
def test_every_builtin_object_validates_strictly(rendered):
    case, docs = rendered
    assert docs
    for doc in docs:
        if doc["kind"] in MONITORING:
            continue  # not built-in: checked structurally below
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_values_schema_refuses_bad_values():
    chart = helm.Chart.load(CHART)
    chart.validate_schema({})
    for bad in ({"replicas": "two"}, {"bogus": True}, {"webhook": {"style": "teams"}},
                {"settings": {"scanIntervalS": 0}}, {"settings": {"scanIntervalSeconds": 5}},
                {"watchNamespaces": ["Team_A"]}, {"metrics": {"prometheusRule": {"usageReadsFailingRatio": 2}}},
                {"leaderElection": {"retryPeriod": 0.5}}, {"leaderElection": {"leaseName": "Bad_Name"}}):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


def test_replicas_without_an_election_and_webhook_without_secret_are_refused():
    with pytest.raises(helm.HelmRenderError, match="leaderElection"):
        render({"replicas": 2, "leaderElection": {"enabled": False}})
    with pytest.raises(helm.HelmRenderError, match="enable one"):
        render({"replicas": 2, "peering": {"enabled": True}})
    with pytest.raises(helm.HelmRenderError, match="secretName"):
        render({"webhook": {"enabled": True}})


# ---------------------------------------------------------------------------------------------- CRDs
def _without_helm_metadata(crd: dict[str, Any]) -> dict[str, Any]:
    crd = json.loads(json.dumps(crd))
    crd["metadata"].pop("annotations", None)
    crd["metadata"].pop("labels", None)
    return crd


def test_crd_templates_are_the_generated_crds_kept_on_uninstall():
    docs = render()
    crds = {d["metadata"]["name"]: d for d in by_kind(docs, "CustomResourceDefinition")}
    generated = {c["metadata"]["name"]: c for c in render_crds().values()}
    assert set(crds) == set(generated)
    for name, crd in crds.items():
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        assert _without_helm_metadata(crd) == _without_helm_metadata(generated[name])


def test_chart_crd_copies_are_the_repository_crds():
    """The templates render the chart's files/crds/ copies; there is no crds/ folder (Helm would create
    those first, without ownership, and a plain `helm install` would then stop on the templated ones)."""
    copies = CHART / "files" / "crds"
    chart_files = sorted(p.name for p in copies.glob("*.yaml"))
    assert chart_files == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for name in chart_files:
        assert (copies / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), name
    assert helm.Chart.load(CHART).crds == []


def test_crds_toggle_off_installs_no_crds():
    assert by_kind(render({"crds": {"templated": False}}), "CustomResourceDefinition") == []


# ---------------------------------------------------------------------------------------------- Deployment
def test_deployment_is_locked_down_and_probed(rendered):
    _, docs = rendered
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    ctr = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert ctr["resources"]["requests"] and ctr["resources"]["limits"]["memory"]
    health = next(p for p in ctr["ports"] if p["name"] == "health")["containerPort"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    args = build_parser().parse_args(ctr["args"])
    assert args.command == "run"
    assert args.liveness == f"http://0.0.0.0:{health}/healthz"
    assert args.log_format == "json", "the chart's logs are JSON lines for collectors"


def test_deployment_args_follow_the_mode():
    # Namespaced by default: the release namespace; leader election on, also with one replica.
    docs = render()
    args = build_parser().parse_args(container(docs)["args"])
    assert args.namespace == [NAMESPACE] and args.peering == ""
    assert args.leader_elect == f"{RELEASE}-agentbox-controller" and args.lease_namespace == NAMESPACE
    assert one(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    assert not by_kind(docs, "PodDisruptionBudget"), "one replica: no PDB unless asked for"
    args = build_parser().parse_args(container(render(CLUSTER_WIDE))["args"])
    assert args.namespace is None
    docs = render(NAMESPACED_ALL_ON)
    args = build_parser().parse_args(container(docs)["args"])
    assert args.namespace == ["team-a", "team-b"]
    assert args.leader_elect == f"{RELEASE}-agentbox-controller" and args.peering == ""
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1, "replicas > 1: a PDB keeps one"
    assert container(docs)["image"].endswith("@sha256:" + "a" * 64)
    assert not [d for d in by_kind(docs, "CustomResourceDefinition") if d["spec"]["group"] == "kopf.dev"]
    # Without an election: one operator only, never two at once (Recreate).
    docs = render({"leaderElection": {"enabled": False}})
    args = build_parser().parse_args(container(docs)["args"])
    assert args.leader_elect == "" and one(docs, "Deployment")["spec"]["strategy"]["type"] == "Recreate"
    # kopf peering, the older alternative.
    docs = render(PEERING)
    args = build_parser().parse_args(container(docs)["args"])
    assert args.peering == f"{RELEASE}-agentbox-controller" and args.leader_elect == ""
    assert {d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")} >= {
        "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}


def test_leader_election_values_reach_the_args_and_are_usable():
    """The chart's timings are what the controller runs with, they pass the controller's own check, and
    their failover bound is the documented 15 s at most."""
    from controller.kube.election import ElectionTimings

    values = yaml.safe_load((CHART / "values.yaml").read_text())["leaderElection"]
    args = build_parser().parse_args(container(render())["args"])
    timings = ElectionTimings(args.lease_duration, args.renew_deadline, args.retry_period)
    assert timings == ElectionTimings(values["leaseDuration"], values["renewDeadline"], values["retryPeriod"])
    assert timings == ElectionTimings(), "the chart's defaults are the CLI's defaults"
    assert timings.problem() is None and timings.failover_bound_s <= 15
    custom = {"leaderElection": {"leaseName": "ab-leader", "namespace": "ops", "leaseDuration": 20,
                                 "renewDeadline": 15, "retryPeriod": 2}}
    docs = render(custom)
    args = build_parser().parse_args(container(docs)["args"])
    assert (args.leader_elect, args.lease_namespace, args.lease_duration, args.renew_deadline,
            args.retry_period) == ("ab-leader", "ops", 20, 15.0, 2.0)
    role = next(d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith("-leader-election"))
    assert role["metadata"]["namespace"] == "ops"
    assert [r.get("resourceNames") for r in role["rules"]] == [None, ["ab-leader"]]
    assert ElectionTimings(5, 4.5, 1).problem(), "a leader must be gone before a standby may start"


def test_shards_reach_the_settings_and_the_lease_role_names_the_shard_leases():
    """`shards` (default 1: nothing changes) becomes AGENTBOX_SHARDS, the Lease Role grants get/update on
    exactly the shard Leases and the heartbeat Lease (the names controller/kube/shardleases.py uses), a PDB
    keeps one replica, and sharding without the Lease election is refused."""
    from controller.kube.shardleases import lease_names

    default = render()
    assert "AGENTBOX_SHARDS" not in env_of(default) and Settings.from_env(env_of(default)).shards == 1
    docs = render({"replicas": 3, "shards": 4, "settings": {"shardBy": "label"}})
    settings = Settings.from_env(env_of(docs))
    assert (settings.shards, settings.shard_by, settings.shard_label) == (4, "label", "agentbox.dev/shard")
    args = build_parser().parse_args(container(docs)["args"])
    role = next(d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith("-leader-election"))
    assert [(r.get("resourceNames"), r["verbs"]) for r in role["rules"]] == [
        (None, ["create"]), (lease_names(args.leader_elect, 4), ["get", "update"])]
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    with pytest.raises(helm.HelmRenderError, match="shards"):
        render({"shards": 2, "leaderElection": {"enabled": False}})
    for bad in ({"shards": 0}, {"shards": 257}, {"settings": {"shardBy": "random"}}):
        with pytest.raises(helm.HelmValuesError):
            render(bad)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# Settings the chart sets from other values: metrics.port / metrics.enabled; the box policy from boxPolicy.*
# (shared with the admission policy).
SETTINGS_SET_ELSEWHERE = {"metrics_port", "box_policy", "box_policy_service_accounts", "box_policy_allow_token",
                          "box_policy_volume_types", "box_policy_secret_names", "box_policy_image_prefixes",
                          "shards"}  # shards: the top-level `shards` value


def settings_schema() -> dict[str, Any]:
    """The `settings` properties of values.schema.json, derived from controller/settings.py."""
    out: dict[str, Any] = {}
    for name, field in Settings.model_fields.items():
        if name in SETTINGS_SET_ELSEWHERE:
            continue
        ann = field.annotation
        entry: dict[str, Any] = {"type": "integer" if ann is int else "string" if ann is str else "number",
                                 "description": field.description}
        if typing.get_origin(ann) is typing.Literal:
            entry = {"type": "string", "enum": list(typing.get_args(ann)), "description": field.description}
        for meta in field.metadata:
            for attr, key in (("gt", "exclusiveMinimum"), ("ge", "minimum"), ("lt", "exclusiveMaximum"),
                              ("le", "maximum"), ("min_length", "minLength"), ("max_length", "maxLength")):
                if getattr(meta, attr, None) is not None:
                    entry[key] = getattr(meta, attr)
        if entry["type"] == "string" and name.endswith("_url"):
            entry["pattern"] = "^https?://"
        out[_camel(name)] = entry
    return out


def write_settings_schema() -> None:
    path = CHART / "values.schema.json"
    schema = json.loads(path.read_text())
    schema["properties"]["settings"]["properties"] = settings_schema()
    path.write_text(json.dumps(schema, indent=2) + "\n")


def test_settings_values_are_the_controller_settings():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["settings"]["properties"] == settings_schema(), (
        "values.schema.json `settings` is out of step with controller/settings.py: "
        "run `.venv/bin/python tests/test_chart.py`")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    snake = lambda k: re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower()  # noqa: E731
    for key, value in values["settings"].items():
        assert float(value) == Settings.model_fields[snake(key)].default, key
    env = env_of(render({"settings": {"anthropicBaseUrl": "http://provider:8080", "maxAttempts": 3}}))
    settings = Settings.from_env(env)
    assert settings.anthropic_base_url == "http://provider:8080" and settings.max_attempts == 3
    assert settings.metrics_port == values["metrics"]["port"]
    assert Settings.from_env(env_of(render({"metrics": {"enabled": False}}))).metrics_port == 0


def test_webhook_secret_is_mounted_and_read_by_the_notifier():
    docs = render(ALL_ON)
    env = env_of(docs)
    ctr = container(docs)
    mount = next(m for m in ctr["volumeMounts"] if m["name"] == "webhook")
    assert env["AGENTBOX_WEBHOOK_URL_FILE"].startswith(mount["mountPath"] + "/") and mount["readOnly"]
    vol = next(v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "webhook")
    assert vol["secret"]["secretName"] == "agentbox-webhook"
    assert not any("URL" in k and not k.endswith("_FILE") for k in env), "the URL itself never sits in the env"
    notifier = Notifier.from_env(env)
    assert notifier.style == "slack" and notifier.cluster == "kind"


# ---------------------------------------------------------------------------------------------- RBAC shape
def test_rbac_has_no_wildcards_and_every_rule_is_commented():
    for case in CASES.values():
        for doc in render(case):
            for rule in doc.get("rules") or []:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule.get(key, []), rule
    text = (CHART / "templates" / "rbac.yaml").read_text().splitlines()
    for i, line in enumerate(text):
        if line.strip().startswith("- apiGroups:"):
            above = text[i - 1].strip()
            assert above.startswith("#") or above.startswith("{{- if"), f"rbac.yaml:{i + 1} has no comment"


def test_namespaced_mode_has_a_role_per_namespace_and_no_cluster_wide_app_rights():
    docs = render(NAMESPACED)
    app = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    assert sorted(r["metadata"]["namespace"] for r in app) == ["team-a", "team-b"]
    bindings = [b for b in by_kind(docs, "RoleBinding") if not b["metadata"]["name"].endswith("-leader-election")]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    # The Lease Role: the release namespace only, leases only.
    election = [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-leader-election")]
    assert [r["metadata"]["namespace"] for r in election] == [NAMESPACE]
    assert {(g, res) for rule in election[0]["rules"] for g in rule["apiGroups"] for res in rule["resources"]} == {
        ("coordination.k8s.io", "leases")}
    observer = next(r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-observer"))
    assert {r for rule in observer["rules"] for r in rule["resources"]} == {"customresourcedefinitions", "namespaces"}
    assert {v for rule in observer["rules"] for v in rule["verbs"]} == {"list", "watch"}
    strict = render({**NAMESPACED, "rbac": {"clusterObserver": False, "aggregateToDefaultRoles": False}})
    assert by_kind(strict, "ClusterRole") == [] and by_kind(strict, "ClusterRoleBinding") == []


def test_user_roles_aggregate_into_view_edit_admin_and_reach_no_pods_or_secrets():
    docs = render()
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "ClusterRole")}
    view, edit = roles["agentbox-view"], roles["agentbox-edit"]
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k, v in view["metadata"]["labels"].items() if k.startswith(agg) and v == "true"} == {agg + "view"}
    assert {k for k, v in edit["metadata"]["labels"].items() if k.startswith(agg) and v == "true"} == {
        agg + "edit", agg + "admin"}
    kinds = {"agentboxes", "subscriptions", "agentboxes/status", "subscriptions/status"}
    for role in (view, edit):
        assert {g for r in role["rules"] for g in r["apiGroups"]} == {"agentbox.dev"}
        assert {res for r in role["rules"] for res in r["resources"]} == kinds
    assert {v for r in view["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
    writes = {v for r in edit["rules"] for v in r["verbs"]} - {"get", "list", "watch"}
    assert writes == {"create", "update", "patch", "delete", "deletecollection"}
    assert all(not (set(r["verbs"]) & writes) for r in edit["rules"] if any("/status" in x for x in r["resources"]))
    # Nobody is bound to them by the chart: the built-in roles pick them up by label.
    bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding")}
    assert not bound & {"agentbox-view", "agentbox-edit"}
    off = render({"rbac": {"aggregateToDefaultRoles": False}})
    assert not {r["metadata"]["name"] for r in by_kind(off, "ClusterRole")} & {"agentbox-view", "agentbox-edit"}


# ---------------------------------------------------------------------------------------------- monitoring
def test_service_monitor_scrapes_the_metrics_service():
    docs = render(ALL_ON)
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == NAMESPACE and sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"] and "metrics" in port_names
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"


def test_monitoring_objects_are_off_by_default():
    kinds = {d["kind"] for d in render()}
    assert not kinds & (MONITORING | {"ConfigMap"})


def exported_names() -> dict[str, set[str]]:
    """Every series name the controller's registry can export -> its label names."""
    labels = {m.describe()[0].name: set(names) for m, names in metrics._LABELS.items()}
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}
    names: dict[str, set[str]] = {}
    for fam in metrics.REGISTRY.collect():
        extra = {"histogram": {"le"}, "info": {"version"}}.get(fam.type, set())
        for sfx in suffixes[fam.type]:
            names[fam.name + sfx] = labels.get(fam.name, set()) | (extra if sfx in ("_bucket", "_info") else set())
    return names


# Series Prometheus itself records per scrape target.
PROMETHEUS_SERIES = {"up"}

# PromQL words that look like identifiers but are not metric names.
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}


def metric_refs(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names in its matcher) for every metric named in a PromQL expression."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                                      # string literals
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    s = re.sub(r"\[[^\]]*\]", " ", s)                                                   # ranges
    refs: list[tuple[str, set[str]]] = []
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{([^}]*)\})?(\s*\()?", s):
        name, matcher, call = m.group(1), m.group(3), m.group(4)
        if call or name in PROMQL_KEYWORDS:
            continue  # a function or an operator
        labels = {kv.split("=")[0].strip().rstrip("!~") for kv in (matcher or "").split(",") if kv.strip()}
        refs.append((name, labels))
    return refs


def test_metric_ref_parser():
    assert metric_refs('sum by (provider) (rate(agentbox_usage_reads_total{result="error"}[15m])) / '
                       'sum by (provider) (rate(agentbox_usage_reads_total[15m])) > 0.5') == [
        ("agentbox_usage_reads_total", {"result"}), ("agentbox_usage_reads_total", set())]
    assert metric_refs("histogram_quantile(0.95, sum by (le) (rate(x_bucket[1h]))) and on (a) up == 1e3") == [
        ("x_bucket", set()), ("up", set())]
    assert metric_refs("(max by (ns) (agentbox_subscription_reset_timestamp_seconds) - time()) / 3600") == [
        ("agentbox_subscription_reset_timestamp_seconds", set())]


def test_alert_rules_reference_exported_metrics():
    rule = one(render(ALL_ON), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {"AgentboxRotationGroupExhausted", "AgentboxTabNeedsHuman",
                                          "AgentboxSubscriptionDisconnected", "AgentboxUsageReadsFailing",
                                          "AgentboxControllerAbsent", "AgentboxLoginExpiringSoon",
                                          "AgentboxLoginRefreshAnswerLost"}
    exported = exported_names()
    for r in rules:
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]) and r["labels"]["severity"] == "warning"
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        refs = metric_refs(r["expr"])
        assert refs, r["expr"]
        for name, labels in refs:
            if name in PROMETHEUS_SERIES:
                continue  # Prometheus's own series of the scrape target (checked in tests/test_monitoring.py)
            assert name in exported, f"{r['alert']}: {name} is not exported by controller/metrics.py"
            assert labels <= exported[name], f"{r['alert']}: {name} has no label {labels - exported[name]}"


def test_dashboard_queries_reference_exported_metrics():
    docs = render(ALL_ON)
    cm = one(docs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["agentbox-controller.json"])
    exported = exported_names()
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    for expr in exprs:
        refs = metric_refs(expr)
        assert refs, expr
        for name, labels in refs:
            assert name in exported, f"{name} is not exported"
            assert labels <= exported[name], (name, labels)
    used = {name for e in exprs for name, _ in metric_refs(e)}
    # every metric of the controller has a panel
    families = {fam.name for fam in metrics.REGISTRY.collect()}
    assert {f for f in families if not any(u.startswith(f) for u in used)} == set()


if __name__ == "__main__":
    write_settings_schema()
    print("rewrote charts/agentbox-controller/values.schema.json (settings)")


@pytest.mark.parametrize("values, ns", [({}, NAMESPACE), ({"watchNamespaces": ["team-a", "team-b"]}, "team-a"),
                                        ({"clusterWide": True}, "<namespace>")])
def test_notes_commands_name_a_watched_namespace_and_a_dedicated_login(values, ns):
    """NOTES.txt (b3): its kubectl commands ran in the caller's current namespace, which a default install
    does not watch (the Secret and box then sat unserved), and it stored the workstation's own
    ~/.claude login, which the README warns against (single-use refresh tokens log the laptop out)."""
    out = helm.Chart.load(CHART).render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
    commands = [line.split("kubectl ", 1)[1] for line in notes.splitlines()
                if re.match(r"\s+(\d\. .*:\s+)?kubectl ", line)]
    lease = [c for c in commands if " get lease " in c]  # which replica leads: the Lease's namespace
    assert lease == [f"-n {NAMESPACE} get lease {RELEASE}-agentbox-controller -o jsonpath='{{.spec.holderIdentity}}'"]
    commands = [c for c in commands if c not in lease]
    assert len(commands) == 4 and all(c.startswith(f"-n {ns} ") for c in commands), commands
    assert "$HOME/.claude" not in notes and "dedicated login" in notes
