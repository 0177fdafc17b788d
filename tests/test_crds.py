"""The CRDs: committed YAML equals what the models render, the schemas are structural, names and
printer columns are as documented (DESIGN.md §2), the examples validate, bad objects are refused,
and the pydantic models agree with the schemas."""

from __future__ import annotations

import copy
import pathlib
from typing import Any, Iterator, get_args

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from controller import constants as C
from controller import models
from controller.agents.registry import subscription_agents
from controller.crdgen import dump_crd, render_crds
from controller.models import AgentBoxSpec, AgentBoxStatus, SubscriptionSpec, SubscriptionStatus
from agentbox_sim.kube import _openapi_to_jsonschema

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
CRD_DIRS = [ROOT / "crds", ROOT / "charts" / "agentbox-controller" / "files" / "crds"]
RENDERED = render_crds()
KINDS = {C.AGENTBOX_KIND: "agentboxes.yaml", C.SUBSCRIPTION_KIND: "subscriptions.yaml"}
SPEC_MODELS = {C.AGENTBOX_KIND: AgentBoxSpec, C.SUBSCRIPTION_KIND: SubscriptionSpec}

# Keys of apiextensions.k8s.io/v1 JSONSchemaProps: anything else (e.g. pydantic's `const`, `$defs`)
# is refused by the apiserver.
JSON_SCHEMA_PROPS = {
    "id", "$schema", "$ref", "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum",
    "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems",
    "multipleOf", "enum", "maxProperties", "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not",
    "properties", "additionalProperties", "patternProperties", "dependencies", "additionalItems", "definitions",
    "externalDocs", "example", "nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys", "x-kubernetes-list-type", "x-kubernetes-map-type",
    "x-kubernetes-validations",
}


