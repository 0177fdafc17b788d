"""The layers are checked: the import-linter contracts and mypy (strict, on the domain and the adapters) of
pyproject.toml hold (also run by `make lint`, which `make test` runs first), so a plain `pytest` run catches
a broken layer or a type error there too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: it is in the test extra (make venv)")
    return found


def test_import_contracts_hold() -> None:
    """Domain pure, kopf only in handlers, the Kubernetes client only in controller.kube, agent and
    provider adapters independent, the product never importing the emulated world."""
    res = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_domain_and_adapters_type_check() -> None:
    """mypy --strict (pyproject [tool.mypy]) on controller/domain, controller/agents, controller/providers."""
    res = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
