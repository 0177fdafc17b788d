"""The shape of an agent adapter: every fact the controller uses about one agent CLI, as data.

Each agent module (:mod:`controller.agents.claude_code`, :mod:`controller.agents.codex`) defines one
``ADAPTER``; :mod:`controller.agents.registry` maps agent names to them. This module imports no agent
module (no circle). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller.domain.profile import Profile

Provider = Literal["anthropic", "openai"]
"""Whose subscription an agent runs on (the usage API and OAuth endpoints of :mod:`controller.providers`)."""

StructuredSource = Literal["statusline", "transcript", "rollout"]
"""Machine-readable usage an agent leaves in the box (read by :func:`controller.service.boxfiles.read_structured`):
``statusline``: the statusline input saved by the box image's helper (Claude Code 2.1.x ``rate_limits``);
``transcript``: the newest API-error entry of Claude Code's transcripts (``~/.claude/projects/*/*.jsonl``);
``rollout``: the last ``token_count`` event of Codex's newest rollout (``~/.codex/sessions/…/rollout-*.jsonl``)."""


@dataclass(frozen=True)
class AgentAdapter:
    """One agent CLI as the controller knows it.

    Attributes:
        name: the agent name used in ``AgentBox.spec.agent`` ("claude-code", "codex", ...).
        profile: the screen line families the detector reads (:class:`controller.domain.profile.Profile`).
        provider: whose subscription the agent runs on; None for agents without limit features.
        login_file: the agent's login file relative to the agent user's $HOME (".claude/.credentials.json"),
            None when the controller installs no login.
        secret_key: the key of that file in the box credentials Secret (the file's own name), None likewise.
        continue_text: text typed (then Enter) to resume a stopped turn.
        restart_argv: argv that restarts the agent in its cwd on its last session (typed at the shell), or None
            when the agent reads a new login without a restart.
        interrupt_keys: tmux key names pressed in order, with the send pause between them, to make a running
            agent exit to its shell (before a restart, or before a login switch when
            ``exit_before_login_switch``).
        stop_keys: tmux key names that stop a running turn without leaving the agent (the reserve stop).
        exit_before_login_switch: a running agent refuses a login file of another account (Codex): the
            limited agents are interrupted before a rotation installs the new login.
        structured_sources: the box files holding the agent's own usage, read in this order; the first that
            yields usage wins.
    """

    name: str
    profile: Profile
    provider: Provider | None = None
    login_file: str | None = None
    secret_key: str | None = None
    continue_text: str = "continue"
    restart_argv: tuple[str, ...] | None = None
    interrupt_keys: tuple[str, ...] = ("C-c", "C-c")
    stop_keys: tuple[str, ...] = ("Escape",)
    exit_before_login_switch: bool = False
    structured_sources: tuple[StructuredSource, ...] = ()
