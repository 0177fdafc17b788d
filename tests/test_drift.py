"""The drift check's pieces (no npm needed): the table, the redaction of captures, the pin overrides."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from agentbox_sim.capture import Capture, _clean, rows_for, table, write

pytestmark = pytest.mark.unit

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_table_lists_version_scenario_detected_reset_and_result():
    screen = ("❯ write hello\n  ⎿  You've hit your 5-hour limit · resets 10:43am (UTC)\n"
              "● Usage limit reached · set to continue automatically at 10:43am\n" + "─" * 40 + "\n❯\n" + "─" * 40)
    now = datetime(2026, 12, 1, 10, 42, tzinfo=timezone.utc)
    good = Capture("claude-auto-limit", "claude-code", screen, now,
                   {"state": "rate_limited", "auto_continue": True, "resets_at": "2026-12-01T10:43:00Z"})
    drifted = Capture("claude-auto-limit-2", "claude-code", screen, now, {"state": "rate_limited"})
    rows = rows_for({"claude-code": "2.1.332"}, [good, drifted])
    text = table(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["version", "scenario", "expected", "detected", "reset", "result"]
    assert "claude-code 2.1.332" in lines[2] and "rate_limited auto" in lines[2] and lines[2].rstrip().endswith("pass")
    assert "FAIL auto_continue True != False" in lines[3]


def test_captures_are_redacted_and_saved_by_version(tmp_path: pathlib.Path):
    sandbox = tmp_path / "pods" / "default" / "codex"
    raw = (f"$ env AGENTBOX_AGENT_RUN=1 HOME={sandbox} CODEX_HOME={sandbox}/.codex /x/bin/codex\n"
           f"WARNING: codex_home {sandbox}/.codex   \n\n\n")
    text = _clean(raw, sandbox)
    assert str(sandbox) not in text and "/home/agent/work/.codex" in text
    assert text.splitlines()[0] == "$ codex" and text.endswith(".codex\n")
    cap = Capture("codex-limit", "codex", text, datetime(2026, 12, 1, tzinfo=timezone.utc), {"state": "unknown"})
    write(tmp_path / "out", {"codex": "0.171.0"}, [cap])
    meta = json.loads((tmp_path / "out" / "0.171.0" / "screens.json").read_text())
    assert meta["codex-limit.txt"]["expect"] == {"state": "unknown"}
    assert (tmp_path / "out" / "0.171.0" / "codex-limit.txt").read_text() == text


def test_pins_can_be_pointed_at_another_folder_and_release(tmp_path: pathlib.Path):
    code = ("from agentbox_sim.real_agents import AGENTS_DIR, PINNED, PINNED_CLAUDE_VERSION; "
            "print(AGENTS_DIR, PINNED['@anthropic-ai/claude-code'], PINNED['@openai/codex'], PINNED_CLAUDE_VERSION)")
    env = {"PATH": "/usr/bin:/bin", "AGENTBOX_AGENTS_DIR": str(tmp_path), "AGENTBOX_CLAUDE_VERSION": "9.9.9",
           "AGENTBOX_CODEX_VERSION": "8.8.8", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO, check=True)
    folder, claude, codex, pinned = out.stdout.split()
    assert (folder, claude, codex) == (str(tmp_path), "9.9.9", "8.8.8")
    assert pinned == "2.1.337"


def test_make_agents_latest_exists_and_is_documented():
    assert "agents-latest:" in (REPO / "Makefile").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make agents-latest" in readme and "2.1.337" in readme and "0.171.0" in readme
