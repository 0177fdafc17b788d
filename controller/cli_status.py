"""`agentbox-controller status` (also `kubectl agentbox status`): the boxes and subscriptions of a cluster.

    agentbox-controller status [-n NAMESPACE | -A] [-o table|wide|json] [--watch [--interval S]]
                               [--kubeconfig PATH] [--context NAME]

Reads the cluster with kubectl's rules: `--kubeconfig`, else $KUBECONFIG (a list of files is merged), else
~/.kube/config, else the in-cluster service account; the namespace is `-n`, else the context's namespace,
else `default`. Needs only get/list on agentboxes and subscriptions (agentbox.dev). Exit codes: 0 shown;
3 no cluster; 4 the agentbox.dev CRDs are not installed or listing them is forbidden.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
from datetime import datetime, timezone
from typing import Any, Callable

from controller.statusview import build_view, render_table

EXIT_OK = 0
EXIT_NO_CLUSTER = 3
EXIT_NO_ACCESS = 4
_EXIT_OF = {"unreachable": EXIT_NO_CLUSTER, "forbidden": EXIT_NO_ACCESS}  # controller.kube.cluster.ClusterError.kind


def add_status_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `status` sub-command to an argparse subparsers object; sets `func=run_status`."""
    p = subparsers.add_parser(
        "status", help="show boxes and subscriptions of the cluster (kubectl agentbox status)",
        description="Boxes (agent, tabs and their next resume, on which subscription and where next, what needs "
                    "a human) and subscriptions (5-hour and weekly usage with their resets, the reserve in words, "
                    "state, login expiry).")
    add_status_arguments(p)
    p.set_defaults(func=run_status)
    return p


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `status` (shared with the kubectl plugin)."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    p.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table", help="output format")
    p.add_argument("-w", "--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between redraws with --watch (default 2)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")


class StatusError(Exception):
    """A one-line reason the cluster could not be read, with the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def connect(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
    """(kubernetes ApiClient, the context's namespace or `default`) by kubectl's rules
    (:func:`controller.kube.cluster.connect`).

    Raises:
        StatusError: no usable kubeconfig and not in a pod.
    """
    from controller.kube.cluster import ClusterError, connect as kube_connect

    try:
        return kube_connect(kubeconfig, context)
    except ClusterError as exc:
        raise StatusError(str(exc), _EXIT_OF[exc.kind]) from None


def fetch(api: Any, namespace: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(AgentBox objects, Subscription objects) in `namespace`, or in all namespaces when None
    (:func:`controller.kube.cluster.list_ours`).

    Raises:
        StatusError: the API server does not answer, the CRDs are missing (404) or listing is forbidden.
    """
    from controller.kube.cluster import ClusterError, list_ours

    try:
        return list_ours(api, namespace)
    except ClusterError as exc:
        raise StatusError(str(exc), _EXIT_OF[exc.kind]) from None


def render(boxes: list[dict[str, Any]], subs: list[dict[str, Any]], now: datetime, output: str,
           all_namespaces: bool) -> str:
    """The text printed for one frame."""
    view = build_view(boxes, subs, now)
    if output == "json":
        return json.dumps(view, indent=2, ensure_ascii=False) + "\n"
    return render_table(view, wide=output == "wide", all_namespaces=all_namespaces)


class _Interrupt:
    """Ctrl-C for `--watch`, taken only at the pause between frames.

    A KeyboardInterrupt raised anywhere (inside urllib3 with a pool's lock held, inside a flush) can leave the
    process unable to close its client and exit. The first SIGINT only sets a flag and wakes the pause (a byte
    on a self-pipe through :func:`signal.set_wakeup_fd`); a frame being fetched is finished first (at most the
    request's 15 s timeout). A second SIGINT raises KeyboardInterrupt at once, for an API server that hangs.
    """

    def __init__(self) -> None:
        self.asked = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._old_fd = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._old = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True

    def pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less when Ctrl-C comes."""
        if not self.asked:
            select.select([self._r], [], [], seconds)

    def close(self) -> None:
        signal.signal(signal.SIGINT, self._old)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._r)
        os.close(self._w)


def run_status(ns: argparse.Namespace, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> int:
    """Run `status` for parsed arguments; prints to stdout, one line on stderr on failure.

    With `--watch`, redraws every `--interval` seconds until Ctrl-C (exit 0): see :class:`_Interrupt`.
    """
    try:
        api, context_ns = connect(ns.kubeconfig, ns.context)
    except StatusError as exc:
        print(f"status: {exc}", file=sys.stderr)
        return exc.code
    namespace = None if ns.all_namespaces else (ns.namespace or context_ns)
    if not ns.watch:
        try:
            boxes, subs = fetch(api, namespace)
        except StatusError as exc:
            print(f"status: {exc}", file=sys.stderr)
            return exc.code
        finally:
            api.close()
        sys.stdout.write(render(boxes, subs, clock(), ns.output, namespace is None))
        return EXIT_OK
    interrupt = _Interrupt()
    try:
        while not interrupt.asked:
            try:
                boxes, subs = fetch(api, namespace)
            except StatusError as exc:
                print(f"status: {exc}", file=sys.stderr)
                interrupt.pause(max(0.2, ns.interval))
                continue
            if interrupt.asked:
                break
            text = render(boxes, subs, clock(), ns.output, namespace is None)
            where = "all namespaces" if namespace is None else f"namespace {namespace}"
            stamp = clock().astimezone(timezone.utc).strftime("%H:%M:%SZ")
            # Clear the screen and home the cursor between frames (as `watch` does).
            sys.stdout.write("\x1b[H\x1b[2J" + f"{where} · {stamp} · every {ns.interval:g}s, Ctrl-C to stop\n\n"
                             + text)
            sys.stdout.flush()
            interrupt.pause(max(0.2, ns.interval))
    except KeyboardInterrupt:
        return EXIT_OK      # the second Ctrl-C: the client may hold a lock mid-request, so it is not closed
    finally:
        interrupt.close()
    api.close()
    return EXIT_OK
