"""RBAC coverage: the emulated API server checks no permissions, so this test does. It plays a box's life
with the real operator (subscription and login Secret, box, pod started by the "kubelet", a usage limit
detected and resumed, a tampered credentials Secret repaired, the pod evicted and replaced, deletion), maps every request the operator
made (the emulator's journal) to (apiGroup, resource[/subresource], verb, namespace), and asserts that

* the chart's rendered RBAC (cluster-wide mode, and the namespaced mode) allows each of them, and
* every (apiGroup, resource, verb) the chart grants is used by at least one request, or is justified in
  JUSTIFIED below.
"""

from __future__ import annotations

import base64
import math
import pathlib
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import aiohttp
import helm_python as helm
import pytest
import yaml

from controller import constants as C
from agentbox_sim.kube import JournalEntry
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component

CHART = pathlib.Path(__file__).resolve().parents[1] / "charts" / "agentbox-controller"
TEST_CLIENT_UA = "Python/"  # aiohttp's default User-Agent: requests this test made itself

# Grants no request in the scenario exercises, each with the reason it is needed.
JUSTIFIED: dict[tuple[str, str, str], str] = {
    # The API server authorizes pod exec as `create` for SPDY clients and, since Kubernetes 1.30's
    # WebSocket exec (KEP-4006), checks `create` too; the emulator journal shows the WebSocket GET.
    ("", "pods/exec", "create"): "exec authorization",
    # controller/events.py: a repeated Event is patched (count, lastTimestamp) once its refresh period
    # ends, and a restarted controller reads the count of an Event it posted before (create -> 409);
    # both are exercised by tests/test_events.py against a store that behaves like the API server.
    ("", "events", "patch"): "repeated Event count",
    ("", "events", "get"): "Event count after a restart",
    # controller/handlers/daemons.py existence_check: a box's watcher learns that its box exists from the
    # watch and GETs it only when the watch has said nothing of it for existence_recheck_s (a deletion
    # missed across a re-list: tests/test_presence.py); controller/service/status.py reads the box after
    # another writer's 409. Neither happens in this short scenario.
    (C.GROUP, C.AGENTBOX_PLURAL, "get"): "existence recheck, status write conflict",
}
# Requests only the namespaced mode makes (kopf follows its namespaces); cluster-wide mode never lists
# namespaces, so its ClusterRole leaves them out.
NAMESPACED_MODE_ONLY = {("", "namespaces", "list"), ("", "namespaces", "watch")}
NO_ELECTION = {"leaderElection": {"enabled": False}}


@dataclass(frozen=True)
class Access:
    """One authorization check: what the API server would ask RBAC for one request."""

    group: str
    resource: str  # "pods" or "pods/exec"
    verb: str
    namespace: str | None  # None: cluster-scoped, or across all namespaces
    name: str | None = None  # the object's name for a named request (get, update, patch, delete)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.group, self.resource, self.verb


def access_of(entry: JournalEntry) -> Access | None:
    """The RBAC check for a request; None for discovery (non-resource URLs, allowed to every
    authenticated user by the built-in system:discovery role)."""
    parts = [p for p in entry.path.split("/") if p]
    if parts == ["version"]:
        return None  # `run` checks the cluster answers; system:public-info-viewer allows it to everyone
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[3:]
    else:
        raise AssertionError(f"unexpected path {entry.path}")
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    watch = entry.params.get("watch", [""])[0] in ("true", "1")
    verb = {
        "GET": "get" if named else ("watch" if watch else "list"),
        "POST": "create",
        "PATCH": "patch", "PUT": "update",
        "DELETE": "delete" if named else "deletecollection",
    }[entry.method]
    return Access(group, resource, verb, namespace, rest[1] if named else None)


def operator_accesses(world: World) -> set[Access]:
    out = set()
    for entry in world.kube.journal:
        if entry.user_agent.startswith(TEST_CLIENT_UA):
            continue
        acc = access_of(entry)
        if acc is not None:
            out.add(acc)
    return out


# ---------------------------------------------------------------------------------------------- the chart
@dataclass(frozen=True)
class Grant:
    group: str
    resource: str
    verb: str
    namespace: str | None  # None: a ClusterRole (every namespace and cluster-scoped resources)
    names: frozenset[str] = frozenset()  # resourceNames; empty: any name


def grants(values: dict[str, Any], release_namespace: str = "agentbox-system") -> set[Grant]:
    """Every (group, resource, verb, scope, names) the chart's RBAC grants the controller's ServiceAccount."""
    out = helm.Chart.load(CHART).render(values, name="agentbox", namespace=release_namespace, is_install=True)
    docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    result: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa["name"] and s["namespace"] == sa["namespace"]
                   for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            names = frozenset(rule.get("resourceNames") or ())
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        result.add(Grant(group, resource, verb, scope, names))
    return result


def allowed(acc: Access, granted: set[Grant]) -> bool:
    return any(g.group == acc.group and g.resource == acc.resource and g.verb == acc.verb
               and (g.namespace is None or g.namespace == acc.namespace)
               and (not g.names or acc.name in g.names) for g in granted)


