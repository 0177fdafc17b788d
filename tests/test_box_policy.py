"""The box policy: one table of rules, enforced by the controller (Python) and at admission (the chart's
ValidatingAdmissionPolicy, CEL). Every template of TABLE is judged both ways — the controller's check,
and the policy's CEL evaluated by a real CEL implementation (cel-python) the way the API server does
(variables in order, then each validation; an evaluation error refuses, as `failurePolicy: Fail` does) —
and both must refuse exactly the same rules. Templates the policy allows, once hardened, must pass an
independent reading of the Pod Security "restricted" profile.

Run `.venv/bin/python tests/test_box_policy.py` to rewrite charts/agentbox-controller/files/box-policy.yaml.
"""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import celpy
import pytest
import yaml

from controller.domain import boxpolicy as bp
from controller.domain.boxpolicy import BoxPolicy

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
GENERATED = ROOT / "charts" / "agentbox-controller" / "files" / "box-policy.yaml"
HEADER = ("# Generated from controller/domain/boxpolicy.py by `.venv/bin/python tests/test_box_policy.py`;\n"
          "# do not edit. templates/boxpolicy.yaml puts these after the variables it renders from values.\n")


def generated_text() -> str:
    return HEADER + yaml.safe_dump(bp.vap_parts(), sort_keys=False, width=120)


# ---------------------------------------------------------------------------------------------- CEL
_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


class CelError(Exception):
    """The expression did not evaluate (the API server refuses the request under failurePolicy Fail)."""


def cel_eval(expr: str, activation: dict[str, Any]) -> Any:
    prog = _PROGRAMS.get(expr)
    if prog is None:
        prog = _PROGRAMS[expr] = _ENV.program(_ENV.compile(expr))
    try:
        result = prog.evaluate(activation)
    except celpy.CELEvalError as exc:
        raise CelError(str(exc)) from None
    if isinstance(result, celpy.CELEvalError):
        raise CelError(str(result))
    return result


def vap_refusals(vap_spec: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None,
                 operation: str = "CREATE") -> list[str] | None:
    """Evaluate a ValidatingAdmissionPolicy spec as the API server does: matchConditions (None = not
    matched), variables in order, validations. Returns the messages of the validations that refuse."""
    act: dict[str, Any] = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                           "request": celpy.json_to_cel({"operation": operation})}
    for cond in vap_spec.get("matchConditions") or []:
        if not cel_eval(cond["expression"], act):  # an error raises: the test fails
            return None
    variables: dict[str, Any] = {}
    failed_vars: set[str] = set()
    for var in vap_spec["variables"]:
        try:
            variables[var["name"]] = cel_eval(var["expression"], {**act, "variables": celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): v for k, v in variables.items()})})
        except CelError:
            failed_vars.add(var["name"])
    vars_map = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})
    refused = []
    for val in vap_spec["validations"]:
        expr = val["expression"]
        if any(f"variables.{name}" in expr for name in failed_vars):
            refused.append(val["message"])
            continue
        try:
            ok = cel_eval(expr, {**act, "variables": vars_map})
        except CelError:
            ok = False
        if not isinstance(ok, (bool, celpy.celtypes.BoolType)):
            raise AssertionError(f"validation is not a bool: {expr}")
        if not ok:
            refused.append(val["message"])
    return refused


def vap_spec_for(policy: BoxPolicy) -> dict[str, Any]:
    """The VAP spec the chart ships for a policy: value variables, then the generated parts."""
    parts = bp.vap_parts()
    return {"matchConditions": parts["matchConditions"],
            "variables": bp.param_variables(policy) + parts["variables"], "validations": parts["validations"]}


def rule_of_message(message: str) -> str:
    return message.split("(box policy rule ", 1)[1].split(")")[0].split(";")[0]


def box(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentBox", "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"agent": "claude-code", "subscription": "s", "template": template}}


def cel_refused_rules(template: dict[str, Any], policy: BoxPolicy) -> set[str]:
    refused = vap_refusals(vap_spec_for(policy), box(template))
    assert refused is not None
    return {rule_of_message(m) for m in refused}


# ---------------------------------------------------------------------------------------------- the table
def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers) or [ctr()], **spec}}


