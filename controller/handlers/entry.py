"""Starting kopf: its log formatter and `kopf.run` with our handler registry (the `run` command's last step).

Here rather than in the CLI because kopf is imported only by :mod:`controller.handlers` (an import-linter
contract in pyproject.toml); the CLI checks its arguments and the cluster, then calls :func:`operate`.
"""

from __future__ import annotations

from typing import Any

import kopf

from controller.handlers import REGISTRY
from controller.settings import Settings


def configure_logging(log_format: str) -> None:
    """`plain`: timestamped text lines; `json`: one JSON object per line (kopf's JSON formatter, which
    adds the object's namespace and name to per-object records). Every line is then masked and bounded
    (:func:`controller.redact.install_log_redaction`), whoever writes it (kopf, clients, ours)."""
    kopf.configure(log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL,
                   log_refkey="object" if log_format == "json" else None)
    from controller.redact import install_log_redaction

    install_log_redaction()


def operate(settings: Settings, namespaces: list[str], liveness: str | None,
            peering: str | None = None, priority: int | None = None, shard_leases: Any = None) -> None:
    """Run the operator until it is stopped (blocks; kopf's own signal handling).

    Args:
        settings: the operator's settings (put in kopf's memo for the startup handler).
        namespaces: namespaces to watch; empty = cluster-wide.
        liveness: kopf's liveness endpoint URL (e.g. "http://0.0.0.0:8080/healthz") or None.
        peering: a kopf peering object's name (replicas > 1: only the highest ``priority`` acts), or None
            for a standalone operator.
        shard_leases: with `settings.shards` > 1, (Lease name prefix, Lease namespace, `ElectionTimings`,
            this replica's identity): every replica runs and serves the shards whose Lease it holds.
    """
    memo = kopf.Memo(settings=settings)
    if shard_leases is not None:
        memo.shard_leases = shard_leases
    if peering is None:
        kopf.run(registry=REGISTRY, standalone=True, clusterwide=not namespaces, namespaces=namespaces,
                 liveness_endpoint=liveness, memo=memo)
    else:
        kopf.run(registry=REGISTRY, standalone=False, peering_name=peering, priority=priority,
                 clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=liveness, memo=memo)


def warm_up() -> None:
    """Import now what the operator's start would import (bench/faults.py --failover measured failover 13.8 s
    p50 without a warm-up, 10.5 s with it). A standby calls this before it waits for the Lease. The
    Kubernetes client's API classes (some 250 model modules) are no longer among them: the operator's
    requests go through controller.kube.rest, which only reads the client's Configuration."""
    import controller.events
    import controller.kube.aexec
    import controller.kube.objects
    import controller.kube.rest
    import controller.notify
    import controller.providers.readers  # noqa: F401 -- imported for the side effect
