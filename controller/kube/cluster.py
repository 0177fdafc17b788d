"""Connecting to the cluster with the official Kubernetes client: configuration, reachability, kopf's peering
object and the read-only listing of our objects for `status`.

The only place (with the rest of :mod:`controller.kube`) that imports the ``kubernetes`` package; an
import-linter contract in pyproject.toml keeps it so. Error messages name hosts and HTTP statuses only, never
a response body or an exception text (either can hold a token).
"""

from __future__ import annotations

import os
from typing import Any

from controller import constants as C

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class ClusterError(Exception):
    """The cluster could not be read. ``kind``: "unreachable" (no config, no answer, 5xx) or "forbidden"
    (401/403, or the CRDs are missing: 404). The message is one line, safe to print."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def load_configuration(kubeconfig: str | None = None) -> Any:
    """The operator's ``kubernetes.client.Configuration``: in-cluster service account (its token file
    re-read once a minute by the refresh hook ``load_incluster_config`` installs), else ``kubeconfig`` or
    $KUBECONFIG (exec and OIDC credentials renewed by their hook when they expire). Requests go through
    :class:`controller.kube.rest.Rest` and :class:`controller.kube.aexec.AsyncExec`, which read it.

    Raises:
        kubernetes.config.ConfigException: neither in a pod nor a usable kubeconfig.
    """
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=cfg)
    return cfg


def load_default_config() -> None:
    """Load the client's process-wide default configuration (in-cluster, else $KUBECONFIG), for code that
    builds its APIs without an explicit client (``kubernetes.leaderelection``).

    Raises:
        kubernetes.config.ConfigException: neither in a pod nor a usable kubeconfig.
    """
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))


def check_cluster(timeout_s: float = 10.0) -> str | None:
    """None when a Kubernetes API server answers (in-cluster service account, else $KUBECONFIG or
    ~/.kube/config with its current context), else one line saying why. Checked once before kopf
    starts: kopf itself would log a traceback every minute and never exit."""
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


def ensure_peering(name: str, namespaces: list[str]) -> None:
    """Create kopf's peering object (ClusterKopfPeering, or a KopfPeering per watched namespace) if
    missing: kopf needs it to exist and never creates it. Its CRDs come with the Helm chart.

    Raises:
        kubernetes.client.exceptions.ApiException: any answer but 2xx and 409 (exists).
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    load_default_config()
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


def connect(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
    """(kubernetes ApiClient, the context's namespace or `default`) by kubectl's rules: a kubeconfig
    (``kubeconfig``, $KUBECONFIG, ~/.kube/config) when one exists or is named, else the pod's service account.

    Raises:
        ClusterError: ("unreachable") no usable kubeconfig and not in a pod.
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
            raise ClusterError(f"no cluster: kubeconfig {path}: {first}", "unreachable") from None
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            raise ClusterError(f"no cluster: no kubeconfig ({path}) and not in a pod", "unreachable") from None
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
                namespace = fh.read().strip() or "default"
        except OSError:
            pass
    return client.ApiClient(cfg), namespace


def list_ours(api: Any, namespace: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(AgentBox objects, Subscription objects) in `namespace`, or in all namespaces when None.

    Raises:
        ClusterError: "forbidden" when the CRDs are missing (404) or listing is not allowed (401/403);
            "unreachable" when the API server does not answer or fails.
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
                raise ClusterError(f"{plural}.{C.GROUP} not found: are the agentbox-controller CRDs installed?",
                                   "forbidden") from None
            if exc.status in (401, 403):
                where = "in all namespaces" if namespace is None else f"in namespace {namespace}"
                raise ClusterError(f"not allowed to list {plural}.{C.GROUP} {where} (HTTP {exc.status})",
                                   "forbidden") from None
            raise ClusterError(f"listing {plural} failed (HTTP {exc.status})", "unreachable") from None
        except Exception as exc:  # noqa: BLE001 -- connection errors of urllib3: the class is the message
            host = getattr(api.configuration, "host", "?")
            raise ClusterError(f"no cluster: the API server at {host} does not answer ({type(exc).__name__})",
                               "unreachable") from None
        out.append(list(items.get("items") or []))
    return out[0], out[1]
