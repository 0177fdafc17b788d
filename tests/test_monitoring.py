"""Monitoring as Prometheus sees it: the chart's ServiceMonitor applied with Prometheus's target-label rule
(honor_labels), the controller-absent alert matching the `up` series of that target, runbook links that land
on a section of docs/troubleshooting.md, no rules or dashboard without metrics, dashboard variables, and the
login metrics."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_chart import ALL_ON, NAMESPACE, by_kind, metric_refs, one, render

from controller import metrics

pytestmark = pytest.mark.unit

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- relabelling
def prometheus_sample_labels(target: dict[str, str], scraped: dict[str, str], honor_labels: bool) -> dict[str, str]:
    """The labels Prometheus stores for one scraped sample: `mutateSampleLabels` of prometheus/scrape/scrape.go.

    honor_labels true: the sample's own labels win; target labels fill only the names it lacks.
    honor_labels false: target labels win; a sample label they collide with (non-empty) is kept as
    `exported_<name>` (prefixed again while that name is taken), shortest names first.
    """
    out = dict(scraped)
    if honor_labels:
        for name, value in target.items():
            if name not in scraped:
                out[name] = value
        return {k: v for k, v in out.items() if v != ""}
    conflicts = []
    for name, value in target.items():
        if scraped.get(name, ""):
            conflicts.append((name, scraped[name]))
        out[name] = value
    for name, value in sorted(conflicts, key=lambda kv: len(kv[0])):
        new = name
        while True:
            new = "exported_" + new
            if not out.get(new):
                out[new] = value
                break
    return {k: v for k, v in out.items() if v != ""}


def test_relabel_rule_matches_prometheus_documentation():
    target = {"namespace": "agentbox-system", "job": "svc", "instance": "10.0.0.1:8080"}
    sample = {"namespace": "team-a", "box": "b"}
    assert prometheus_sample_labels(target, sample, True) == {
        "namespace": "team-a", "box": "b", "job": "svc", "instance": "10.0.0.1:8080"}
    assert prometheus_sample_labels(target, sample, False) == {
        "namespace": "agentbox-system", "exported_namespace": "team-a", "box": "b", "job": "svc",
        "instance": "10.0.0.1:8080"}
    # exported_ taken already: prefixed again
    assert prometheus_sample_labels({"a": "t"}, {"a": "s", "exported_a": "x"}, False) == {
        "a": "t", "exported_a": "x", "exported_exported_a": "s"}


def target_labels(docs: list[dict[str, Any]]) -> tuple[dict[str, str], bool]:
    """The target labels the prometheus-operator gives a ServiceMonitor endpoint (its generated relabel
    config: namespace, service, pod, container, endpoint, job = the Service's name, instance) and the
    endpoint's honorLabels."""
    sm = one(docs, "ServiceMonitor")
    svc = next(s for s in by_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics"))
    endpoint = sm["spec"]["endpoints"][0]
    assert not endpoint.get("relabelings") and not endpoint.get("metricRelabelings")
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    labels = {"namespace": svc["metadata"]["namespace"], "service": svc["metadata"]["name"],
              "pod": "agentbox-agentbox-controller-6d9f-x2x1z", "container": "controller",
              "endpoint": endpoint["port"], "job": svc["metadata"]["name"], "instance": "10.244.0.7:8080"}
    return labels, bool(endpoint.get("honorLabels", False))


@pytest.fixture
def box_series():
    metrics.TABS_NEEDING_HUMAN.labels("team-a", "box-a").set(1)
    metrics.SUBSCRIPTION_STATE.labels("team-a", "claude-a", "Disconnected").set(1)
    yield
    metrics.forget_box("team-a", "box-a")
    metrics.forget_subscription("team-a", "claude-a")


def scraped_samples() -> list[dict[str, str]]:
    text = generate_latest(metrics.REGISTRY).decode()
    return [dict(s.labels, __name__=s.name) for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_box_namespace_survives_the_scrape_of_the_charts_service_monitor(box_series):
    target, honor = target_labels(render(ALL_ON))
    assert honor is True
    stored = [prometheus_sample_labels(target, s, honor) for s in scraped_samples()]
    mine = [s for s in stored if s.get("box") == "box-a" or s.get("subscription") == "claude-a"]
    assert mine and all(s["namespace"] == "team-a" and "exported_namespace" not in s for s in mine)
    # Series without a namespace of their own (build info, exec calls) get the controller's.
    assert next(s for s in stored if s["__name__"] == "agentbox_build_info")["namespace"] == NAMESPACE


def test_without_honor_labels_the_box_namespace_would_be_lost(box_series):
    """The failure the chart avoids (kube-prometheus-stack default): every alert would say agentbox-system."""
    target, honor = target_labels(render({**ALL_ON, "metrics": {
        **ALL_ON["metrics"], "serviceMonitor": {**ALL_ON["metrics"]["serviceMonitor"], "honorLabels": False}}}))
    assert honor is False
    stored = [prometheus_sample_labels(target, s, honor) for s in scraped_samples()]
    mine = [s for s in stored if s.get("box") == "box-a"]
    assert mine and all(s["namespace"] == NAMESPACE and s["exported_namespace"] == "team-a" for s in mine)


def _rules(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}


def test_controller_absent_alert_matches_the_up_series_of_the_scrape_target():
    docs = render(ALL_ON)
    target, _ = target_labels(docs)
    expr = _rules(docs)["AgentboxControllerAbsent"]["expr"]
    m = re.fullmatch(r'absent\(up\{(?P<m>[^}]*)\} == 1\)', expr)
    assert m, expr
    matchers = dict(re.findall(r'(\w+)="([^"]*)"', m.group("m")))
    # `up` carries only target labels; each matcher must equal the one Prometheus gives this target.
    assert matchers and all(target[k] == v for k, v in matchers.items()), (matchers, target)
    assert set(matchers) >= {"job", "namespace"}


# ---------------------------------------------------------------------------------------------- runbooks
def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub makes of a document's headings: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_alert_has_a_runbook_url_to_an_existing_troubleshooting_section():
    docs = render(ALL_ON)
    anchors = github_anchors((ROOT / "docs" / "troubleshooting.md").read_text())
    base = "https://github.com/agentbox-dev/agentbox-controller/blob/main/docs/troubleshooting.md#"
    rules = _rules(docs)
    assert len(rules) >= 6
    for name, rule in rules.items():
        url = rule["annotations"]["runbook_url"]
        assert url == base + name.lower(), (name, url)
        assert url.split("#", 1)[1] in anchors, f"{name}: no section `### {name}` in docs/troubleshooting.md"
    other = _rules(render({**ALL_ON, "metrics": {**ALL_ON["metrics"], "prometheusRule": {
        "enabled": True, "runbookBaseUrl": "https://runbooks.example/agentbox/"}}}))
    assert other["AgentboxTabNeedsHuman"]["annotations"]["runbook_url"] == \
        "https://runbooks.example/agentbox#agentboxtabneedshuman"


def test_no_rules_or_dashboard_without_metrics():
    off = {**ALL_ON, "metrics": {**ALL_ON["metrics"], "enabled": False}}
    kinds = {d["kind"] for d in render(off)}
    assert not kinds & {"PrometheusRule", "ServiceMonitor", "ConfigMap", "Service"}


# ---------------------------------------------------------------------------------------------- dashboard
def test_dashboard_variables_filter_every_panel():
    cm = one(render(ALL_ON), "ConfigMap")
    dash = json.loads(cm["data"]["agentbox-controller.json"])
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert {"datasource", "namespace", "subscription", "box"} <= set(variables)
    for name in ("namespace", "subscription", "box"):
        var = variables[name]
        assert var["includeAll"] and var["multi"] and var["allValue"] == ".*"
        query = var["query"]["query"]
        for metric, _ in metric_refs(query.removeprefix("label_values(").rsplit(",", 1)[0]):
            assert metric.startswith("agentbox_")
    labels = {m.describe()[0].name: set(n) for m, n in metrics._LABELS.items()}
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for metric, matcher in metric_refs(target["expr"]):
                base = re.sub(r"_(total|bucket|sum|count)$", "", metric)
                own = labels.get(base) or labels.get(metric) or set()
                wanted = own & {"namespace", "subscription", "box"}
                assert wanted <= matcher, (panel["title"], metric, wanted - matcher)
                for label in wanted:
                    assert f'{label}=~"${label}"' in target["expr"], (panel["title"], label)


# ---------------------------------------------------------------------------------------------- login metrics
def test_login_expiring_alert_reads_the_expiry_metric():
    rule = _rules(render(ALL_ON))["AgentboxLoginExpiringSoon"]
    assert [name for name, _ in metric_refs(rule["expr"])] == ["agentbox_login_expiry_timestamp_seconds"]
    assert re.search(r"- time\(\)\s*< 1200$", rule["expr"].strip()), rule["expr"]
    # It fires before the agents' own 5-minute refresh point and after the controller's 30-minute one.
    from controller.settings import Settings

    assert 300 < 1200 < Settings.model_fields["login_refresh_before_s"].default


def test_login_series_go_with_the_subscription():
    expires = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    metrics.LOGIN_EXPIRY.labels("team-a", "claude-a").set(expires.timestamp())
    metrics.LOGIN_REFRESHES.labels("team-a", "claude-a", "ok").inc()
    metrics.LOGIN_REFRESHES.labels("team-b", "claude-a", "ok").inc()
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'agentbox_login_expiry_timestamp_seconds{namespace="team-a",subscription="claude-a"} 1.7723664e+09' in text
    metrics.forget_subscription("team-a", "claude-a")
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'namespace="team-a",subscription="claude-a"' not in text
    assert 'agentbox_login_refreshes_total{namespace="team-b",result="ok",subscription="claude-a"}' in text \
        or 'agentbox_login_refreshes_total{namespace="team-b",subscription="claude-a",result="ok"}' in text
    metrics.forget_subscription("team-b", "claude-a")
