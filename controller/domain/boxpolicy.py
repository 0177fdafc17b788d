"""The box policy: what an AgentBox's `spec.template` may ask for. One table, two enforcers.

Every rule below carries both a Python check (run by the controller before it creates a box pod)
and a CEL expression (shipped in the Helm chart as a `ValidatingAdmissionPolicy`, so `kubectl apply`
of a refused template fails). `vap_parts()` renders the CEL side into
`charts/agentbox-controller/files/box-policy.yaml`; tests/test_box_policy.py fails when that file
drifts and evaluates the CEL with a real CEL implementation (cel-python) on the same table of
templates as the Python check, requiring the same verdict per rule.

The rules are the Pod Security Standards "restricted" profile
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, Kubernetes 1.33), checked on
the template as written, plus what a box must not reach through the controller's rights: the API
token, other ServiceAccounts, other Secrets, volume types outside an allow-list and (optionally)
images outside allowed prefixes.

Fields the restricted profile requires but a template may leave out are defaulted by `harden()`
(never overriding what the template says): `automountServiceAccountToken: false`,
pod `runAsNonRoot: true` and `seccompProfile: RuntimeDefault`, per container
`allowPrivilegeEscalation: false` and `capabilities.drop: [ALL]`. So the rules accept "unset" for
those fields and refuse only values that are unsafe.

Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

# ---------------------------------------------------------------------------------------------- constants
# Volume sources the restricted profile allows. `secret` is governed by `secret_names` instead of this
# list; hostPath and every other source are never allowed.
RESTRICTED_VOLUME_TYPES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected")
# The default allow-list: no inline CSI driver (any driver the cluster has), no projected volume (it can
# carry a ServiceAccount token or a Secret).
DEFAULT_VOLUME_TYPES = ("configMap", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim")
# Baseline "safe" sysctls (Kubernetes 1.33 list).
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes")
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
TEMPLATE = "spec.template"


@dataclass(frozen=True)
class BoxPolicy:
    """The allow-lists a platform admin chooses (chart values `boxPolicy.*`, settings `box_policy_*`).

    Attributes:
        enabled: check (and harden) templates before creating a pod; off = templates pass through.
        service_accounts: ServiceAccount names a template may name besides `default` (and none).
        allow_token: a template may set `automountServiceAccountToken: true` or project a token.
        volume_types: volume sources allowed (a subset of RESTRICTED_VOLUME_TYPES).
        secret_names: Secrets a template may use (secret volumes, projected secrets, env, envFrom,
            imagePullSecrets).
        image_prefixes: when non-empty, every image must start with one of these.
    """

    enabled: bool = True
    service_accounts: tuple[str, ...] = ()
    allow_token: bool = False
    volume_types: tuple[str, ...] = DEFAULT_VOLUME_TYPES
    secret_names: tuple[str, ...] = ()
    image_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = sorted(set(self.volume_types) - set(RESTRICTED_VOLUME_TYPES))
        if bad:
            raise ValueError(f"volume types {bad} are not allowed by the restricted profile "
                             f"(allowed: {', '.join(RESTRICTED_VOLUME_TYPES)}; Secrets go in secret_names)")


@dataclass(frozen=True)
class Violation:
    """One refused field: `path` names it (`spec.template.spec.containers[0].securityContext.privileged`)."""

    rule: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# ---------------------------------------------------------------------------------------------- CEL-like Python
class _Shape(Exception):
    """A value on the way is not the object or list the rule expects (CEL: an evaluation error,
    which a `failurePolicy: Fail` admission policy turns into a refusal)."""


_ABSENT = object()


def _get(obj: Any, path: Sequence[str]) -> Any:
    """Walk mapping keys like CEL's `has()` chain; `_ABSENT` when a key is missing.

    Raises:
        _Shape: a value on the way is not a mapping.
    """
    cur = obj
    for key in path:
        if not isinstance(cur, dict):
            raise _Shape
        if key not in cur:
            return _ABSENT
        cur = cur[key]
    return cur


def _eq(a: Any, b: Any) -> bool:
    """CEL equality: numbers compare by value, bools only with bools, other types only with their own."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _in(value: Any, allowed: Iterable[Any]) -> bool:
    return any(_eq(value, a) for a in allowed)


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Shape
    return value


