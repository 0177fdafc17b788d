"""Shape checks of an AgentBox's `spec.template` (a free-form object in the CRD) and of
`spec.container`. Pure.

The CRD keeps the pod template open (`x-kubernetes-preserve-unknown-fields`), so the API server
accepts any JSON there. Before the controller builds a pod from it, every part it reads or extends
(metadata labels and annotations, containers, their env and volume mounts, volumes) must have the
shape of a Kubernetes PodTemplateSpec, and the names must be what the API server would accept: a
malformed template becomes a condition and a Warning naming the field, never an exception in the
reconcile handler, and never a pod the API server refuses over and over.

The pod security rules (what a well-formed template may ask for) are a separate check.
"""

from __future__ import annotations

import re
from typing import Any

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_BASE = "spec.template"


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _label(value: Any, field: str) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{field}: must be a non-empty string, not {_type(value)}"
    if len(value) > 63 or not _DNS_LABEL.match(value):
        return (f"{field}: {value[:70]!r} is not a valid name (lower-case letters, digits and '-', "
                "starting and ending with a letter or digit, at most 63 characters)")
    return None


def _string_map(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"{field}: must be an object of strings, not {_type(value)}"
    for key, val in value.items():
        if not isinstance(val, str):
            return f"{field}.{key}: must be a string, not {_type(val)}"
    return None


def _list_of_objects(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, list):
        return f"{field}: must be a list, not {_type(value)}"
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return f"{field}[{i}]: must be an object, not {_type(item)}"
    return None


def _string_list(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, list):
        return f"{field}: must be a list of strings, not {_type(value)}"
    for i, item in enumerate(value):
        if not isinstance(item, str):
            return f"{field}[{i}]: must be a string, not {_type(item)}"
    return None


def _container(ctr: dict[str, Any], field: str) -> str | None:
    problem = _label(ctr.get("name"), f"{field}.name")
    if problem:
        return problem
    image = ctr.get("image")
    if image is None:
        return f"{field}.image: required"
    if not isinstance(image, str) or not image.strip():
        return f"{field}.image: must be a non-empty string, not {_type(image)}"
    for key in ("command", "args"):
        problem = _string_list(ctr.get(key), f"{field}.{key}")
        if problem:
            return problem
    env = ctr.get("env")
    problem = _list_of_objects(env, f"{field}.env")
    if problem:
        return problem
    for i, var in enumerate(env or []):
        name = var.get("name")
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            return f"{field}.env[{i}].name: must be a valid environment variable name"
        if "value" in var and var["value"] is not None and not isinstance(var["value"], str):
            return f"{field}.env[{i}].value: must be a string, not {_type(var['value'])}"
    mounts = ctr.get("volumeMounts")
    problem = _list_of_objects(mounts, f"{field}.volumeMounts")
    if problem:
        return problem
    for i, mount in enumerate(mounts or []):
        if not isinstance(mount.get("name"), str) or not mount.get("name"):
            return f"{field}.volumeMounts[{i}].name: required (a string)"
        if not isinstance(mount.get("mountPath"), str) or not mount["mountPath"].startswith("/"):
            return f"{field}.volumeMounts[{i}].mountPath: required (an absolute path)"
    return None


def template_problem(template: Any) -> str | None:
    """The first shape problem of `spec.template`, as a message naming the field; None when the
    template can make a pod.

    Args:
        template: the AgentBox's `spec.template` as stored (any JSON value).
    Returns:
        e.g. "spec.template.spec.containers[0].name: must be a non-empty string, not a number".
    """
    if not isinstance(template, dict):
        return f"{_BASE}: must be an object, not {_type(template)}"
    meta = template.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            return f"{_BASE}.metadata: must be an object, not {_type(meta)}"
        for key in ("labels", "annotations"):
            problem = _string_map(meta.get(key), f"{_BASE}.metadata.{key}")
            if problem:
                return problem
    spec = template.get("spec")
    if spec is None:
        return f"{_BASE}.spec: required (a pod spec with at least one container)"
    if not isinstance(spec, dict):
        return f"{_BASE}.spec: must be an object, not {_type(spec)}"
    containers = spec.get("containers")
    if containers is None:
        return f"{_BASE}.spec.containers: required (at least one container)"
    if not isinstance(containers, list):
        return f"{_BASE}.spec.containers: must be a list, not {_type(containers)}"
    if not containers:
        return f"{_BASE}.spec.containers: must list at least one container"
    names: set[str] = set()
    for group in ("containers", "initContainers"):
        items = spec.get(group)
        problem = _list_of_objects(items, f"{_BASE}.spec.{group}")
        if problem:
            return problem
        for i, ctr in enumerate(items or []):
            problem = _container(ctr, f"{_BASE}.spec.{group}[{i}]")
            if problem:
                return problem
            if ctr["name"] in names:
                return f"{_BASE}.spec.{group}[{i}].name: duplicate container name {ctr['name']!r}"
            names.add(ctr["name"])
    volumes = spec.get("volumes")
    problem = _list_of_objects(volumes, f"{_BASE}.spec.volumes")
    if problem:
        return problem
    seen: set[str] = set()
    for i, vol in enumerate(volumes or []):
        problem = _label(vol.get("name"), f"{_BASE}.spec.volumes[{i}].name")
        if problem:
            return problem
        if vol["name"] in seen:
            return f"{_BASE}.spec.volumes[{i}].name: duplicate volume name {vol['name']!r}"
        seen.add(vol["name"])
    return None


def container_problem(template: dict[str, Any], wanted: str | None) -> str | None:
    """Why `spec.container` names no container of a well-formed template; None when it does (or
    is unset: the first container runs tmux)."""
    if not wanted:
        return None
    names = [c.get("name") for c in (template.get("spec") or {}).get("containers") or []]
    if wanted in names:
        return None
    return (f"spec.container: {wanted[:70]!r} is not a container of spec.template.spec.containers "
            f"(containers: {', '.join(repr(n) for n in names)})")
