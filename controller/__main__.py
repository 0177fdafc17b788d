"""Command line: `agentbox-controller run | demo | detect | usage | crds`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _run(ns: argparse.Namespace) -> int:
    import kopf

    from controller.handlers import REGISTRY

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    namespaces = ns.namespace or []
    if not ns.peering:
        kopf.run(registry=REGISTRY, standalone=True, clusterwide=not namespaces, namespaces=namespaces,
                 liveness_endpoint=ns.liveness or None)
        return 0
    # Peering (replicas > 1): every replica runs; the highest priority acts, the others stand by. Equal
    # priorities would pause all of them, so each process draws its own unless one is given.
    import random

    _ensure_peering(ns.peering, namespaces)
    priority = ns.priority if ns.priority is not None else random.SystemRandom().randint(1, 2**31 - 1)
    kopf.run(registry=REGISTRY, standalone=False, peering_name=ns.peering, priority=priority, clusterwide=not namespaces,
             namespaces=namespaces, liveness_endpoint=ns.liveness or None)
    return 0


def _ensure_peering(name: str, namespaces: list[str]) -> None:
    """Create kopf's peering object (ClusterKopfPeering, or a KopfPeering per watched namespace) if
    missing: kopf needs it to exist and never creates it. Its CRDs come with the Helm chart."""
    import os

    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    api = client.CustomObjectsApi()
    if not namespaces:
        body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
        calls = [lambda: api.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)]
    else:
        calls = [lambda n=n: api.create_namespaced_custom_object(
            "kopf.dev", "v1", n, "kopfpeerings",
            {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name, "namespace": n}})
            for n in namespaces]
    for create in calls:
        try:
            create()
        except ApiException as exc:
            if exc.status != 409:  # 409: it exists already
                raise


def _crds(ns: argparse.Namespace) -> int:
    from controller.crdgen import write_crds

    try:
        paths = write_crds(Path(ns.out))
    except OSError as exc:
        print(f"crds: cannot write to {ns.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def _demo(ns: argparse.Namespace) -> int:
    try:
        from controller.demo import run_demo
    except ImportError as exc:  # kmock is a test/demo extra
        print(f"demo needs the test extra (pip install 'agentbox-controller[test]'): {exc}", file=sys.stderr)
        return 2
    return run_demo(real_agents=ns.real_agents, verbose=ns.verbose)


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    parser = argparse.ArgumentParser(prog="agentbox-controller", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator (in-cluster or with $KUBECONFIG)")
    run.add_argument("--namespace", action="append", help="watch only this namespace (repeatable); default: all")
    run.add_argument("--liveness", default="http://0.0.0.0:8081/healthz", help="liveness endpoint URL ('' = off)")
    run.add_argument("--peering", metavar="NAME", default="",
                     help="kopf peering object (replicas > 1: only the highest priority acts); default: standalone")
    run.add_argument("--priority", type=int, default=None,
                     help="peering priority (default with --peering: random per process)")
    run.set_defaults(func=_run)

    demo = sub.add_parser("demo", help="play the resume scenario against an emulated cluster (no cluster needed)")
    demo.add_argument("--real-agents", action="store_true", help="use the real Claude Code and Codex CLIs")
    demo.add_argument("-v", "--verbose", action="store_true", help="show operator logs")
    demo.set_defaults(func=_demo)

    crds = sub.add_parser("crds", help="write the CRD YAML generated from the models")
    crds.add_argument("--out", default="crds", help="output directory")
    crds.set_defaults(func=_crds)

    from controller.cli_detect import add_detect_parser
    from controller.cli_usage import add_usage_parser

    add_detect_parser(sub)
    add_usage_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `agentbox-controller` console script."""
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
