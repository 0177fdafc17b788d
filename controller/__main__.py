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


def _run(ns: argparse.Namespace) -> int:
    import functools

    from pydantic import ValidationError

    from controller.handlers.entry import configure_logging, operate
    from controller.kube.cluster import check_cluster, ensure_peering
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
    if settings.shards > 1 and not ns.leader_elect:
        print("run: AGENTBOX_SHARDS > 1 needs --leader-elect LEASE (the shard Leases are LEASE-shard-<i>)",
              file=sys.stderr)
        return EXIT_USAGE
    if ns.leader_elect:
        from controller.kube.election import ElectionTimings

        bad = ElectionTimings(ns.lease_duration, ns.renew_deadline, ns.retry_period).problem()
        if bad:
            print(f"run: {bad}", file=sys.stderr)
            return EXIT_USAGE
    problem = check_cluster()
    if problem:
        print(f"run: {problem}", file=sys.stderr)
        return EXIT_NO_CLUSTER
    configure_logging(ns.log_format)
    namespaces = ns.namespace or []
    run = functools.partial(operate, settings, namespaces, ns.liveness or None)
    if settings.shards > 1:  # every replica runs; each serves the shards whose Lease it holds
        from controller.kube.election import ElectionTimings, new_identity

        timings = ElectionTimings(ns.lease_duration, ns.renew_deadline, ns.retry_period)
        run(shard_leases=(ns.leader_elect, ns.lease_namespace, timings, new_identity()))
        return 0
    if ns.leader_elect:
        return _run_elected(ns, run)
    if not ns.peering:
        run()
        return 0
    # Peering (replicas > 1): every replica runs; the highest priority acts, the others stand by. Equal
    # priorities would pause all of them, so each process draws its own unless one is given.
    import random

    ensure_peering(ns.peering, namespaces)
    run(peering=ns.peering, priority=ns.priority if ns.priority is not None else random.SystemRandom().randint(1, 2**31 - 1))
    return 0


def _run_elected(ns: argparse.Namespace, operate: Callable[[], None]) -> int:
    """Run `operate` (the operator) only while this process holds the coordination.k8s.io Lease
    `ns.leader_elect` in `ns.lease_namespace` (controller/kube/election.py: timings, guards, failover bound)."""
    from controller.kube.election import ElectionTimings, run_elected
    from controller.kube.cluster import load_default_config

    from controller.handlers.entry import warm_up

    timings = ElectionTimings(ns.lease_duration, ns.renew_deadline, ns.retry_period)
    load_default_config()
    warm_up()  # a standby pays the operator's imports before it leads, not during a failover
    return run_elected(ns.leader_elect, ns.lease_namespace, timings, operate, liveness=ns.liveness)


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