def ctr(name: str = "box", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "ghcr.io/agentbox-dev/agentbox-box:0.1.0", **fields}


def sc(**fields: Any) -> dict[str, Any]:
    return {"securityContext": fields}


DEFAULT = BoxPolicy()
OPEN = BoxPolicy(service_accounts=("builder",), allow_token=True, secret_names=("team-a-npmrc",),
                 volume_types=("configMap", "emptyDir", "projected", "csi"), image_prefixes=("ghcr.io/agentbox-dev/",))

# (id, template, policy, rules refused). Paths are checked separately below.
TABLE: list[tuple[str, dict[str, Any], BoxPolicy, set[str]]] = [
    # --- allowed
    ("minimal", pod(), DEFAULT, set()),
    ("fully-restricted", pod(ctr(**sc(allowPrivilegeEscalation=False, runAsNonRoot=True, runAsUser=1000,
                                      capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                      seccompProfile={"type": "RuntimeDefault"}, procMount="Default"),
                                 ports=[{"containerPort": 8080}, {"containerPort": 80, "hostPort": 0}]),
                             securityContext={"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000,
                                              "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                                              "sysctls": [{"name": "net.ipv4.ping_group_range", "value": "0 1"}],
                                              "seLinuxOptions": {"type": "container_t", "level": "s0:c1"},
                                              "appArmorProfile": {"type": "RuntimeDefault"}},
                             hostNetwork=False, automountServiceAccountToken=False, serviceAccountName="default"),
     DEFAULT, set()),
    ("allowed-volumes", pod(ctr(volumeMounts=[{"name": "w", "mountPath": "/w"}]),
                            volumes=[{"name": "w", "emptyDir": {}}, {"name": "c", "configMap": {"name": "x"}},
                                     {"name": "d", "persistentVolumeClaim": {"claimName": "work"}},
                                     {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                                     {"name": "f", "downwardAPI": {"items": []}}]), DEFAULT, set()),
    ("init-and-sidecar", pod(ctr(), ctr("side", **sc(privileged=False)),
                             initContainers=[ctr("init", **sc(allowPrivilegeEscalation=False))]), DEFAULT, set()),
    ("apparmor-annotation-ok", {"metadata": {"annotations": {
        "container.apparmor.security.beta.kubernetes.io/box": "localhost/box", "note": "x"}}, **pod()}, DEFAULT, set()),
    ("open-policy-allows", pod(ctr(env=[{"name": "T", "valueFrom": {"secretKeyRef": {"name": "team-a-npmrc", "key": "k"}}}],
                                   envFrom=[{"secretRef": {"name": "team-a-npmrc"}}, {"configMapRef": {"name": "c"}}]),
                               serviceAccountName="builder", automountServiceAccountToken=True,
                               imagePullSecrets=[{"name": "team-a-npmrc"}],
                               volumes=[{"name": "s", "secret": {"secretName": "team-a-npmrc"}},
                                        {"name": "p", "projected": {"sources": [
                                            {"serviceAccountToken": {"path": "t"}},
                                            {"secret": {"name": "team-a-npmrc"}}, {"configMap": {"name": "c"}}]}}]),
     OPEN, set()),
    ("env-from-configmap-and-plain-env", pod(ctr(env=[{"name": "A", "value": "1"},
                                                      {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                                                 envFrom=[{"configMapRef": {"name": "c"}}])), DEFAULT, set()),
    ("policy-off", pod(ctr(**sc(privileged=True)), hostPID=True), BoxPolicy(enabled=False), set()),
    # --- refused: Pod Security restricted
    ("privileged", pod(ctr(**sc(privileged=True))), DEFAULT, {"privileged"}),
    ("privileged-init", pod(initContainers=[ctr("init", **sc(privileged=True))]), DEFAULT, {"privileged"}),
    ("privileged-ephemeral", pod(ephemeralContainers=[ctr("dbg", **sc(privileged=True))]), DEFAULT, {"privileged"}),
    ("host-namespaces", pod(hostNetwork=True, hostPID=True, hostIPC=True), DEFAULT,
     {"host-network", "host-pid", "host-ipc"}),
    ("host-path", pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]), DEFAULT, {"volume-types"}),
    ("host-port", pod(ctr(ports=[{"containerPort": 80, "hostPort": 80}])), DEFAULT, {"host-port"}),
    ("escalation", pod(ctr(**sc(allowPrivilegeEscalation=True))), DEFAULT, {"privilege-escalation"}),
    ("caps-add", pod(ctr(**sc(capabilities={"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}))), DEFAULT,
     {"capabilities-add"}),
    ("caps-drop-without-all", pod(ctr(**sc(capabilities={"drop": ["NET_RAW"]}))), DEFAULT, {"capabilities-drop"}),
    ("root", pod(ctr(**sc(runAsUser=0, runAsNonRoot=False)), securityContext={"runAsUser": 0}), DEFAULT,
     {"ctr-run-as-user", "ctr-run-as-non-root", "pod-run-as-user"}),
    ("pod-non-root-false", pod(securityContext={"runAsNonRoot": False}), DEFAULT, {"pod-run-as-non-root"}),
    ("seccomp-unconfined", pod(ctr(**sc(seccompProfile={"type": "Unconfined"})),
                               securityContext={"seccompProfile": {"type": "Unconfined"}}), DEFAULT,
     {"ctr-seccomp", "pod-seccomp"}),
    ("seccomp-without-type", pod(securityContext={"seccompProfile": {}}), DEFAULT, {"pod-seccomp-type"}),
    ("apparmor-without-type", pod(ctr(**sc(appArmorProfile={"localhostProfile": "p"}))), DEFAULT,
     {"ctr-apparmor-type"}),
    ("proc-mount", pod(ctr(**sc(procMount="Unmasked"))), DEFAULT, {"proc-mount"}),
    ("unsafe-sysctl", pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}), DEFAULT,
     {"sysctls"}),
    ("selinux", pod(ctr(**sc(seLinuxOptions={"type": "spc_t", "user": "system_u", "role": "sysadm_r"}))), DEFAULT,
     {"ctr-selinux-type", "ctr-selinux-user", "ctr-selinux-role"}),
    ("apparmor-unconfined", pod(ctr(**sc(appArmorProfile={"type": "Unconfined"})),
                                securityContext={"appArmorProfile": {"type": "Unconfined"}}), DEFAULT,
     {"ctr-apparmor", "pod-apparmor"}),
    ("apparmor-annotation-unconfined", {"metadata": {"annotations": {
        "container.apparmor.security.beta.kubernetes.io/box": "unconfined"}}, **pod()}, DEFAULT, {"apparmor-annotation"}),
    ("windows-host-process", pod(ctr(**sc(windowsOptions={"hostProcess": True})),
                                 securityContext={"windowsOptions": {"hostProcess": True}}), DEFAULT,
     {"ctr-host-process", "pod-host-process"}),
    # --- refused: what a box must not reach through the controller
    ("token", pod(automountServiceAccountToken=True), DEFAULT, {"service-account-token"}),
    ("other-service-account", pod(serviceAccountName="cluster-admin-sa"), DEFAULT, {"service-account"}),
    ("deprecated-service-account", pod(serviceAccount="builder"), DEFAULT, {"service-account-deprecated"}),
    ("other-teams-secret-volume", pod(volumes=[{"name": "s", "secret": {"secretName": "team-b-db"}}]), DEFAULT,
     {"secret-volume"}),
    ("secret-volume-not-listed", pod(volumes=[{"name": "s", "secret": {"secretName": "team-b-db"}}]), OPEN,
     {"secret-volume"}),
    ("env-secret", pod(ctr(env=[{"name": "P", "valueFrom": {"secretKeyRef": {"name": "team-b-db", "key": "p"}}}])),
     DEFAULT, {"env-secret"}),
    ("envfrom-secret", pod(ctr(envFrom=[{"secretRef": {"name": "team-b-db"}}])), DEFAULT, {"envfrom-secret"}),
    ("projected-token-and-secret", pod(volumes=[{"name": "p", "projected": {"sources": [
        {"serviceAccountToken": {"path": "t"}}, {"secret": {"name": "team-b-db"}}]}}]),
     BoxPolicy(volume_types=("projected",)), {"projected-token", "projected-secret"}),
    ("projected-not-allowed", pod(volumes=[{"name": "p", "projected": {"sources": []}}]), DEFAULT, {"volume-types"}),
    ("csi-not-allowed", pod(volumes=[{"name": "c", "csi": {"driver": "x"}}]), DEFAULT, {"volume-types"}),
    ("other-teams-pull-secret", pod(imagePullSecrets=[{"name": "team-b-registry"}]), DEFAULT, {"image-pull-secret"}),
    ("image-prefix", pod(ctr(image="docker.io/evil/box:latest")), OPEN, {"image"}),
    ("everything", pod(ctr(**sc(privileged=True, allowPrivilegeEscalation=True, capabilities={"add": ["ALL"]})),
                       hostNetwork=True, serviceAccountName="admin", automountServiceAccountToken=True,
                       volumes=[{"name": "h", "hostPath": {"path": "/var/run/docker.sock"}}]), DEFAULT,
     {"privileged", "privilege-escalation", "capabilities-add", "host-network", "service-account",
      "service-account-token", "volume-types"}),
    # --- odd values: CEL's equality (no truthiness, numbers by value)
    ("privileged-as-string", pod(ctr(**sc(privileged="false"))), DEFAULT, {"privileged"}),
    ("run-as-user-float-zero", pod(securityContext={"runAsUser": 0.0}), DEFAULT, {"pod-run-as-user"}),
    ("host-network-null", pod(hostNetwork=None), DEFAULT, {"host-network"}),
]


@pytest.mark.parametrize(("template", "policy", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_controller_check_and_admission_cel_agree(template: dict[str, Any], policy: BoxPolicy, expected: set[str]):
    python = {v.rule for v in bp.check(template, policy)}
    assert python == expected
    if policy.enabled:  # the chart renders no policy when the box policy is off
        assert cel_refused_rules(template, policy) == expected


def test_the_table_covers_every_rule():
    assert len(TABLE) >= 20
    refused = set().union(*(t[3] for t in TABLE))
    missing = {r.id for r in bp.RULES} - refused
    # Rules on the same field at another level are covered by their twin (pod-/ctr-).
    twins = {m for m in missing if m.replace("ctr-", "pod-") in refused or m.replace("pod-", "ctr-") in refused}
    assert missing - twins == set()


def test_violations_name_the_field_with_its_index():
    template = pod(ctr(), ctr("side", **sc(privileged=True), ports=[{"containerPort": 1}, {"hostPort": 22}]),
                   initContainers=[ctr("init", **sc(capabilities={"add": ["SYS_ADMIN"]}))],
                   volumes=[{"name": "w", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/"}}])
    paths = [v.path for v in bp.check(template, DEFAULT)]
    assert paths == ["spec.template.spec.containers[1].securityContext.privileged",
                     "spec.template.spec.containers[1].ports",
                     "spec.template.spec.initContainers[0].securityContext.capabilities.add",
                     "spec.template.spec.volumes[1].hostPath"]
    msg = bp.summary(bp.check(template, DEFAULT))
    assert msg.startswith("box policy: spec.template.spec.containers[1].securityContext.privileged: must be false")
    assert msg.endswith("(and 1 more)")


@pytest.mark.parametrize("template", [
    {"spec": "x"}, {"spec": {"containers": "x"}}, {"spec": {"containers": ["x"]}},
    {"spec": {"containers": [{"name": "a", "securityContext": None}]}},
    {"spec": {"containers": [{"name": "a", "securityContext": {"capabilities": {"drop": "ALL"}}}]}},
    {"spec": {"volumes": {"a": 1}}}, {"spec": {"securityContext": []}},
    {"metadata": {"annotations": ["x"]}, "spec": {"containers": [{"name": "a"}]}},
], ids=lambda t: str(t)[:60])
def test_malformed_shapes_are_refused_not_raised(template: dict[str, Any]):
    """A template the API server could not make a pod from is refused with a path (the admission
    policy's CEL errors on it, which failurePolicy Fail turns into a refusal too)."""
    found = bp.check(template, DEFAULT)
    assert found and all(v.path.startswith("spec.template") for v in found)


def test_settings_outside_the_restricted_profile_are_refused():
    with pytest.raises(ValueError, match="hostPath"):
        BoxPolicy(volume_types=("emptyDir", "hostPath"))


# ---------------------------------------------------------------------------------------------- hardening
def restricted_problems(spec: dict[str, Any]) -> list[str]:
    """An independent, strict reading of Pod Security "restricted" on a pod spec as the kubelet gets it
    (required fields must be present, as Pod Security Admission requires)."""
    out = []
    psc = spec.get("securityContext") or {}
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        out.append("host namespaces")
    if spec.get("automountServiceAccountToken") is not False:
        out.append("token not off")
    for vol in spec.get("volumes") or []:
        if set(vol) - {"name"} - {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                  "persistentVolumeClaim", "projected", "secret"}:
            out.append(f"volume {vol['name']}")
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    for c in containers:
        csc = c.get("securityContext") or {}
        if csc.get("privileged"):
            out.append("privileged")
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation not false")
        if "ALL" not in (csc.get("capabilities") or {}).get("drop", []):
            out.append(f"{c['name']}: drop ALL")
        if set((csc.get("capabilities") or {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: caps added")
        if not (csc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and "runAsNonRoot" not in csc)):
            out.append(f"{c['name']}: runAsNonRoot")
        if 0 in (csc.get("runAsUser"), psc.get("runAsUser")):
            out.append(f"{c['name']}: root")
        prof = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if prof not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccomp {prof}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{c['name']}: hostPort")
    return out


@pytest.mark.parametrize(("template", "policy"), [(t[1], t[2]) for t in TABLE if not t[3] and t[2].enabled],
                         ids=[t[0] for t in TABLE if not t[3] and t[2].enabled])
def test_allowed_templates_once_hardened_are_pod_security_restricted(template: dict[str, Any], policy: BoxPolicy):
    hardened = bp.harden(template, policy)
    problems = restricted_problems(hardened["spec"])
    if policy.allow_token and template["spec"].get("automountServiceAccountToken") is True:
        problems.remove("token not off")  # explicitly allowed by this policy
    assert problems == []
    assert restricted_problems(template["spec"]) or template is TABLE[1][1], "hardening was needed"


def test_hardening_fills_only_what_is_unset():
    template = pod(ctr(**sc(capabilities={"drop": ["ALL", "NET_RAW"]}, allowPrivilegeEscalation=False)),
                   securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})
    original = copy.deepcopy(template)
    hardened = bp.harden(template, DEFAULT)
    assert template == original, "the input is not modified"
    spec = hardened["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                                       "runAsNonRoot": True}
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL", "NET_RAW"]}
    assert bp.harden(template, BoxPolicy(enabled=False)) == original


def test_the_examples_pass_the_default_policy():
    found = 0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "AgentBox":
                found += 1
                template = doc["spec"]["template"]
                assert bp.check(template, DEFAULT) == [], path.name
                assert cel_refused_rules(template, DEFAULT) == set(), path.name
                assert restricted_problems(bp.harden(template, DEFAULT)["spec"]) == [], path.name
    assert found >= 2


# ---------------------------------------------------------------------------------------------- the VAP file
def test_generated_policy_file_is_up_to_date():
    assert GENERATED.read_text() == generated_text(), (
        "charts/agentbox-controller/files/box-policy.yaml drifted from controller/domain/boxpolicy.py: "
        "run `.venv/bin/python tests/test_box_policy.py`")


def test_updates_that_keep_the_template_are_not_checked():
    """kopf's finalizer and annotation patches on a box admitted under an older policy (or one being
    deleted) must go through; a changed template is checked."""
    spec = vap_spec_for(DEFAULT)
    bad = box(pod(ctr(**sc(privileged=True))))
    touched = copy.deepcopy(bad)
    touched["metadata"]["finalizers"] = ["agentbox.dev/finalizer"]
    assert vap_refusals(spec, touched, old=bad, operation="UPDATE") is None
    good = box(pod())
    assert vap_refusals(spec, bad, old=good, operation="UPDATE")
    assert vap_refusals(spec, good, old=bad, operation="UPDATE") == []
    assert vap_refusals(spec, bad, operation="CREATE")


def test_security_doc_describes_the_shipped_policy():
    """docs/security.md names every boxPolicy value, the default volume types, what the controller fills
    in, and the condition reason; the rules' messages point at values that exist."""
    from controller import constants as C

    text = (ROOT / "docs" / "security.md").read_text()
    values = yaml.safe_load((ROOT / "charts" / "agentbox-controller" / "values.yaml").read_text())["boxPolicy"]
    for key in values:
        if key not in ("enabled", "admission"):
            assert f"`boxPolicy.{key}" in text, key
    assert ", ".join(f"`{t}`" for t in bp.DEFAULT_VOLUME_TYPES) in text
    for phrase in ("automountServiceAccountToken: false", "runAsNonRoot: true", "{type: RuntimeDefault}",
                   "allowPrivilegeEscalation: false", "capabilities.drop: [ALL]", C.R_POLICY_VIOLATION,
                   "validationActions: [Deny]"):
        assert phrase in text, phrase
    for rule in bp.RULES:
        for ref in re.findall(r"boxPolicy\.(\w+)", rule.message):
            assert ref in values, (rule.id, ref)


# ---------------------------------------------------------------------------------------------- the chart
def test_the_chart_ships_the_policy_the_controller_runs():
    """Values -> (the controller's settings, the rendered VAP): both judge the table alike."""
    from test_chart import by_kind, env_of, one, render

    from controller.service.boxes import box_policy
    from controller.settings import Settings

    values = {"boxPolicy": {"allowedServiceAccounts": ["builder"], "allowServiceAccountToken": True,
                            "allowedSecretNames": ["team-a-npmrc"], "allowedImagePrefixes": ["ghcr.io/agentbox-dev/"],
                            "allowedVolumeTypes": ["configMap", "emptyDir", "projected", "csi"]}}
    for vals, expected in (({}, DEFAULT), (values, OPEN)):
        docs = render(vals)
        policy = box_policy(Settings.from_env(env_of(docs)))
        assert policy == expected
        vap = box_vap(docs, "ValidatingAdmissionPolicy")
        assert vap["spec"]["variables"] == bp.param_variables(policy) + bp.vap_parts()["variables"]
        assert vap["spec"]["validations"] == bp.vap_parts()["validations"]
        assert vap["spec"]["matchConditions"] == bp.vap_parts()["matchConditions"]
        assert vap["spec"]["failurePolicy"] == "Fail"
        assert vap["spec"]["matchConstraints"]["resourceRules"] == [{
            "apiGroups": ["agentbox.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
            "resources": ["agentboxes"]}]
        binding = box_vap(docs, "ValidatingAdmissionPolicyBinding")
        assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
        for name, template, pol, refused in TABLE:
            if pol == expected:
                got = vap_refusals(vap["spec"], box(template))
                assert {rule_of_message(m) for m in got or []} == refused, name
                assert {v.rule for v in bp.check(template, policy)} == refused, name

    warn = render({"boxPolicy": {"admission": {"validationActions": ["Warn", "Audit"]}}})
    assert box_vap(warn, "ValidatingAdmissionPolicyBinding")["spec"]["validationActions"] == ["Warn", "Audit"]
    for off in ({"boxPolicy": {"enabled": False}}, {"boxPolicy": {"admission": {"enabled": False}}}):
        docs = render(off)
        assert [d for d in by_kind(docs, "ValidatingAdmissionPolicy") + by_kind(docs, "ValidatingAdmissionPolicyBinding")
                if d["metadata"]["name"].endswith("-box-policy")] == []
    assert box_policy(Settings.from_env(env_of(render({"boxPolicy": {"enabled": False}})))).enabled is False


def box_vap(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The box policy's object of `kind` (the chart also has the Subscription reserve warning's)."""
    from test_chart import by_kind

    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith("-box-policy")]
    assert len(found) == 1, [d["metadata"]["name"] for d in by_kind(docs, kind)]
    return found[0]


def test_chart_values_refuse_volume_types_outside_the_restricted_profile():
    import helm_python as helm

    chart = helm.Chart.load(GENERATED.parents[1])
    for bad in ({"boxPolicy": {"allowedVolumeTypes": ["hostPath"]}}, {"boxPolicy": {"allowedVolumeTypes": ["secret"]}},
                {"boxPolicy": {"admission": {"validationActions": ["Allow"]}}}):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


if __name__ == "__main__":
    GENERATED.parent.mkdir(parents=True, exist_ok=True)
    GENERATED.write_text(generated_text())
    print(f"rewrote {GENERATED.relative_to(ROOT)}")
