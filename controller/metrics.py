"""Prometheus metrics of the controller, all in this module (prefix `agentbox_`).

Rules kept here (and checked by tests/test_metrics.py):

* every name starts with `agentbox_`; counters end in `_total`, durations in `_seconds`;
* labels are names the user chose (namespace, box, subscription) or small closed sets (agent, result,
  reason, window, state, source, kind, provider); never a token, an account id, an e-mail or a tab's text;
* the series of a deleted object are removed: `forget_box` and `forget_subscription`.

The alert rules of the Helm chart (`charts/agentbox-controller/templates/prometheusrule.yaml`) may only
name metrics defined here (tests/test_chart.py parses them).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.metrics import MetricWrapperBase

from controller import __version__

PREFIX = "agentbox_"

REGISTRY = CollectorRegistry(auto_describe=True)

# Label names of every labelled metric, so per-object series can be found and removed.
_LABELS: dict[MetricWrapperBase, tuple[str, ...]] = {}


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    metric = Counter(name, doc, list(labels), registry=REGISTRY)
    _LABELS[metric] = labels
    return metric


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    metric = Gauge(name, doc, list(labels), registry=REGISTRY)
    _LABELS[metric] = labels
    return metric


BUILD_INFO = Info("agentbox_build", "Controller version.", registry=REGISTRY)
BUILD_INFO.info({"version": __version__})

# ---------------------------------------------------------------- boxes and tabs
RESUMES = _counter("agentbox_resumes_total", "Resumes sent to tabs after a usage reset, by result (ok | no_effect | "
                   "screen_changed: an armed continue not sent, the screen moved before its instant).",
                   ("namespace", "box", "agent", "result"))
SWITCHES = _counter("agentbox_switches_total", "Boxes switched to another subscription, by trigger "
                    "(limit | exhausted | reserve | disconnected | deleted | spec: spec.subscription changed, rotation off).", ("namespace", "box", "reason"))
DETECTIONS = _counter("agentbox_limit_detections_total", "Limit events detected in tabs, by source "
                      "(pattern | user-pattern | marker | usage-api) and kind (usage | credits).",
                      ("namespace", "agent", "source", "kind"))
TABS_NEEDING_HUMAN = _gauge("agentbox_tabs_needing_attention", "Tabs that need a human, per box.",
                            ("namespace", "box"))
TABS_RATE_LIMITED = _gauge("agentbox_tabs_rate_limited", "Tabs stopped on a usage limit, per box.",
                           ("namespace", "box"))
WATCHER_PASSES = _counter("agentbox_watcher_passes_total", "Tab watcher passes (observe, decide, execute, record), "
                          "per box: a box that needs no action is passed every streamRescanS on the live stream, "
                          "every scanIntervalS when polling; a rate far above that is a watcher spinning.",
                          ("namespace", "box"))
ROTATION_GROUP_EXHAUSTED = _gauge("agentbox_rotation_group_exhausted", "1 while every subscription of the box's "
                                  "rotation group is exhausted, reserved or disconnected.", ("namespace", "box"))

# ---------------------------------------------------------------- subscriptions
RESERVE_STOPS = _counter("agentbox_reserve_stops_total", "Agents stopped because a subscription reached its reserve.",
                         ("namespace", "subscription", "window"))
SUBSCRIPTION_UTILIZATION = _gauge("agentbox_subscription_utilization_percent",
                                  "Percent of a usage window used, as last read.",
                                  ("namespace", "subscription", "window"))
SUBSCRIPTION_RESET = _gauge("agentbox_subscription_reset_timestamp_seconds",
                            "When a usage window resets (Unix epoch seconds).",
                            ("namespace", "subscription", "window"))
SUBSCRIPTION_STATE = _gauge("agentbox_subscription_state", "1 for the subscription's current state "
                            "(Available | Exhausted | Reserved | Disconnected | Unknown), 0 for the others.",
                            ("namespace", "subscription", "state"))
LOGIN_CANDIDATES = _counter("agentbox_login_candidates_total", "Newer logins found in boxes by the login keeper, "
                            "by result (adopted: the provider confirmed the subscription's account | refused).",
                            ("namespace", "subscription", "result"))
LOGIN_EXPIRY = _gauge("agentbox_login_expiry_timestamp_seconds", "When the subscription's current access token "
                      "expires (Unix epoch seconds); the controller renews it settings.loginRefreshBeforeS earlier.",
                      ("namespace", "subscription"))
LOGIN_REFRESHES = _counter("agentbox_login_refreshes_total", "Login refreshes the controller made at the provider's "
                           "token endpoint, by result (ok | refused | error | lost).",
                           ("namespace", "subscription", "result"))
LOGIN_ANSWER_LOST = _gauge("agentbox_login_refresh_answer_lost", "1 while a subscription's refresh answer was "
                           "lost: its refresh token is not sent again and the login dies when the current access "
                           "token expires unless a human logs in again (alert on it).", ("namespace", "subscription"))
USAGE_READS = _counter("agentbox_usage_reads_total", "Usage API reads, by provider and result (ok | error).",
                       ("provider", "result"))

# ---------------------------------------------------------------- plumbing
EXEC_CALLS = _counter("agentbox_exec_calls_total", "Pod exec calls, by result (ok | nonzero | error).", ("result",))
DEADLINE_LAG = Histogram("agentbox_deadline_lag_seconds", "Now minus the due time when a scheduled action runs "
                         "(an armed continue: its Enter minus its resume instant).",
                         buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300), registry=REGISTRY)
JOURNAL_RECOVERIES = _counter("agentbox_journal_recoveries_total", "Unfinished multi-step actions found at the start "
                              "of a pass (after a restart or a failed pass), by action, the step reached and "
                              "result (resume | done | abandon).", ("action", "step", "result"))
EVENTS = _counter("agentbox_events_total", "Kubernetes Events by kind (Normal | Warning), reason and result: "
                  "posted (a new Event, or one re-announced after a quiet period) or repeated (folded into the "
                  "count of the same Event).", ("kind", "reason", "result"))
NOTIFICATIONS = _counter("agentbox_notifications_total", "Webhook notifications, by kind and result (ok | error).",
                         ("kind", "result"))

SUBSCRIPTION_STATES = ("Available", "Exhausted", "Reserved", "Disconnected", "Unknown")


def set_subscription_state(namespace: str, subscription: str, state: str) -> None:
    """Set `agentbox_subscription_state` to 1 for `state` and 0 for the other states."""
    for candidate in SUBSCRIPTION_STATES:
        SUBSCRIPTION_STATE.labels(namespace, subscription, candidate).set(1 if candidate == state else 0)


def _forget(match: dict[str, str]) -> None:
    """Remove every series whose labels include all of `match` (metrics lacking one of them are skipped),
    with prometheus-client's own partial-match removal (thread-safe under the metric's lock)."""
    for metric, names in _LABELS.items():
        if set(match) <= set(names):
            metric.remove_by_labels(match)


def forget_box(namespace: str, box: str) -> None:
    """Remove every series of a deleted box (gauges and its per-box counters)."""
    _forget({"namespace": namespace, "box": box})


def forget_subscription(namespace: str, name: str) -> None:
    """Remove every series of a deleted subscription."""
    _forget({"namespace": namespace, "subscription": name})
