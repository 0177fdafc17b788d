"""Render the CRDs (apiextensions.k8s.io/v1) from the pydantic models in `controller.models`.

`render_crds()` returns `{file name: CRD dict}`; `agentbox-controller crds --out crds/` writes
them. The committed `crds/*.yaml` (also copied into the Helm chart) are checked against this
output by a test, so the models stay the one source of truth.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from controller import constants as C
from controller.models import AgentBoxSpec, AgentBoxStatus, SubscriptionSpec, SubscriptionStatus

_DROP_KEYS = {"title"}


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 schema node.

    Inlines `$ref`s, collapses `anyOf: [X, null]` to X, maps free-form objects to
    `x-kubernetes-preserve-unknown-fields`, and drops keys the apiserver rejects.
    """
    node = copy.deepcopy(schema)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        merged = {**_structural(target, defs), **{k: v for k, v in node.items() if k not in _DROP_KEYS}}
        return merged
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf with {len(options)} non-null options structurally")
        base = _structural(options[0], defs)
        for key, value in node.items():
            if key not in _DROP_KEYS and not (key == "default" and value is None):
                base[key] = value
        return base
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "properties":
            out["properties"] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out["additionalProperties"] = _structural(value, defs)
        elif key == "default" and (value == [] or value == {}):
            continue  # defaults of collections are applied by the controller, keep the schema small
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def model_schema(model: type) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of a pydantic model (API field names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    defs = raw.pop("$defs", {})
    return _structural(raw, defs)


_SELECTED_RULE = {
    "rule": "!has(self.whenAgentStops) || !has(self.whenAgentStops.rotation) || "
    "!has(self.whenAgentStops.rotation.group) || self.whenAgentStops.rotation.group != 'Selected' || "
    "(has(self.subscription) && has(self.whenAgentStops.rotation.subscriptions) && "
    "self.subscription in self.whenAgentStops.rotation.subscriptions && "
    "self.whenAgentStops.rotation.subscriptions.exists(s, s != self.subscription))",
    "message": "rotation group Selected must list spec.subscription and at least one other subscription",
    "fieldPath": ".whenAgentStops.rotation.subscriptions",
}


def _crd(kind: str, plural: str, short: str, spec_model: type, status_model: type,
         columns: list[dict[str, Any]], spec_rules: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec_schema = model_schema(spec_model)
    if spec_rules:
        spec_schema["x-kubernetes-validations"] = spec_rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{C.GROUP}", "labels": {C.LABEL_NAME: "agentbox-controller"}},
        "spec": {
            "group": C.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": [C.CATEGORY],
            },
            "versions": [{
                "name": C.VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema,
                        "status": model_schema(status_model),
                    },
                    "required": ["spec"],
                }},
            }],
        },
    }


def render_crds() -> dict[str, dict[str, Any]]:
    """Return `{file name: CRD object}` for both resources."""
    agentbox = _crd(
        C.AGENTBOX_KIND, C.AGENTBOX_PLURAL, "abox", AgentBoxSpec, AgentBoxStatus,
        [
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Agent", "type": "string", "jsonPath": ".spec.agent"},
            {"name": "Subscription", "type": "string", "jsonPath": ".status.subscription"},
            {"name": "Next", "type": "string", "jsonPath": ".status.nextSubscription"},
            {"name": "State", "type": "string", "jsonPath": ".status.state"},
            {"name": "Resume-At", "type": "string", "jsonPath": ".status.resumeAt"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Pod", "type": "string", "jsonPath": ".status.pod", "priority": 1},
            {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
             "priority": 1},
        ],
        spec_rules=[_SELECTED_RULE],
    )
    subscription = _crd(
        C.SUBSCRIPTION_KIND, C.SUBSCRIPTION_PLURAL, "asub", SubscriptionSpec, SubscriptionStatus,
        [
            {"name": "Provider", "type": "string", "jsonPath": ".spec.provider"},
            {"name": "State", "type": "string", "jsonPath": ".status.state"},
            {"name": "5h", "type": "number", "jsonPath": ".status.windows.fiveHour.utilization"},
            # A string, not `date`: kubectl shows a future `date` as <invalid>.
            {"name": "5h-Resets", "type": "string", "jsonPath": ".status.windows.fiveHour.resetsAt"},
            {"name": "Weekly", "type": "number", "jsonPath": ".status.windows.weekly.utilization"},
            {"name": "Reserved-Until", "type": "string", "jsonPath": ".status.reservedUntil"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Account", "type": "string", "jsonPath": ".spec.displayName", "priority": 1},
        ],
    )
    return {"agentboxes.yaml": agentbox, "subscriptions.yaml": subscription}


def dump_crd(crd: dict[str, Any]) -> str:
    """YAML text of one CRD, stable across runs."""
    header = "# Generated by `agentbox-controller crds` from controller/models.py. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)


def write_crds(out_dir: Path) -> list[Path]:
    """Write every CRD as YAML into `out_dir`; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, crd in render_crds().items():
        path = out_dir / name
        path.write_text(dump_crd(crd))
        written.append(path)
    return written
