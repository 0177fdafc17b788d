"""The rooms stay small (issue 19): no module of the product over 600 lines, no class over 300, and the box
decision's composition (`controller.domain.box.decision._decide`: the rules of one pass in their fixed
order) short enough to read on one screen. Read from the source with `ast`, so a module that grows past a
limit fails here with its name and size, in the quick tier."""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "controller"
MODULE_MAX_LINES = 600
CLASS_MAX_LINES = 300
COMPOSITION_MAX_LINES = 60  # one screen
DECISION = PRODUCT / "domain" / "box" / "decision.py"


def sources() -> list[pathlib.Path]:
    return sorted(PRODUCT.rglob("*.py"))


def test_the_product_has_sources_to_measure():
    names = {p.relative_to(PRODUCT).as_posix() for p in sources()}
    assert {"domain/box/decision.py", "service/executor.py", "terminal/control.py"} <= names, sorted(names)


def test_no_module_is_over_600_lines():
    over = {str(p.relative_to(ROOT)): n for p in sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_MAX_LINES}
    assert over == {}, f"modules over {MODULE_MAX_LINES} lines: split them by concern"


def test_no_class_is_over_300_lines():
    over = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > CLASS_MAX_LINES:
                    over[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert over == {}, f"classes over {CLASS_MAX_LINES} lines: give each job its own class"


def test_the_box_decision_composes_its_rules_on_one_screen():
    tree = ast.parse(DECISION.read_text(encoding="utf-8"))
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "decide" in funcs and "_decide" in funcs, sorted(funcs)
    body = funcs["_decide"]
    lines = (body.end_lineno or body.lineno) - body.lineno + 1
    assert lines <= COMPOSITION_MAX_LINES, f"_decide is {lines} lines: move a rule into its module"