def _cel_has_chain(base: str, path: Sequence[str]) -> str:
    """`!has(b.k1) || !has(b.k1.k2) || ...` (true when any key on the path is missing)."""
    return " || ".join(f"!has({base}.{'.'.join(path[:i + 1])})" for i in range(len(path)))


def _cel_str_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


# ---------------------------------------------------------------------------------------------- rules
Param = Callable[[BoxPolicy], Any]


@dataclass(frozen=True)
class Rule:
    """One rule of the box policy.

    Attributes:
        id: stable name (kebab-case), used in tests and docs.
        scope: "pod" (the pod spec), "container" (every container, init and ephemeral container),
            "volume" (every volume) or "template" (the template's metadata).
        path: the field below the scope's object, dotted (`securityContext.privileged`).
        message: what the field must be, for humans.
        check: Python predicate on the scope's object and the policy; True = allowed. May raise _Shape.
        cel: CEL predicate on the scope's object, named `p` (pod spec), `c` (container), `v` (volume)
            or `t` (template); reads the policy's lists as `variables.allowed*`.
    """

    id: str
    scope: str
    path: str
    message: str
    check: Callable[[Any, BoxPolicy], bool]
    cel: str


_VAR = {"pod": "p", "container": "c", "volume": "v", "template": "t"}


def _unset_or(rule_id: str, scope: str, path: str, allowed: Sequence[Any] | Param, message: str,
              cel_allowed: str | None = None, negate: bool = False) -> Rule:
    """Rule: the field is absent or its value is (`negate`: is not) one of `allowed`.

    `allowed` is a literal list, or a function of the policy whose CEL form is `cel_allowed`.
    """
    keys = path.split(".")
    base = _VAR[scope]

    def check(obj: Any, policy: BoxPolicy) -> bool:
        value = _get(obj, keys)
        if value is _ABSENT:
            return True
        values = allowed(policy) if callable(allowed) else allowed
        return _in(value, values) != negate

    target = f"{base}.{path}"
    if callable(allowed):
        assert cel_allowed, "a policy-dependent list needs its CEL form"
        test = f"{target} in {cel_allowed}"
    elif len(allowed) == 1:
        test = f"{target} {'!=' if negate else '=='} {json.dumps(allowed[0])}"
    else:
        assert all(isinstance(a, str) for a in allowed)
        test = f"{'!' if negate else ''}({target} in {_cel_str_list(allowed)})"
    return Rule(rule_id, scope, path, message, check, f"{_cel_has_chain(base, keys)} || {test}")


def _each_item(rule_id: str, scope: str, path: str, message: str, item_check: Callable[[Any, BoxPolicy], bool],
               item_cel: str, item_var: str = "i") -> Rule:
    """Rule: the list field is absent or every item satisfies `item_check` / `item_cel` (on `item_var`)."""
    keys = path.split(".")
    base = _VAR[scope]

    def check(obj: Any, policy: BoxPolicy) -> bool:
        value = _get(obj, keys)
        if value is _ABSENT:
            return True
        return all(item_check(item, policy) for item in _as_list(value))

    return Rule(rule_id, scope, path, message, check,
                f"{_cel_has_chain(base, keys)} || {base}.{path}.all({item_var}, {item_cel})")


def _secret_allowed(name: Any, policy: BoxPolicy) -> bool:
    return name is not _ABSENT and _in(name, policy.secret_names)


def _rule_volume_types() -> Rule:
    def check(vol: Any, policy: BoxPolicy) -> bool:
        if not isinstance(vol, dict):
            raise _Shape
        return all(k in ("name", "secret") or k in policy.volume_types for k in vol)

    return Rule("volume-types", "volume", "", "volume source not allowed by the box policy (hostPath never; "
                "allowed: boxPolicy.allowedVolumeTypes, and secret with boxPolicy.allowedSecretNames)", check,
                "v.all(k, k == 'name' || k == 'secret' || k in variables.allowedVolumeTypes)")


def _rule_secret_volume() -> Rule:
    def check(vol: Any, policy: BoxPolicy) -> bool:
        sec = _get(vol, ["secret"])
        return sec is _ABSENT or _secret_allowed(_get(sec, ["secretName"]), policy)

    return Rule("secret-volume", "volume", "secret.secretName",
                "a Secret volume must name a Secret in boxPolicy.allowedSecretNames", check,
                "!has(v.secret) || (has(v.secret.secretName) && v.secret.secretName in variables.allowedSecretNames)")