# ---------------------------------------------------------------------------------------------- scenario
async def play_a_box_life(world: World) -> None:
    world.start_operator()
    reset = float(math.ceil(time.time() + 5))
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                               weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a")
    await world.run_pod("box-a", [TabSpec("main", fake_agent_argv("claude-code", reset))])
    await eventually(lambda: {"LimitDetected", "Resumed"} <= {e["reason"] for e in world.events("box-a")}, 40,
                     what="the limit detected and the tab resumed")

    # Someone edits the box credentials Secret; the next reconcile puts the login back (a PATCH).
    secret_path = f"/api/v1/namespaces/{world.namespace}/secrets/box-a-credentials"
    async with aiohttp.ClientSession(base_url=world.kube.url) as http:
        async with http.patch(secret_path, json={"data": {"credentials.json": base64.b64encode(b"{}").decode()}},
                              headers={"Content-Type": "application/merge-patch+json"}) as resp:
            assert resp.status == 200
        await world.patch(world.box_path("box-a"), {"metadata": {"annotations": {"example.com/touched": "1"}}})
        await eventually(lambda: world.box_secret("box-a").get("credentials.json") == claude_login("tok-a"), 20,
                         what="the box credentials Secret repaired")

        # The node evicts the box pod: the operator deletes it (uid precondition) and creates a new one.
        def pod_uid() -> str | None:
            return ((world.kube.get("v1/pods", world.namespace, "box-a") or {}).get("metadata") or {}).get("uid")
        evicted = pod_uid()
        await world.kube.evict_pod(world.namespace, "box-a")
        await eventually(lambda: pod_uid() not in (None, evicted), 20, what="the evicted pod replaced")

        # Deletion: kopf releases its finalizers; the emulator's garbage collector removes the children.
        for path in (world.box_path("box-a"),
                     f"/apis/{C.GROUP}/{C.VERSION}/namespaces/{world.namespace}/{C.SUBSCRIPTION_PLURAL}/claude-a"):
            async with http.delete(path) as resp:
                assert resp.status in (200, 202), (path, resp.status)
        await eventually(lambda: world.box("box-a") is None, 20, what="the box deleted")
        await eventually(lambda: world.kube.get(C.SUBSCRIPTION_PLURAL, world.namespace, "claude-a") is None, 20,
                         what="the subscription deleted")


async def test_the_chart_grants_what_the_operator_uses_and_nothing_more(world: World):
    await play_a_box_life(world)
    await world.stop_operator()
    used = operator_accesses(world)
    used_keys = {a.key for a in used}
    assert ("", "pods/exec", "get") in used_keys and ("", "secrets", "patch") in used_keys, "scenario too short"

    # Cluster-wide mode. This operator runs in-process without leader election: the Lease Role is checked by
    # test_leader_election_rights_are_exactly_what_two_electing_replicas_use.
    cluster = grants({"clusterWide": True, **NO_ELECTION})
    missing = sorted({a.key for a in used if not allowed(a, cluster)} - NAMESPACED_MODE_ONLY)
    assert missing == [], f"the operator made requests the ClusterRole does not allow: {missing}"
    unused = sorted({g[:3] for g in ((g.group, g.resource, g.verb) for g in cluster)} - used_keys - set(JUSTIFIED))
    assert unused == [], f"the ClusterRole grants what no request needs (use it or justify it): {unused}"

    # Namespaced mode (the default), watching the world's namespace: Role there + the observer ClusterRole.
    namespaced = grants({"clusterWide": False, "watchNamespaces": [world.namespace], **NO_ELECTION})
    missing = sorted({(a.key, a.namespace) for a in used if not allowed(a, namespaced)})
    assert missing == [], f"the operator made requests the namespaced RBAC does not allow: {missing}"
    unused = sorted({(g.group, g.resource, g.verb) for g in namespaced} - used_keys - set(JUSTIFIED))
    assert unused == [], f"the namespaced RBAC grants what no request needs: {unused}"


@pytest.mark.unit
@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/namespaces/default/pods/box-a/exec", "command=tmux", ("", "pods/exec", "get", "default")),
    ("GET", "/api/v1/namespaces", "watch=true", ("", "namespaces", "watch", None)),
    ("GET", "/api/v1/namespaces", "", ("", "namespaces", "list", None)),
    ("GET", "/api/v1/namespaces/default", "", ("", "namespaces", "get", None)),
    ("POST", "/api/v1/namespaces/default/events", "", ("", "events", "create", "default")),
    ("PATCH", "/apis/agentbox.dev/v1alpha1/namespaces/ns/agentboxes/b/status", "",
     ("agentbox.dev", "agentboxes/status", "patch", "ns")),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "watch=true",
     ("apiextensions.k8s.io", "customresourcedefinitions", "watch", None)),
    ("GET", "/apis/agentbox.dev/v1alpha1/agentboxes", "watch=1", ("agentbox.dev", "agentboxes", "watch", None)),
    ("DELETE", "/api/v1/namespaces/ns/pods", "", ("", "pods", "deletecollection", "ns")),
    ("PUT", "/api/v1/namespaces/ns/secrets/s", "", ("", "secrets", "update", "ns")),
])
def test_request_to_rbac_mapping(method: str, path: str, query: str, expected: tuple):
    acc = access_of(JournalEntry(method, path, query, ""))
    assert acc is not None and (acc.group, acc.resource, acc.verb, acc.namespace) == expected


