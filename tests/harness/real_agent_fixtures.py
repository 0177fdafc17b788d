"""Fixture `agents_installed`: the pinned real Claude Code and Codex CLIs (npm), installed once into
.agents/; the tests that need them are skipped with the reason when npm is missing."""

from __future__ import annotations

import shutil

import pytest

from agentbox_sim.real_agents import CLAUDE_VERSION, CODEX_VERSION, AgentsUnavailable, ensure_installed, installed


@pytest.fixture(scope="module")
def agents_installed() -> None:
    if not installed() and shutil.which("npm") is None:
        pytest.skip("npm is not installed: the real Claude Code and Codex CLIs come from npm "
                    f"(@anthropic-ai/claude-code@{CLAUDE_VERSION}, @openai/codex@{CODEX_VERSION}); run `make agents`")
    try:
        ensure_installed()
    except AgentsUnavailable as exc:
        pytest.fail(str(exc))