def _rule_projected_secret() -> Rule:
    def item(src: Any, policy: BoxPolicy) -> bool:
        sec = _get(src, ["secret"])
        return sec is _ABSENT or _secret_allowed(_get(sec, ["name"]), policy)

    return _each_item("projected-secret", "volume", "projected.sources",
                      "a projected Secret must name a Secret in boxPolicy.allowedSecretNames", item,
                      "!has(s.secret) || (has(s.secret.name) && s.secret.name in variables.allowedSecretNames)", "s")


def _rule_projected_token() -> Rule:
    rule = _each_item("projected-token", "volume", "projected.sources",
                      "a projected ServiceAccount token needs boxPolicy.allowServiceAccountToken",
                      lambda src, policy: _get(src, ["serviceAccountToken"]) is _ABSENT,
                      "!has(s.serviceAccountToken)", "s")
    inner = rule.check
    return Rule(rule.id, rule.scope, rule.path, rule.message,
                lambda vol, policy: policy.allow_token or inner(vol, policy),
                f"variables.allowServiceAccountToken || {rule.cel}")


def _rule_service_account(path: str) -> Rule:
    return _unset_or(f"service-account{'-deprecated' if path == 'serviceAccount' else ''}", "pod", path,
                     lambda policy: ("", "default", *policy.service_accounts),
                     "must be unset, default or one of boxPolicy.allowedServiceAccounts",
                     cel_allowed="(['', 'default'] + variables.allowedServiceAccounts)")


def _rule_token() -> Rule:
    base = _unset_or("service-account-token", "pod", "automountServiceAccountToken", [False],
                     "must be false or unset (the controller sets false) unless boxPolicy.allowServiceAccountToken")
    inner = base.check
    return Rule(base.id, base.scope, base.path, base.message,
                lambda p, policy: policy.allow_token or inner(p, policy),
                f"variables.allowServiceAccountToken || {base.cel}")


def _rule_drop() -> Rule:
    keys = ["securityContext", "capabilities", "drop"]

    def check(ctr: Any, policy: BoxPolicy) -> bool:
        value = _get(ctr, keys)
        return value is _ABSENT or any(_eq(x, "ALL") for x in _as_list(value))

    return Rule("capabilities-drop", "container", ".".join(keys), "must include ALL (the controller sets [ALL] "
                "when unset)", check, f"{_cel_has_chain('c', keys)} || c.securityContext.capabilities.drop.exists(x, x == 'ALL')")


def _rule_images() -> Rule:
    def check(ctr: Any, policy: BoxPolicy) -> bool:
        if not policy.image_prefixes:
            return True
        image = _get(ctr, ["image"])
        if image is _ABSENT:
            return False
        if not isinstance(image, str):
            raise _Shape
        return any(image.startswith(p) for p in policy.image_prefixes)

    return Rule("image", "container", "image", "must start with one of boxPolicy.allowedImagePrefixes", check,
                "variables.allowedImagePrefixes.size() == 0 || "
                "(has(c.image) && variables.allowedImagePrefixes.exists(x, c.image.startsWith(x)))")


def _rule_apparmor_annotations() -> Rule:
    def check(tmpl: Any, policy: BoxPolicy) -> bool:
        ann = _get(tmpl, ["metadata", "annotations"])
        if ann is _ABSENT:
            return True
        if not isinstance(ann, dict):
            raise _Shape
        for key, value in ann.items():
            if not isinstance(key, str) or not key.startswith(APPARMOR_ANNOTATION):
                continue
            if not isinstance(value, str):
                raise _Shape
            if value != "runtime/default" and not value.startswith("localhost/"):
                return False
        return True

    return Rule("apparmor-annotation", "template", "metadata.annotations",
                f"{APPARMOR_ANNOTATION}* must be runtime/default or localhost/<profile>", check,
                "!has(t.metadata) || !has(t.metadata.annotations) || t.metadata.annotations.all(k, "
                f"!k.startsWith('{APPARMOR_ANNOTATION}') || t.metadata.annotations[k] == 'runtime/default' || "
                "t.metadata.annotations[k].startsWith('localhost/'))")


