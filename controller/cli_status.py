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
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

from controller import constants as C
from controller.statusview import build_view, render_table

EXIT_OK = 0
EXIT_NO_CLUSTER = 3
EXIT_NO_ACCESS = 4


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
    """(kubernetes ApiClient, the context's namespace or `default`) by kubectl's rules.

    Raises:
        StatusError: no usable kubeconfig and not in a pod.
    """
    from kubernetes import client, config

    cfg = client.Configuration()
    namespace = "default"
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    has_file = any(os.path.exists(p) for p in path.split(os.pathsep) if p)
    if has_file or kubeconfig or context:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            if context:
                contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
                active = next((c for c in contexts if c.get("name") == context), active)
            namespace = ((active or {}).get("context") or {}).get("namespace") or "default"
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StatusError(f"no cluster: kubeconfig {path}: {first}", EXIT_NO_CLUSTER) from None
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            raise StatusError(f"no cluster: no kubeconfig ({path}) and not in a pod", EXIT_NO_CLUSTER) from None
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as fh:
                namespace = fh.read().strip() or "default"
        except OSError:
            pass
    return client.ApiClient(cfg), namespace


def fetch(api: Any, namespace: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(AgentBox objects, Subscription objects) in `namespace`, or in all namespaces when None.

    Raises:
        StatusError: the API server does not answer, the CRDs are missing (404) or listing is forbidden.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objs = client.CustomObjectsApi(api)
    out = []
    for plural in (C.AGENTBOX_PLURAL, C.SUBSCRIPTION_PLURAL):
        try:
            if namespace is None:
                items = objs.list_cluster_custom_object(C.GROUP, C.VERSION, plural, _request_timeout=15)
            else:
                items = objs.list_namespaced_custom_object(C.GROUP, C.VERSION, namespace, plural, _request_timeout=15)
        except ApiException as exc:
            if exc.status == 404:
                raise StatusError(f"{plural}.{C.GROUP} not found: are the agentbox-controller CRDs installed?",
                                  EXIT_NO_ACCESS) from None
            if exc.status in (401, 403):
                where = "in all namespaces" if namespace is None else f"in namespace {namespace}"
                raise StatusError(f"not allowed to list {plural}.{C.GROUP} {where} (HTTP {exc.status})",
                                  EXIT_NO_ACCESS) from None
            raise StatusError(f"listing {plural} failed (HTTP {exc.status})", EXIT_NO_CLUSTER) from None
        except Exception as exc:  # noqa: BLE001 -- connection errors of urllib3: the class is the message
            host = getattr(api.configuration, "host", "?")
            raise StatusError(f"no cluster: the API server at {host} does not answer ({type(exc).__name__})",
                              EXIT_NO_CLUSTER) from None
        out.append(list(items.get("items") or []))
    return out[0], out[1]


def render(boxes: list[dict[str, Any]], subs: list[dict[str, Any]], now: datetime, output: str,
           all_namespaces: bool) -> str:
    """The text printed for one frame."""
    view = build_view(boxes, subs, now)
    if output == "json":
        return json.dumps(view, indent=2, ensure_ascii=False) + "\n"
    return render_table(view, wide=output == "wide", all_namespaces=all_namespaces)


def run_status(ns: argparse.Namespace, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> int:
    """Run `status` for parsed arguments; prints to stdout, one line on stderr on failure."""
    try:
        api, context_ns = connect(ns.kubeconfig, ns.context)
    except StatusError as exc:
        print(f"status: {exc}", file=sys.stderr)
        return exc.code
    namespace = None if ns.all_namespaces else (ns.namespace or context_ns)
    try:
        while True:
            try:
                boxes, subs = fetch(api, namespace)
            except StatusError as exc:
                print(f"status: {exc}", file=sys.stderr)
                if not ns.watch:
                    return exc.code
                time.sleep(max(0.2, ns.interval))
                continue
            text = render(boxes, subs, clock(), ns.output, namespace is None)
            if ns.watch:
                where = "all namespaces" if namespace is None else f"namespace {namespace}"
                stamp = clock().astimezone(timezone.utc).strftime("%H:%M:%SZ")
                # Clear the screen and home the cursor between frames (as `watch` does).
                sys.stdout.write("\x1b[H\x1b[2J" + f"{where} · {stamp} · every {ns.interval:g}s, Ctrl-C to stop\n\n"
                                 + text)
                sys.stdout.flush()
                time.sleep(max(0.2, ns.interval))
                continue
            sys.stdout.write(text)
            return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        api.close()