@pytest.mark.unit
@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/agentbox.dev/v1alpha1", "/version/"])
def test_discovery_needs_no_rule(path: str):
    assert access_of(JournalEntry("GET", path, "", "")) is None


@pytest.mark.unit
def test_peering_adds_only_kopf_peering_rights():
    """Peering cannot run against the emulator (no kopf.dev CRDs there); what it needs is kopf's documented
    peering RBAC (get/list/watch/patch the peering object) plus `create`, as `run --peering` creates it."""
    cluster_wide = {"clusterWide": True, **NO_ELECTION}
    peering = {"replicas": 2, "peering": {"enabled": True}}
    verbs = {"get", "list", "watch", "patch", "create"}
    extra = {(g.group, g.resource, g.verb, g.namespace)
             for g in grants({**cluster_wide, **peering}) - grants(cluster_wide)}
    assert extra == {("kopf.dev", "clusterkopfpeerings", v, None) for v in verbs}
    ns_values = {"clusterWide": False, "watchNamespaces": ["team-a"], **NO_ELECTION}
    extra = {(g.group, g.resource, g.verb, g.namespace) for g in grants({**ns_values, **peering}) - grants(ns_values)}
    assert extra == {("kopf.dev", "kopfpeerings", v, "team-a") for v in verbs}


# ---------------------------------------------------------------------------------------------- leader election
async def test_leader_election_rights_are_exactly_what_two_electing_replicas_use(world: World, operator_process):
    """Two `run --leader-elect` processes (the chart's args) against the emulator: the first creates the
    Lease, both read it, the holder renews it (PUT). What leader election adds to the chart's RBAC is a Role
    in the release namespace allowing exactly those requests: `create`, and `get`/`update` on the Lease's
    name only (an `update` of another Lease name would be refused)."""
    lease = "agentbox-agentbox-controller"  # the chart's default: the release's full name
    elect = ("--leader-elect", lease, "--lease-namespace", world.namespace)
    for name in ("replica-a", "replica-b"):
        operator_process(name, *elect)

    def lease_accesses() -> set[Access]:
        return {a for a in operator_accesses(world) if a.group == "coordination.k8s.io"}

    await eventually(lambda: {a.verb for a in lease_accesses()} >= {"create", "get", "update"}, 40,
                     what="the Lease created, read and renewed")
    used = lease_accesses()
    assert {a.name for a in used if a.verb != "create"} == {lease}
    added = grants({}, world.namespace) - grants(NO_ELECTION, world.namespace)
    assert {(g.group, g.resource, g.verb, g.namespace) for g in added} == {
        (a.group, a.resource, a.verb, a.namespace) for a in used}, "the Lease Role grants exactly what is used"
    for acc in used:
        assert allowed(acc, added), acc
    assert not allowed(Access("coordination.k8s.io", "leases", "update", world.namespace, "another"), added)
    assert not allowed(Access("coordination.k8s.io", "leases", "get", "kube-system", lease), added), \
        "a Role in the release namespace, not a ClusterRole"


async def test_sharded_replicas_use_exactly_the_shard_lease_rights(world: World, operator_process):
    """Two `run --leader-elect` processes with AGENTBOX_SHARDS=2 (the chart's `shards: 2`): they create, read
    and replace the shard Leases and the heartbeat Lease, and nothing else of `leases`; the chart's Lease Role
    with `shards: 2` allows each of those requests (the same verbs as the election's, on those names only)."""
    lease = "agentbox-agentbox-controller"
    world.settings = world.settings.model_copy(update={"shards": 2})
    for name in ("replica-a", "replica-b"):
        operator_process(name, "--leader-elect", lease, "--lease-namespace", world.namespace)

    def lease_accesses() -> set[Access]:
        return {a for a in operator_accesses(world) if a.group == "coordination.k8s.io"}

    names = {f"{lease}-shard-0", f"{lease}-shard-1", f"{lease}-shards"}
    await eventually(lambda: {a.name for a in lease_accesses() if a.verb == "update"} >= names, 40,
                     what="every shard Lease and the heartbeat Lease created, read and replaced")
    used = lease_accesses()
    assert {a.name for a in used if a.verb != "create"} == names, "no other Lease is touched"
    added = grants({"shards": 2}, world.namespace) - grants(NO_ELECTION, world.namespace)
    assert {(g.group, g.resource, g.verb, g.namespace) for g in added} == {
        (a.group, a.resource, a.verb, a.namespace) for a in used}, "the Lease Role grants exactly what is used"
    for acc in used:
        assert allowed(acc, added), acc
    assert not allowed(Access("coordination.k8s.io", "leases", "update", world.namespace, lease), added), \
        "sharded: the election's own Lease is not granted"