def _security_rules(scope: str) -> list[Rule]:
    """Rules on a securityContext: the pod's (`securityContext` of the pod spec) or a container's."""
    sc = "securityContext"
    who = "pod" if scope == "pod" else "ctr"
    rules = [
        _unset_or(f"{who}-run-as-non-root", scope, f"{sc}.runAsNonRoot", [True],
                  "must be true or unset (the controller sets true on the pod)"),
        _unset_or(f"{who}-run-as-user", scope, f"{sc}.runAsUser", [0], "must not be 0 (root)", negate=True),
        _unset_or(f"{who}-seccomp", scope, f"{sc}.seccompProfile.type", SECCOMP_TYPES,
                  "must be RuntimeDefault or Localhost (the controller sets RuntimeDefault on the pod)"),
        _unset_or(f"{who}-selinux-type", scope, f"{sc}.seLinuxOptions.type", SELINUX_TYPES,
                  f"must be one of {', '.join(repr(t) for t in SELINUX_TYPES)}"),
        _unset_or(f"{who}-selinux-user", scope, f"{sc}.seLinuxOptions.user", [""], "must be unset"),
        _unset_or(f"{who}-selinux-role", scope, f"{sc}.seLinuxOptions.role", [""], "must be unset"),
        _unset_or(f"{who}-apparmor", scope, f"{sc}.appArmorProfile.type", APPARMOR_TYPES,
                  "must be RuntimeDefault or Localhost"),
        _unset_or(f"{who}-host-process", scope, f"{sc}.windowsOptions.hostProcess", [False], "must be false or unset"),
    ]
    # A seccomp or AppArmor profile object without a type is refused by the API server; here it must
    # not pass as "unset" either.
    for rule_id, obj_path, allowed in ((f"{who}-seccomp-type", f"{sc}.seccompProfile", SECCOMP_TYPES),
                                       (f"{who}-apparmor-type", f"{sc}.appArmorProfile", APPARMOR_TYPES)):
        keys = obj_path.split(".")
        base = _VAR[scope]

        def check(obj: Any, policy: BoxPolicy, keys: list[str] = keys) -> bool:
            prof = _get(obj, keys)
            return prof is _ABSENT or _get(prof, ["type"]) is not _ABSENT

        rules.append(Rule(rule_id, scope, f"{obj_path}.type", "must be set when the profile is", check,
                          f"{_cel_has_chain(base, keys)} || has({base}.{obj_path}.type)"))
    return rules


def _build_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = [
        _unset_or("host-network", "pod", "hostNetwork", [False], "must be false or unset"),
        _unset_or("host-pid", "pod", "hostPID", [False], "must be false or unset"),
        _unset_or("host-ipc", "pod", "hostIPC", [False], "must be false or unset"),
        _rule_token(),
        _rule_service_account("serviceAccountName"),
        _rule_service_account("serviceAccount"),
        *_security_rules("pod"),
        _each_item("sysctls", "pod", "securityContext.sysctls", "only the Pod Security baseline's safe sysctls",
                   lambda s, _: _in(_get(s, ["name"]), SAFE_SYSCTLS),
                   f"has(s.name) && s.name in {_cel_str_list(SAFE_SYSCTLS)}", "s"),
        _each_item("image-pull-secret", "pod", "imagePullSecrets",
                   "a pull Secret must be in boxPolicy.allowedSecretNames (another team's registry login is theirs)",
                   lambda ref, pol: _secret_allowed(_get(ref, ["name"]), pol),
                   "has(r.name) && r.name in variables.allowedSecretNames", "r"),
        _rule_apparmor_annotations(),
        # containers, initContainers, ephemeralContainers
        _unset_or("privileged", "container", "securityContext.privileged", [False], "must be false or unset"),
        _unset_or("privilege-escalation", "container", "securityContext.allowPrivilegeEscalation", [False],
                  "must be false or unset (the controller sets false)"),
        _each_item("capabilities-add", "container", "securityContext.capabilities.add",
                   "may add only NET_BIND_SERVICE", lambda a, _: _eq(a, "NET_BIND_SERVICE"), "a == 'NET_BIND_SERVICE'",
                   "a"),
        _rule_drop(),
        _unset_or("proc-mount", "container", "securityContext.procMount", ["Default"], "must be Default or unset"),
        *_security_rules("container"),
        _each_item("host-port", "container", "ports", "hostPort must be 0 or unset",
                   lambda port, _: _get(port, ["hostPort"]) is _ABSENT or _eq(_get(port, ["hostPort"]), 0),
                   "!has(o.hostPort) || o.hostPort == 0", "o"),
        _rule_images(),
        _each_item("env-secret", "container", "env", "a secretKeyRef must name a Secret in boxPolicy.allowedSecretNames",
                   lambda e, pol: (_get(e, ["valueFrom", "secretKeyRef"]) is _ABSENT
                                   or _secret_allowed(_get(e, ["valueFrom", "secretKeyRef", "name"]), pol)),
                   "!has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || (has(e.valueFrom.secretKeyRef.name) && "
                   "e.valueFrom.secretKeyRef.name in variables.allowedSecretNames)", "e"),
        _each_item("envfrom-secret", "container", "envFrom", "a secretRef must name a Secret in boxPolicy.allowedSecretNames",
                   lambda e, pol: _get(e, ["secretRef"]) is _ABSENT or _secret_allowed(_get(e, ["secretRef", "name"]), pol),
                   "!has(e.secretRef) || (has(e.secretRef.name) && e.secretRef.name in variables.allowedSecretNames)", "e"),
        _rule_volume_types(),
        _rule_secret_volume(),
        _rule_projected_secret(),
        _rule_projected_token(),
    ]
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids)), "rule ids must be unique"
    return tuple(rules)


