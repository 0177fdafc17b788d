"""Guard: no test types a fixed reset clock into a real tab.

A limit line with a fixed clock ("resets 11:59pm", "try again at 3:05 PM", "continuing automatically at
7:13am", "resets Mon 9am", "resets Dec 3, 12:57am") shown to a running operator means a different reset
at every hour of the day: 11:59pm read at 00:40 is a reset that just passed, and the test that waited for
a limited tab failed in CI (main 1e962c5). Tests that run tabs (``run_pod``, ``send-keys``, ``TabSpec``)
compute their clocks from the current time (``claude_clock(utc_in(7200), "UTC")``, the fake agents'
``--reset-epoch``); pure tests pass an explicit ``now`` and are not concerned.

Every string literal (f-string parts included) in a function that runs tabs, and every module-level one
in a module that does, is searched for a clock after a reset phrase. A clock with a year names one
instant whatever the hour (``Dec 31, 9999, 11:59pm``: out of range at any time) and is allowed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in [*ROOT.glob("tests/test_*.py"), *ROOT.glob("tests/harness/*.py"), *ROOT.glob("tests/e2e/*.py"),
                            *ROOT.glob("agentbox_sim/*.py"), *ROOT.glob("bench/*.py")]
               if p.name != "test_no_fixed_clocks.py")  # its own examples
RUNS_TABS = re.compile(r"run_pod|send-keys|TabSpec\(|fake_agent_argv|scripted_agent")
CLOCK = re.compile(
    r"(?:resets?(?:\s+at)?|try again at|automatically at|reset at|until)\s+"
    r"(?:(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?\s+|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"\d{1,2}(?:st|nd|rd|th)?,?\s+(?:at\s+)?|tomorrow\s+(?:at\s+)?|today\s+(?:at\s+)?)?"
    r"\d{1,2}(?::\d{2})?\s*(?:[ap]\.?m\b|(?<=\d\d)\b)",
    re.IGNORECASE)
YEAR = re.compile(r"\b(?:19|2\d|[3-9]\d)\d\d\b")


def _strings(node: ast.AST) -> list[tuple[int, str]]:
    """String literals under ``node`` that are values (docstrings and other bare strings are prose)."""
    prose = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose]


def fixed_clocks(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line: text`` (relative to ``root``) for each fixed reset clock in code that runs tabs."""
    source = path.read_text(encoding="utf-8")
    if not RUNS_TABS.search(source):
        return []
    tree, lines = ast.parse(source), source.splitlines()
    scopes: list[ast.AST] = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                          ast.ClassDef))]
    scopes += [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and RUNS_TABS.search("\n".join(lines[n.lineno - 1:n.end_lineno]))]
    found = []
    for scope in scopes:
        for line, text in _strings(scope):
            for m in CLOCK.finditer(text):
                if not YEAR.search(text[m.start():m.end() + 12]):
                    found.append(f"{path.relative_to(root)}:{line}: {m.group(0)!r}")
    return sorted(set(found))


def test_no_test_shows_a_fixed_reset_clock_to_a_running_operator():
    found = [hit for path in FILES for hit in fixed_clocks(path)]
    assert found == [], "compute the clock from now (claude_clock(utc_in(...)), --reset-epoch):\n" + "\n".join(found)


@pytest.mark.parametrize("text,fixed", [
    ("printf '  You'\"'\"'ve hit your 5-hour limit \\302\\267 resets 11:59pm (UTC)\\n'", True),
    ("Usage limit reached \u2219 resets 3pm", True),
    ("try again at 3:05 PM.", True),
    ("continuing automatically at 7:13am", True),
    ("resets Mon 9am", True),
    ("resets Dec 3, 12:57am (UTC)", True),
    ("quota hit until 17:30", True),
    ("resets Dec 31, 9999, 11:59pm (UTC)", False),
    ("resets {clock} (UTC)", False),
    ("resets in 1h", False),
])
def test_the_search_finds_what_it_should(tmp_path: Path, text: str, fixed: bool):
    """The search itself: the line that failed CI is found; a year, a placeholder or a duration is not."""
    module = tmp_path / "test_x.py"
    module.write_text(f"async def test_x(world):\n    await world.run_pod('b', [])\n    line = {text!r}\n")
    assert bool(fixed_clocks(module, tmp_path)) is fixed
