"""Smoke test of bench/shards.py (the sharded bench keeps working): a tiny run, 24 boxes over two replicas and
four shards, with its burst, rotation and failover; the final JSON line has its keys and no due tab was lost,
resumed twice, early or with another text. Its resets are minute boundaries (Claude Code prints its reset to
the minute), so the run waits for up to two of them: about one to two and a half minutes."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.component, pytest.mark.timeout(300)]

ROOT = pathlib.Path(__file__).resolve().parents[1]
KEYS = {"boxes", "subscriptions", "replicas", "shards", "emulated", "served", "lost", "double", "early",
        "wrong_text", "usage_readers_max", "usage_api_callers_max", "per_replica", "burst", "rotation",
        "failover_burst", "failover_s", "load_avg_1m", "wall_s"}
PER_REPLICA = {"name", "rss_mib", "cpu_idle_cores", "cpu_total_s", "api_requests_per_min", "watch_connections",
               "exec_connections_max", "lease_requests_per_min"}


def test_bench_shards_tiny_run(tmp_path: pathlib.Path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "shards.py"), "--boxes", "24", "--subscriptions", "8",
         "--replicas", "2", "--shards", "4", "--idle", "2", "--burst-subs", "2", "--rotation-subs", "1",
         "--lead", "2", "--settle", "2", "--timeout", "40", "--workdir", str(tmp_path / "bench")],
        capture_output=True, text=True, timeout=280, cwd=str(ROOT))
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-2000:]
    result = json.loads(lines[-1])
    assert KEYS <= set(result), sorted(KEYS - set(result))
    assert {k for r in result["per_replica"] for k in r} >= PER_REPLICA
    assert (result["served"], result["lost"], result["double"], result["early"], result["wrong_text"]) == \
        (24, 0, 0, 0, 0), result
    assert result["usage_readers_max"] == 1
    assert result["rotation"]["switched"] == result["rotation"]["boxes"] > 0
    assert result["failover_burst"]["failover"]["leases_taken_s"] <= 15
    assert result["replicas_exited"] == {} and result["server_errors"] == 0
    assert proc.returncode == 0, proc.stdout[-2000:]