RULES: tuple[Rule, ...] = _build_rules()


# ---------------------------------------------------------------------------------------------- the check
def _scoped(template: dict[str, Any]) -> Iterable[tuple[str, str, Any]]:
    """(scope, path prefix, object) for every object a rule applies to. Raises _Shape on a bad list."""
    yield "template", TEMPLATE, template
    spec = _get(template, ["spec"])
    if spec is _ABSENT:
        return
    yield "pod", f"{TEMPLATE}.spec", spec
    for name in CONTAINER_LISTS:
        items = _get(spec, [name])
        if items is not _ABSENT:
            for i, ctr in enumerate(_as_list(items)):
                yield "container", f"{TEMPLATE}.spec.{name}[{i}]", ctr
    vols = _get(spec, ["volumes"])
    if vols is not _ABSENT:
        for i, vol in enumerate(_as_list(vols)):
            yield "volume", f"{TEMPLATE}.spec.volumes[{i}]", vol


def check(template: Any, policy: BoxPolicy) -> list[Violation]:
    """Every field of `template` (an AgentBox `spec.template`) the policy refuses, in rule order per object.

    Args:
        template: the pod template as written (a dict; anything else is one violation).
        policy: the allow-lists.
    Returns:
        [] when allowed (or the policy is off); else one Violation per refused field, its path
        naming the field from the AgentBox (`spec.template.spec.containers[0].securityContext.privileged`).
    """
    if not policy.enabled:
        return []
    if not isinstance(template, dict):
        return [Violation("shape", TEMPLATE, "must be an object")]
    out: list[Violation] = []
    try:
        scoped = list(_scoped(template))
    except _Shape:
        return [Violation("shape", f"{TEMPLATE}.spec", "containers, initContainers, ephemeralContainers and "
                                                       "volumes must be lists of objects")]
    for scope, prefix, obj in scoped:
        for rule in RULES:
            if rule.scope != scope:
                continue
            try:
                ok = rule.check(obj, policy)
            except _Shape:
                ok = False
            if not ok:
                path = f"{prefix}.{rule.path}" if rule.path else prefix
                if rule.id == "volume-types" and isinstance(obj, dict):
                    bad = [k for k in obj if k not in ("name", "secret") and k not in policy.volume_types]
                    path = f"{prefix}.{bad[0]}" if bad else prefix
                out.append(Violation(rule.id, path, rule.message))
    return out


def summary(violations: Sequence[Violation], limit: int = 3) -> str:
    """One line for a condition and an Event: the first `limit` fields, then a count of the rest."""
    head = "; ".join(str(v) for v in violations[:limit])
    more = len(violations) - limit
    return f"box policy: {head}" + (f" (and {more} more)" if more > 0 else "")


