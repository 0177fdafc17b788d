"""The docs stay in step with the code: docs/configuration.md documents every CRD field (from the models'
generated CRDs) with its default, every annotation and every operator setting; docs/operations.md lists
every metric and every alert; docs/troubleshooting.md names the conditions.

The reference tables of docs/configuration.md are generated between `<!-- generated:NAME -->` markers:
    .venv/bin/python tests/test_docs.py        # rewrite them after changing controller/models.py or settings.py
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # when run as a script
    sys.path.insert(0, str(ROOT))

from controller import constants as C  # noqa: E402
from controller import metrics  # noqa: E402
from controller.crdgen import render_crds  # noqa: E402
from controller.settings import Settings  # noqa: E402

pytestmark = pytest.mark.unit

DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
CHART_VALUES = ROOT / "charts" / "agentbox-controller" / "values.yaml"


# ---------------------------------------------------------------------------------------------- generation
def _fields(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any], bool]]:
    """(path, schema, required) for every field below `node`, depth first."""
    out: list[tuple[str, dict[str, Any], bool]] = []
    required = set(node.get("required") or [])
    for name, sub in (node.get("properties") or {}).items():
        p = f"{path}.{name}"
        out.append((p, sub, name in required))
        if sub.get("properties"):
            out.extend(_fields(sub, p))
        items = sub.get("items")
        if isinstance(items, dict) and items.get("properties"):
            out.extend(_fields(items, p + "[]"))
    return out


def _type(sub: dict[str, Any]) -> str:
    typ = sub.get("type", "")
    if typ == "array" and isinstance(sub.get("items"), dict):
        return f"[]{sub['items'].get('type', '')}"
    return typ


def _constraints(sub: dict[str, Any]) -> str:
    out = []
    if "enum" in sub:
        out.append(" \\| ".join(f"`{e}`" for e in sub["enum"]))
    for key, label in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
                       ("minItems", "items ≥"), ("maxItems", "items ≤")):
        if key in sub:
            out.append(f"{label} {sub[key]}")
    if sub.get("x-kubernetes-preserve-unknown-fields"):
        out.append("free-form")
    return "; ".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def field_table(kind: str, part: str) -> str:
    """Markdown table of `spec` or `status` fields of a kind."""
    crd = next(c for c in render_crds().values() if c["spec"]["names"]["kind"] == kind)
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part]
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for path, sub, required in _fields(root, part):
        default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ("**required**" if required else "—")
        meaning = _cell(sub.get("description", ""))
        extra = _constraints(sub)
        if extra:
            meaning += f" ({extra})"
        rows.append(f"| `{path}` | {_type(sub)} | {default} | {meaning} |")
    return "\n".join(rows)


def cel_rules(kind: str) -> str:
    crd = next(c for c in render_crds().values() if c["spec"]["names"]["kind"] == kind)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = spec.get("x-kubernetes-validations") or []
    if not rules:
        return "No cross-field rules."
    return "\n".join(f"* {r['message']} (CEL, checked by the API server; field `spec{r.get('fieldPath', '')}`)."
                     for r in rules)


def printer_columns(kind: str) -> str:
    crd = next(c for c in render_crds().values() if c["spec"]["names"]["kind"] == kind)
    cols = crd["spec"]["versions"][0].get("additionalPrinterColumns") or []
    rows = ["| column | from | shown |", "|---|---|---|"]
    for col in cols:
        rows.append(f"| {col['name'].upper()} | `{col['jsonPath']}` | {'`-o wide`' if col.get('priority') else 'always'} |")
    return "\n".join(rows)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def settings_table() -> str:
    """Operator settings: environment variable, chart value, default, meaning."""
    rows = ["| environment variable | chart value | default | meaning |", "|---|---|---|---|"]
    chart_key = {"metrics_port": "`metrics.port` (0 when `metrics.enabled=false`)", "shards": "`shards`",
                 "box_policy": "`boxPolicy.enabled`", "box_policy_service_accounts": "`boxPolicy.allowedServiceAccounts`",
                 "box_policy_allow_token": "`boxPolicy.allowServiceAccountToken`",
                 "box_policy_volume_types": "`boxPolicy.allowedVolumeTypes`",
                 "box_policy_secret_names": "`boxPolicy.allowedSecretNames`",
                 "box_policy_image_prefixes": "`boxPolicy.allowedImagePrefixes`"}
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "none" if default is None else f"`{json.dumps(default) if isinstance(default, list) else default}`"
        rows.append(f"| `AGENTBOX_{name.upper()}` | {chart_key.get(name, f'`settings.{_camel(name)}`')} | {shown} "
                    f"| {_cell(field.description or '')} |")
    return "\n".join(rows)


def annotations_table() -> str:
    rows = ["| annotation (on an AgentBox) | value | effect |", "|---|---|---|"]
    for const in ("ANNOTATION_RESUME_NOW", "ANNOTATION_RESUME_AT", "ANNOTATION_CANCEL_RESUME"):
        key = getattr(C, const)
        value, effect = {
            "ANNOTATION_RESUME_NOW": ("any", "Resume every limited tab now (the human answer to NeedsAttention); "
                                             "removed by the controller once done."),
            "ANNOTATION_RESUME_AT": ("RFC 3339 instant", "Resume the limited tabs at that instant instead of the "
                                                         "detected reset (once per value; a value that is not an "
                                                         "instant within 31 days is ignored: InputIgnored, "
                                                         "InvalidAnnotation)."),
            "ANNOTATION_CANCEL_RESUME": ("`\"true\"`", "Cancel scheduled resumes: the tabs stay as they are until "
                                                       "the annotation is removed."),
        }[const]
        rows.append(f"| `{key}` | {value} | {effect} |")
    return "\n".join(rows)


def generated_blocks() -> dict[str, str]:
    return {
        "subscription-spec": field_table(C.SUBSCRIPTION_KIND, "spec"),
        "subscription-status": field_table(C.SUBSCRIPTION_KIND, "status"),
        "subscription-columns": printer_columns(C.SUBSCRIPTION_KIND),
        "agentbox-spec": field_table(C.AGENTBOX_KIND, "spec"),
        "agentbox-rules": cel_rules(C.AGENTBOX_KIND),
        "agentbox-status": field_table(C.AGENTBOX_KIND, "status"),
        "agentbox-columns": printer_columns(C.AGENTBOX_KIND),
        "annotations": annotations_table(),
        "settings": settings_table(),
    }


_BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end:(?P=name) -->)", re.S)


def rewrite(text: str, blocks: dict[str, str]) -> str:
    return _BLOCK.sub(lambda m: m.group(1) + blocks[m.group("name")] + "\n" + m.group(4), text)


# ---------------------------------------------------------------------------------------------- tests
def test_configuration_reference_is_generated_from_the_models():
    text = CONFIGURATION.read_text()
    blocks = generated_blocks()
    assert {m.group("name") for m in _BLOCK.finditer(text)} == set(blocks)
    assert rewrite(text, blocks) == text, (
        "docs/configuration.md is out of date with controller/models.py or settings.py: "
        "run `.venv/bin/python tests/test_docs.py`")


def test_every_crd_field_is_documented_with_its_default():
    text = CONFIGURATION.read_text()
    for crd in render_crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        for part in ("spec", "status"):
            for path, sub, _ in _fields(schema[part], part):
                row = next((line for line in text.splitlines() if line.startswith(f"| `{path}` |")), None)
                assert row, f"{crd['spec']['names']['kind']} {path} is not documented"
                if "default" in sub:
                    assert json.dumps(sub["default"]) in row, path


def test_every_setting_and_chart_setting_is_documented():
    text = CONFIGURATION.read_text()
    for name in Settings.model_fields:
        assert f"`AGENTBOX_{name.upper()}`" in text
    import yaml

    for key in yaml.safe_load(CHART_VALUES.read_text())["settings"]:
        assert f"`settings.{key}`" in text, key


def test_operations_lists_every_metric_and_alert():
    text = (DOCS / "operations.md").read_text()
    for fam in metrics.REGISTRY.collect():
        shown = {"counter": fam.name + "_total", "info": fam.name + "_info"}.get(fam.type, fam.name)
        assert f"`{shown}`" in text, shown
    rules = (ROOT / "charts" / "agentbox-controller" / "templates" / "prometheusrule.yaml").read_text()
    for alert in re.findall(r"alert: (\w+)", rules):
        assert alert in text, alert
    for kind in ("resume", "switch", "reserve", "needs_attention"):
        assert f"`{kind}`" in text


def test_troubleshooting_names_the_tools_and_conditions():
    text = (DOCS / "troubleshooting.md").read_text()
    for word in ("agentbox-controller detect", "agentbox-controller usage", "kubectl describe", "Events",
                 C.COND_READY, C.COND_RATE_LIMITED, C.COND_NEEDS_ATTENTION, C.COND_CREDENTIALS_VALID,
                 C.COND_USAGE_FETCHED, C.ANNOTATION_RESUME_NOW):
        assert word in text, word


def test_docs_link_to_each_other_and_exist():
    for name in ("configuration.md", "troubleshooting.md", "operations.md", "security.md"):
        text = (DOCS / name).read_text()
        for link in re.findall(r"\]\(([^)#:]+\.md)", text):
            assert (DOCS / link).resolve().exists(), f"{name}: broken link {link}"


if __name__ == "__main__":
    CONFIGURATION.write_text(rewrite(CONFIGURATION.read_text(), generated_blocks()))
    print(f"rewrote {CONFIGURATION.relative_to(ROOT)}")


def test_readme_status_sample_holds_every_box_and_subscription_of_the_demo():
    """The README's `kubectl agentbox status` sample claims to be the end of `make demo` (b3: it had
    lost the Codex subscription and box the demo prints)."""
    demo = (ROOT / "agentbox_sim" / "demo.py").read_text()
    boxes = set(re.findall(r'add_box\("([a-z-]+)"', demo))
    subs = set(re.findall(r'(?:add_subscription|_subscription)\(w?,? ?"([a-z-]+)"', demo))
    assert {"claude-box", "codex-box", "reserve-box"} <= boxes and {"codex-main", "shared"} <= subs
    readme = (ROOT / "README.md").read_text()
    sample = readme.split("```text\n", 1)[1].split("```", 1)[0]
    rows = {line.split()[0] for line in sample.splitlines() if line and not line.startswith(" ")}
    assert boxes | subs <= rows, sorted((boxes | subs) - rows)
