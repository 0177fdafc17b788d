"""The benches share one settings definition (agentbox_sim.bench_settings) with per-bench overrides, and
what they run with is what they ran with before it (issue 12: bench duplicates)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agentbox_sim.bench_settings import bench_settings
from controller.settings import Settings

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[1] / "bench"

# The definitions each bench held before (copied literally): the shared one must give the same values.
_OLD_FAST = dict(
    scan_interval_s=5.0, resume_margin_s=1.0, human_idle_s=4.0, auto_continue_grace_s=6.0, settle_s=4.0,
    max_attempts=3, unknown_reset_recheck_s=5.0, send_pause_s=0.15, verify_timeout_s=4.0, restart_timeout_s=15.0,
    usage_interval_s=30.0, usage_max_age_s=2.0, exec_timeout_s=10.0, metrics_port=0,
)
BEFORE = {
    "faults": (Settings(**{**_OLD_FAST, "scan_interval_s": 2.0}), bench_settings(scan_interval_s=2.0)),
    "resume_latency": (Settings(**_OLD_FAST), bench_settings()),
    "scale": (Settings(**{**_OLD_FAST, "usage_interval_s": 300.0}), bench_settings(usage_interval_s=300.0)),
    "reserve_overshoot": (Settings(scan_interval_s=5.0, resume_margin_s=1.0, metrics_port=0),
                          bench_settings("default", scan_interval_s=5.0, resume_margin_s=1.0)),
    "usage_reads": (Settings(metrics_port=0), bench_settings("default")),
}


@pytest.mark.parametrize("bench", sorted(BEFORE))
def test_each_bench_runs_with_the_settings_it_had(bench: str):
    before, now = BEFORE[bench]
    assert now == before
    assert "bench_settings(" in (BENCH / f"{bench}.py").read_text()


def test_no_bench_defines_settings_of_its_own():
    for path in sorted(BENCH.glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert "Settings" not in calls, f"{path.name} builds its own Settings(...): use agentbox_sim.bench_settings"