# ---------------------------------------------------------------------------------------------- defaults
def harden(template: dict[str, Any], policy: BoxPolicy) -> dict[str, Any]:
    """A copy of an allowed template with the restricted profile's required fields set where unset.

    Sets (only when absent; never overrides): `spec.automountServiceAccountToken: false`; pod
    `securityContext.runAsNonRoot: true` and `seccompProfile: {type: RuntimeDefault}`; per container and
    init container `securityContext.allowPrivilegeEscalation: false` and `capabilities.drop: [ALL]`.
    The policy off: the template unchanged. Call only after `check()` returned [] (shapes are trusted).
    """
    import copy

    tmpl = copy.deepcopy(template)
    if not policy.enabled:
        return tmpl
    spec = tmpl.setdefault("spec", {})
    spec.setdefault("automountServiceAccountToken", False)
    psc = spec.setdefault("securityContext", {})
    psc.setdefault("runAsNonRoot", True)
    psc.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for name in ("containers", "initContainers"):
        for ctr in spec.get(name) or []:
            sc = ctr.setdefault("securityContext", {})
            sc.setdefault("allowPrivilegeEscalation", False)
            caps = sc.setdefault("capabilities", {})
            caps.setdefault("drop", ["ALL"])
    return tmpl


# ---------------------------------------------------------------------------------------------- the VAP
# Variables the chart renders from values (CEL literals), in this order, before the derived ones.
PARAM_VARIABLES = ("allowedServiceAccounts", "allowServiceAccountToken", "allowedVolumeTypes", "allowedSecretNames",
                   "allowedImagePrefixes")


def param_variables(policy: BoxPolicy) -> list[dict[str, str]]:
    """The policy's allow-lists as VAP variables (what the chart renders from `boxPolicy` values)."""
    values = {"allowedServiceAccounts": list(policy.service_accounts), "allowServiceAccountToken": policy.allow_token,
              "allowedVolumeTypes": list(policy.volume_types), "allowedSecretNames": list(policy.secret_names),
              "allowedImagePrefixes": list(policy.image_prefixes)}
    return [{"name": n, "expression": json.dumps(values[n], separators=(",", ":"))} for n in PARAM_VARIABLES]


_DERIVED_VARIABLES = [
    ("template", "has(object.spec) && has(object.spec.template) ? object.spec.template : {}"),
    ("podSpec", "has(variables.template.spec) ? variables.template.spec : {}"),
    ("containers", " + ".join(f"(has(variables.podSpec.{n}) ? variables.podSpec.{n} : [])" for n in CONTAINER_LISTS)),
    ("volumes", "has(variables.podSpec.volumes) ? variables.podSpec.volumes : []"),
]
_SCOPE_CEL = {  # each rule's CEL binds its scope object with a one-item all() (CEL has no let)
    "template": "[variables.template].all(t, {cel})",
    "pod": "[variables.podSpec].all(p, {cel})",
    "container": "variables.containers.all(c, {cel})",
    "volume": "variables.volumes.all(v, {cel})",
}
# Only a create, or an update that changes the template, is checked: kopf's finalizer and annotation
# patches on a box admitted under an older policy (or being deleted) must still go through.
MATCH_CONDITIONS = [{
    "name": "template-created-or-changed",
    "expression": "request.operation == 'CREATE' || !has(oldObject.spec) || !has(object.spec) || "
                  "!has(oldObject.spec.template) || !has(object.spec.template) || "
                  "oldObject.spec.template != object.spec.template",
}]


def rule_expression(rule: Rule) -> str:
    """The VAP validation expression of a rule (over `object` and `variables`)."""
    return _SCOPE_CEL[rule.scope].format(cel=rule.cel)


def rule_path_pattern(rule: Rule) -> str:
    """The field a rule checks, from the AgentBox, with [*] for list items."""
    prefix = {"template": TEMPLATE, "pod": f"{TEMPLATE}.spec", "container": f"{TEMPLATE}.spec.containers[*]",
              "volume": f"{TEMPLATE}.spec.volumes[*]"}[rule.scope]
    return f"{prefix}.{rule.path}" if rule.path else prefix


def vap_parts() -> dict[str, Any]:
    """What `charts/agentbox-controller/files/box-policy.yaml` holds: matchConditions, the derived
    variables (after the chart's PARAM_VARIABLES) and one validation per rule."""
    return {
        "matchConditions": MATCH_CONDITIONS,
        "variables": [{"name": n, "expression": e} for n, e in _DERIVED_VARIABLES],
        "validations": [{"expression": rule_expression(r),
                         "message": f"{rule_path_pattern(r)}: {r.message} (box policy rule {r.id}; "
                                    "initContainers and ephemeralContainers too)" if r.scope == "container" else
                                    f"{rule_path_pattern(r)}: {r.message} (box policy rule {r.id})",
                         "reason": "Forbidden"} for r in RULES],
    }