def openapi_schema(kind: str) -> dict[str, Any]:
    return RENDERED[KINDS[kind]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def validator(kind: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(_openapi_to_jsonschema(openapi_schema(kind)))


def schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below (and including) `node`, with a readable path."""
    yield path or "<root>", node
    for name, sub in (node.get("properties") or {}).items():
        yield from schema_nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{*}}")


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("apiVersion") == C.API_VERSION:
                out.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


EXAMPLES = example_objects()


# ----------------------------------------------------------------------------- drift
@pytest.mark.parametrize("directory", CRD_DIRS, ids=lambda d: str(d.relative_to(ROOT)))
@pytest.mark.parametrize("name", sorted(RENDERED))
def test_committed_crds_equal_the_rendered_models(directory: pathlib.Path, name: str):
    path = directory / name
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `make crds`"
    text = path.read_text()
    assert yaml.safe_load(text) == RENDERED[name], (
        f"{path.relative_to(ROOT)} differs from controller/models.py: run `make crds`")
    assert text == dump_crd(RENDERED[name]), f"{path.relative_to(ROOT)} is not formatted as generated: run `make crds`"


@pytest.mark.parametrize("directory", CRD_DIRS, ids=lambda d: str(d.relative_to(ROOT)))
def test_no_stale_crd_files(directory: pathlib.Path):
    assert sorted(p.name for p in directory.glob("*.yaml")) == sorted(RENDERED), (
        f"{directory.relative_to(ROOT)} holds other CRD files than the models render: run `make crds`")


# ----------------------------------------------------------------------------- structural
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_is_structural(kind: str):
    problems = []
    for path, node in schema_nodes(openapi_schema(kind)):
        for bad in ("$ref", "anyOf", "oneOf", "allOf", "not", "$defs", "definitions", "const"):
            if bad in node:
                problems.append(f"{path}: has {bad}")
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields") \
                and not node.get("x-kubernetes-int-or-string"):
            problems.append(f"{path}: no type")
        if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields") and path not in (".metadata",):
            problems.append(f"{path}: object without properties would be pruned to {{}}")
        unknown = set(node) - JSON_SCHEMA_PROPS
        if unknown:
            problems.append(f"{path}: keys the apiserver refuses: {sorted(unknown)}")
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in node and not isinstance(node[key], bool):
                problems.append(f"{path}: {key} must be a boolean in OpenAPI v3")
        if "default" in node and node["default"] is None and not node.get("nullable"):
            problems.append(f"{path}: default null on a non-nullable field")
        if "required" in node:
            missing = set(node["required"]) - set(node.get("properties") or {})
            if missing:
                problems.append(f"{path}: required names unknown properties {sorted(missing)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_defaults_validate_against_their_own_node(kind: str):
    """The apiserver refuses a CRD whose defaults do not validate (structural schema rule)."""
    for path, node in schema_nodes(openapi_schema(kind)):
        if "default" in node:
            sub = {k: v for k, v in node.items() if k != "default"}
            errors = list(jsonschema.Draft4Validator(_openapi_to_jsonschema(sub)).iter_errors(node["default"]))
            assert not errors, f"{path}: default {node['default']!r} is invalid: {errors[0].message}"


# ----------------------------------------------------------------------------- names and columns
def test_names_short_names_and_categories():
    box = RENDERED["agentboxes.yaml"]["spec"]
    sub = RENDERED["subscriptions.yaml"]["spec"]
    assert box["group"] == sub["group"] == C.GROUP
    assert box["scope"] == sub["scope"] == "Namespaced"
    assert box["names"]["shortNames"] == ["abox"]
    assert sub["names"]["shortNames"] == ["asub"]
    for crd in (box, sub):
        assert "sub" not in crd["names"]["shortNames"], "`sub` belongs to OLM's subscriptions.operators.coreos.com"
        assert crd["names"]["categories"] == [C.CATEGORY]
        # A category equal to a name of either kind would make `kubectl get <it>` list both kinds.
        for other in (box, sub):
            names = other["names"]
            assert C.CATEGORY not in {names["singular"], names["plural"], names["kind"].lower(), *names["shortNames"]}
        assert [v["name"] for v in crd["versions"]] == [C.VERSION]
        assert crd["versions"][0]["subresources"] == {"status": {}}
    assert RENDERED["agentboxes.yaml"]["metadata"]["name"] == f"{C.AGENTBOX_PLURAL}.{C.GROUP}"
    assert RENDERED["subscriptions.yaml"]["metadata"]["name"] == f"{C.SUBSCRIPTION_PLURAL}.{C.GROUP}"


def test_agentbox_printer_columns():
    cols = RENDERED["agentboxes.yaml"]["spec"]["versions"][0]["additionalPrinterColumns"]
    default_cols = [c["name"] for c in cols if not c.get("priority")]
    assert default_cols == ["Ready", "Agent", "Subscription", "Next", "State", "Resume-At", "Age"]
    by_name = {c["name"]: c for c in cols}
    assert by_name["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    assert by_name["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert by_name["Reason"]["priority"] == 1


def test_subscription_printer_columns_show_the_five_hour_reset():
    cols = RENDERED["subscriptions.yaml"]["spec"]["versions"][0]["additionalPrinterColumns"]
    default_cols = [c["name"] for c in cols if not c.get("priority")]
    assert default_cols == ["Provider", "State", "5h", "5h-Resets", "Weekly", "Reserved-Until", "Age"]
    reset = next(c for c in cols if c["name"] == "5h-Resets")
    assert reset["type"] == "string", "kubectl prints a future `date` column as <invalid>"


def test_conditions_and_tabs_are_list_maps_and_instants_are_date_times():
    """Conditions are keyed by type and tabs by name (server-side apply merges them by key; the API server
    refuses duplicates); every instant is `format: date-time` (the API server refuses other strings)."""
    for kind in KINDS:
        status = openapi_schema(kind)["properties"]["status"]["properties"]
        assert status["conditions"]["x-kubernetes-list-type"] == "map"
        assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
        assert "type" in status["conditions"]["items"]["required"]
        assert status["conditions"]["items"]["properties"]["lastTransitionTime"]["format"] == "date-time"
    tabs = openapi_schema(C.AGENTBOX_KIND)["properties"]["status"]["properties"]["tabs"]
    assert tabs["x-kubernetes-list-map-keys"] == ["name"] and "name" in tabs["items"]["required"]
    instants = [path for kind in KINDS for path, node in schema_nodes(openapi_schema(kind))
                if node.get("format") == "date-time"]
    described = [path for kind in KINDS for path, node in schema_nodes(openapi_schema(kind))
                 if "RFC 3339" in (node.get("description") or "")]
    assert len(instants) >= 9 and sorted(instants) == sorted(described)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_printer_columns_point_at_schema_fields(kind: str):
    schema = openapi_schema(kind)
    for col in RENDERED[KINDS[kind]]["spec"]["versions"][0]["additionalPrinterColumns"]:
        path, _, cond = col["jsonPath"].partition('.conditions[?(@.type=="')
        if cond:  # a condition's field: .status.conditions[?(@.type=="Ready")].status
            path = f"{path}.conditions[].{cond.split('.', 1)[1]}"
        parts = path.lstrip(".").split(".")
        if parts[0] == "metadata":
            continue
        node = schema
        for part in parts:
            if part.endswith("[]"):
                part = part[:-2]
                assert part in (node.get("properties") or {}), f"column {col['name']}: {col['jsonPath']}"
                node = node["properties"][part]["items"]
                continue
            assert part in (node.get("properties") or {}), f"column {col['name']}: {col['jsonPath']} not in the schema"
            node = node["properties"][part]
        expected = {"string": "string", "number": "number", "integer": "integer", "date": "string"}[col["type"]]
        assert node["type"] == expected, f"column {col['name']} is {col['type']} but the field is {node['type']}"


# ----------------------------------------------------------------------------- examples
def test_examples_cover_both_kinds():
    kinds = {obj["kind"] for _, obj in EXAMPLES}
    assert kinds == set(KINDS)


@pytest.mark.parametrize("obj", [o for _, o in EXAMPLES], ids=[n for n, _ in EXAMPLES])
def test_example_validates_against_its_crd(obj: dict[str, Any]):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(obj["kind"]).iter_errors(obj)]
    assert not errors, errors


@pytest.mark.parametrize("obj", [o for _, o in EXAMPLES], ids=[n for n, _ in EXAMPLES])
def test_example_parses_with_the_model_and_round_trips(obj: dict[str, Any]):
    model = SPEC_MODELS[obj["kind"]]
    spec = model.model_validate(obj["spec"])
    # What the controller would write back (defaults filled in) is still a valid object.
    dumped = {**obj, "spec": spec.dump()}
    assert not list(validator(obj["kind"]).iter_errors(dumped))
    assert model.model_validate(dumped["spec"]) == spec


def test_example_boxes_name_example_subscriptions_of_the_right_provider():
    subs = {o["metadata"]["name"]: o["spec"]["provider"] for _, o in EXAMPLES if o["kind"] == C.SUBSCRIPTION_KIND}
    for _, box in EXAMPLES:
        if box["kind"] != C.AGENTBOX_KIND:
            continue
        agent, sub = box["spec"]["agent"], box["spec"].get("subscription")
        if agent in subscription_agents():
            assert sub in subs, f"{box['metadata']['name']}: subscription {sub!r} is not among the examples"
            assert subs[sub] == subscription_agents()[agent]


# ----------------------------------------------------------------------------- invalid objects
GOOD_SUB = {
    "apiVersion": C.API_VERSION, "kind": C.SUBSCRIPTION_KIND, "metadata": {"name": "s"},
    "spec": {"provider": "anthropic", "credentialsSecretRef": {"name": "login", "key": "credentials.json"},
             "reserve": {"fiveHourPercent": 20, "weeklyPercent": 0}},
}
GOOD_BOX = {
    "apiVersion": C.API_VERSION, "kind": C.AGENTBOX_KIND, "metadata": {"name": "b"},
    "spec": {"agent": "claude-code", "subscription": "s",
             "template": {"spec": {"containers": [{"name": "box", "image": "x"}]}}},
}


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `obj` with the dotted `path` set to `value` (`...` removes it)."""
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return out


INVALID = [
    ("reserve 96", GOOD_SUB, "spec.reserve.fiveHourPercent", 96, "spec.reserve.fiveHourPercent"),
    ("weekly reserve 96", GOOD_SUB, "spec.reserve.weeklyPercent", 96, "spec.reserve.weeklyPercent"),
    ("negative reserve", GOOD_SUB, "spec.reserve.fiveHourPercent", -1, "spec.reserve.fiveHourPercent"),
    ("fractional reserve", GOOD_SUB, "spec.reserve.fiveHourPercent", 12.5, "spec.reserve.fiveHourPercent"),
    ("unknown provider", GOOD_SUB, "spec.provider", "google", "spec.provider"),
    ("missing secret ref", GOOD_SUB, "spec.credentialsSecretRef", ..., "spec"),
    ("empty secret name", GOOD_SUB, "spec.credentialsSecretRef.name", "", "spec.credentialsSecretRef.name"),
    ("missing spec", GOOD_SUB, "spec", ..., ""),
    ("unknown agent", GOOD_BOX, "spec.agent", "cursor", "spec.agent"),
    ("missing template", GOOD_BOX, "spec.template", ..., "spec"),
    ("template not an object", GOOD_BOX, "spec.template", "pod", "spec.template"),
    ("empty subscription", GOOD_BOX, "spec.subscription", "", "spec.subscription"),
    ("bad rotation group", GOOD_BOX, "spec.whenAgentStops", {"rotation": {"group": "Some"}},
     "spec.whenAgentStops.rotation.group"),
    ("empty pattern", GOOD_BOX, "spec.detection", {"patterns": [{"regex": ""}]}, "spec.detection.patterns.0.regex"),
    ("unknown pattern kind", GOOD_BOX, "spec.detection", {"patterns": [{"regex": "x", "kind": "quota"}]},
     "spec.detection.patterns.0.kind"),
]


@pytest.mark.parametrize("obj", [GOOD_SUB, GOOD_BOX], ids=["subscription", "box"])
def test_the_good_base_objects_are_valid(obj: dict[str, Any]):
    validator(obj["kind"]).validate(obj)
    SPEC_MODELS[obj["kind"]].model_validate(obj["spec"])


@pytest.mark.parametrize("base,path,value,field", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_objects_are_refused_by_schema_and_model(base, path, value, field):
    obj = _with(base, path, value)
    errors = list(validator(obj["kind"]).iter_errors(obj))
    assert errors, "the CRD schema accepts it"
    assert any(".".join(map(str, e.absolute_path)) == field for e in errors), \
        [(".".join(map(str, e.absolute_path)), e.message) for e in errors]
    if "spec" in obj:
        with pytest.raises(ValidationError):
            SPEC_MODELS[obj["kind"]].model_validate(obj["spec"])


# ----------------------------------------------------------------------------- models and schemas agree
def test_enums_agree_with_the_models():
    box = openapi_schema(C.AGENTBOX_KIND)["properties"]
    sub = openapi_schema(C.SUBSCRIPTION_KIND)["properties"]
    # The agents and providers of DESIGN.md §2; the states follow the models' Literals.
    assert set(box["spec"]["properties"]["agent"]["enum"]) == set(get_args(models.AgentName)) == {
        "claude-code", "codex", "opencode", "gemini-cli", "claude-wrapper", "shell"}
    assert set(sub["spec"]["properties"]["provider"]["enum"]) == set(get_args(models.Provider)) == {
        "anthropic", "openai"}
    assert set(box["status"]["properties"]["state"]["enum"]) == set(get_args(models.BoxState))
    assert {"Pending", "Running", "RateLimited", "NeedsAttention", "Error"} <= set(get_args(models.BoxState))
    assert set(sub["status"]["properties"]["state"]["enum"]) == set(get_args(models.SubscriptionState)) == {
        "Available", "Exhausted", "Reserved", "Disconnected", "Unknown"}
    tab_state = box["status"]["properties"]["tabs"]["items"]["properties"]["state"]
    assert set(tab_state["enum"]) == set(get_args(models.TabStateName))
    reserve = sub["spec"]["properties"]["reserve"]["properties"]
    for key in ("fiveHourPercent", "weeklyPercent"):
        assert (reserve[key]["type"], reserve[key]["minimum"], reserve[key]["maximum"]) == ("integer", 0, 95)


def test_full_statuses_written_by_the_controller_validate():
    cond = {"type": "Ready", "status": "True", "reason": "Reconciled", "message": "Pod running",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}
    box_status = AgentBoxStatus.model_validate({
        "subscription": "a", "nextSubscription": "b", "state": "RateLimited", "resumeAt": "2026-01-01T05:00:10Z",
        "pod": "box", "observedGeneration": 3, "conditions": [cond],
        "tabs": [{"name": "main", "id": "@1", "state": "RateLimited", "resetsAt": "2026-01-01T05:00:00Z",
                  "resumeAt": "2026-01-01T05:00:10Z", "detectedBy": "claude-code:limit", "message": "waiting",
                  "lastInputAt": "2026-01-01T04:00:00Z", "limitKey": "k", "sentFor": "k0",
                  "sentAt": "2026-01-01T00:00:00Z", "attempts": 1}],
    }).dump()
    validator(C.AGENTBOX_KIND).validate({**GOOD_BOX, "status": box_status})
    sub_status = SubscriptionStatus.model_validate({
        "windows": {"fiveHour": {"utilization": 101.5, "resetsAt": "2026-01-01T05:00:00Z"},
                    "weekly": {"utilization": 40}},
        "readAt": "2026-01-01T00:00:00Z", "state": "Reserved", "reservedUntil": "2026-01-01T05:00:00Z",
        "threshold": "Boxes stop at 80% of the 5-hour limit; the weekly limit has no reserve.",
        "message": "m", "conditions": [{**cond, "type": "CredentialsValid"}], "observedGeneration": 1,
    }).dump()
    validator(C.SUBSCRIPTION_KIND).validate({**GOOD_SUB, "status": sub_status})


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_model_field_is_in_the_schema_and_back(kind: str):
    """Spec and status properties equal the models' API field names (no hand edits, no gaps)."""
    props = openapi_schema(kind)["properties"]
    spec_model = SPEC_MODELS[kind]
    status_model = AgentBoxStatus if kind == C.AGENTBOX_KIND else SubscriptionStatus
    for part, model in (("spec", spec_model), ("status", status_model)):
        aliases = {f.alias or n for n, f in model.model_fields.items()}
        assert set(props[part]["properties"]) == aliases
        required = {f.alias or n for n, f in model.model_fields.items() if f.is_required()}
        assert set(props[part].get("required") or []) == required
