"""Command line: `agentbox-controller run | demo | status | detect | usage | crds`.

Exit codes: 0 done; 2 bad arguments or settings; 3 no cluster reachable (`run`, `status`); 4 the CRDs are
missing or not readable (`status`); `detect --exit-code` has its own (see `detect --help`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable


EXIT_USAGE = 2
EXIT_NO_CLUSTER = 3


def _check_cluster(timeout_s: float = 10.0) -> str | None:
    """None when a Kubernetes API server answers (in-cluster service account, else $KUBECONFIG or
    ~/.kube/config with its current context), else one line saying why. Checked once before kopf
    starts: kopf itself would log a traceback every minute and never exit."""
    import os

    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg)
        except (config.ConfigException, OSError, TypeError) as exc:
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"no cluster: not in a pod and no usable kubeconfig ({where}): {first}"
    try:
        with client.ApiClient(cfg) as api:
            client.VersionApi(api).get_code(_request_timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 -- any failure means "no cluster"; its type is the message
        status = getattr(exc, "status", None)
        why = f"HTTP {status}" if status else type(exc).__name__
        # The host only: a kubeconfig server URL carries no credentials, but keep the message to one line.
        return f"no cluster: the API server at {cfg.host} does not answer ({why})"
    return None


def _configure_logging(log_format: str) -> None:
    """`plain`: timestamped text lines; `json`: one JSON object per line (kopf's JSON formatter, which
    adds the object's namespace and name to per-object records)."""
    import kopf

    kopf.configure(log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL,
                   log_refkey="object" if log_format == "json" else None)
    from controller.redact import install_log_redaction

    install_log_redaction()  # every log line is masked and bounded, whoever writes it (kopf, clients, ours)


def _run(ns: argparse.Namespace) -> int:
    import kopf
    from pydantic import ValidationError

    from controller.handlers import REGISTRY
    from controller.settings import Settings, describe_error

    try:
        settings = Settings.from_env()
    except ValidationError as exc:
        print(f"run: bad setting: {describe_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if ns.leader_elect and ns.peering:
        print("run: --leader-elect and --peering are two ways of choosing the active replica; give one",
              file=sys.stderr)
        return EXIT_USAGE
    if ns.leader_elect:
        from controller.election import ElectionTimings

        bad = ElectionTimings(ns.lease_duration, ns.renew_deadline, ns.retry_period).problem()
        if bad:
            print(f"run: {bad}", file=sys.stderr)
            return EXIT_USAGE
    problem = _check_cluster()
    if problem:
        print(f"run: {problem}", file=sys.stderr)
        return EXIT_NO_CLUSTER
    _configure_logging(ns.log_format)
    memo = kopf.Memo(settings=settings)
    namespaces = ns.namespace or []
    if ns.leader_elect:
        return _run_elected(ns, lambda: kopf.run(registry=REGISTRY, standalone=True, clusterwide=not namespaces,
                                                 namespaces=namespaces, liveness_endpoint=ns.liveness or None,
                                                 memo=memo))
    if not ns.peering:
        kopf.run(registry=REGISTRY, standalone=True, clusterwide=not namespaces, namespaces=namespaces,
                 liveness_endpoint=ns.liveness or None, memo=memo)
        return 0
    # Peering (replicas > 1): every replica runs; the highest priority acts, the others stand by. Equal
    # priorities would pause all of them, so each process draws its own unless one is given.
    import random

    _ensure_peering(ns.peering, namespaces)
    priority = ns.priority if ns.priority is not None else random.SystemRandom().randint(1, 2**31 - 1)
    kopf.run(registry=REGISTRY, standalone=False, peering_name=ns.peering, priority=priority, clusterwide=not namespaces,
             namespaces=namespaces, liveness_endpoint=ns.liveness or None, memo=memo)
    return 0


def _run_elected(ns: argparse.Namespace, operate: Callable[[], None]) -> int:
    """Run `operate` (the operator) only while this process holds the coordination.k8s.io Lease
    `ns.leader_elect` in `ns.lease_namespace` (controller/election.py: timings, guards, failover bound)."""
    import os

    from kubernetes import config

    from controller.election import ElectionTimings, run_elected

    timings = ElectionTimings(ns.lease_duration, ns.renew_deadline, ns.retry_period)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    return run_elected(ns.leader_elect, ns.lease_namespace, timings, operate, liveness=ns.liveness)


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
    from controller.crdgen import dump_crd, render_crds, write_crds

    if ns.out == "-":  # one YAML stream for `| kubectl apply -f -`
        sys.stdout.write("---\n".join(dump_crd(crd) for crd in render_crds().values()))
        return 0
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
        from agentbox_sim.demo import run_demo
    except ImportError as exc:  # kmock is a test/demo extra
        print(f"demo needs the test extra (pip install 'agentbox-controller[test]'): {exc}", file=sys.stderr)
        return 2
    return run_demo(real_agents=ns.real_agents, verbose=ns.verbose, keep=ns.keep)


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    from controller import __version__

    parser = argparse.ArgumentParser(prog="agentbox-controller", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator (in-cluster or with $KUBECONFIG)")
    run.add_argument("--namespace", action="append", help="watch only this namespace (repeatable); default: all")
    run.add_argument("--liveness", default="http://0.0.0.0:8081/healthz", help="liveness endpoint URL ('' = off)")
    run.add_argument("--peering", metavar="NAME", default="",
                     help="kopf peering object (replicas > 1: only the highest priority acts); default: standalone")
    run.add_argument("--priority", type=int, default=None,
                     help="peering priority (default with --peering: random per process)")
    run.add_argument("--leader-elect", metavar="LEASE", default="",
                     help="replicas > 1: act only while holding this coordination.k8s.io Lease (instead of --peering)")
    run.add_argument("--lease-namespace", default="default", help="namespace of the --leader-elect Lease")
    run.add_argument("--lease-duration", type=int, default=10,
                     help="seconds without renewal after which a standby takes the Lease (default 10)")
    run.add_argument("--renew-deadline", type=float, default=7.0,
                     help="a leader that could not renew for this many seconds stops acting and exits (default 7)")
    run.add_argument("--retry-period", type=float, default=1.0,
                     help="seconds between the leader's renewals and a standby's looks at the Lease (default 1)")
    run.add_argument("--log-format", choices=("plain", "json"), default="plain",
                     help="log lines as timestamped text (default) or one JSON object per line")
    run.set_defaults(func=_run)

    demo = sub.add_parser("demo", help="play resume, rotation, an exhausted group and the reserve against an "
                                       "emulated cluster (no cluster needed)")
    demo.add_argument("--real-agents", action="store_true", help="use the real Claude Code and Codex CLIs")
    demo.add_argument("-v", "--verbose", action="store_true", help="show operator logs")
    demo.add_argument("--keep", action="store_true",
                      help="leave the emulated cluster running afterwards (Ctrl-C stops it) and print how to look at it")
    demo.set_defaults(func=_demo)

    crds = sub.add_parser("crds", help="write the CRD YAML generated from the models")
    crds.add_argument("--out", default="crds", help="output directory, or '-' for one YAML stream on stdout")
    crds.set_defaults(func=_crds)

    from controller.cli_detect import add_detect_parser
    from controller.cli_status import add_status_parser
    from controller.cli_usage import add_usage_parser

    add_status_parser(sub)
    add_detect_parser(sub)
    add_usage_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `agentbox-controller` console script."""
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
