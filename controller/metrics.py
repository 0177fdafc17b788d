"""Prometheus metrics of the controller (prefix `agentbox_`). Labels never carry tokens or
account ids; per-object series are removed when their object is deleted (`forget_box`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from controller import __version__

REGISTRY = CollectorRegistry(auto_describe=True)

BUILD_INFO = Info("agentbox_build", "Controller version.", registry=REGISTRY)
BUILD_INFO.info({"version": __version__})

RESUMES = Counter("agentbox_resumes_total", "Resumes sent to tabs after a usage reset.",
                  ["namespace", "box", "agent", "result"], registry=REGISTRY)
DETECTIONS = Counter("agentbox_limit_detections_total", "Limit events detected in tabs, by source.",
                     ["namespace", "agent", "source", "kind"], registry=REGISTRY)
EXEC_CALLS = Counter("agentbox_exec_calls_total", "Pod exec calls, by result.", ["result"], registry=REGISTRY)
DEADLINE_LAG = Histogram("agentbox_deadline_lag_seconds", "Now minus the due time when a scheduled resume runs.",
                         buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300), registry=REGISTRY)
TABS_NEEDING_HUMAN = Gauge("agentbox_tabs_needing_attention", "Tabs that need a human, per box.",
                           ["namespace", "box"], registry=REGISTRY)
TABS_RATE_LIMITED = Gauge("agentbox_tabs_rate_limited", "Tabs stopped on a usage limit, per box.",
                          ["namespace", "box"], registry=REGISTRY)
USAGE_READS = Counter("agentbox_usage_reads_total", "Usage API reads, by provider and result.",
                      ["provider", "result"], registry=REGISTRY)


def forget_box(namespace: str, box: str) -> None:
    """Remove the per-box gauge series of a deleted box."""
    for gauge in (TABS_NEEDING_HUMAN, TABS_RATE_LIMITED):
        try:
            gauge.remove(namespace, box)
        except KeyError:
            pass
