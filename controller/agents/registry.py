"""The agent registry: agent names used in ``AgentBox.spec.agent`` → their adapters (screen profile, provider,
login file and Secret key, resume keys, structured usage sources), and detection by agent name.

The one place these facts live: services ask here (never a map of their own). Imports the agent modules,
which import only :mod:`controller.agents.adapter` and the domain (no circle). No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from controller.agents.adapter import AgentAdapter, Provider
from controller.agents.claude_code import ADAPTER as CLAUDE
from controller.agents.codex import ADAPTER as CODEX
from controller.domain.detection import UserPattern, detect_screen
from controller.domain.profile import Profile, generic_profile
from controller.domain.types import Detection

__all__ = ["ADAPTERS", "PROFILES", "AgentAdapter", "Profile", "UnknownAgent", "detect", "get_adapter",
           "get_profile", "login_adapter", "provider_of", "resume_actions", "subscription_agents"]


class UnknownAgent(KeyError):
    """Raised for an agent name that has no adapter (message names the known agents)."""


def _registry() -> dict[str, AgentAdapter]:
    adapters = {CLAUDE.name: CLAUDE, CODEX.name: CODEX}
    # Agents the controller runs and watches without limit features (no provider, no login).
    for name in ("opencode", "gemini-cli", "claude-wrapper", "shell"):
        adapters[name] = AgentAdapter(name=name, profile=generic_profile(name))
    return adapters


ADAPTERS: dict[str, AgentAdapter] = _registry()
PROFILES: dict[str, Profile] = {name: adapter.profile for name, adapter in ADAPTERS.items()}


def get_adapter(agent: str) -> AgentAdapter:
    """The adapter of ``agent`` ("claude-code", "codex", "opencode", "gemini-cli", "claude-wrapper", "shell").

    Raises:
        UnknownAgent: no adapter for that name.
    """
    try:
        return ADAPTERS[agent]
    except KeyError:
        raise UnknownAgent(f"unknown agent {agent!r}; known: {', '.join(sorted(ADAPTERS))}") from None


def get_profile(agent: str) -> Profile:
    """The screen profile of ``agent`` (see :func:`get_adapter`).

    Raises:
        UnknownAgent: no adapter for that name.
    """
    return get_adapter(agent).profile


def provider_of(agent: str) -> Provider | None:
    """Whose subscription ``agent`` runs on ("anthropic" | "openai"), None for an agent without limit
    features or an unknown name."""
    adapter = ADAPTERS.get(agent)
    return adapter.provider if adapter else None


def subscription_agents() -> dict[str, Provider]:
    """Agent name → provider, for the agents that run on a subscription."""
    return {name: a.provider for name, a in ADAPTERS.items() if a.provider is not None}


def login_adapter(provider: str) -> AgentAdapter:
    """The adapter of the agent whose login file a ``provider`` subscription holds (one agent per provider:
    Claude Code for "anthropic", Codex for "openai").

    Raises:
        UnknownAgent: no agent runs on that provider.
    """
    for adapter in ADAPTERS.values():
        if adapter.provider == provider and adapter.login_file:
            return adapter
    raise UnknownAgent(f"no agent runs on provider {provider!r}")


def detect(
    agent: str,
    screen: str,
    now: datetime,
    tz: str,
    user_patterns: Sequence[UserPattern] = (),
    trace: list[str] | None = None,
) -> Detection:
    """Detect what a tab's screen means for ``agent`` (see :func:`controller.domain.detection.detect_screen`).

    Args:
        agent: agent name from ``spec.agent``.
        screen: captured pane text (``tmux capture-pane -p``; ANSI allowed).
        now: tz-aware instant the screen was seen.
        tz: the box's IANA zone (applies when a line names none).
        user_patterns: compiled ``spec.detection.patterns`` (see ``compile_user_pattern``).
        trace: a list that receives one sentence per decision step (family, time expression, why a
            line is history).

    Returns:
        A :class:`~controller.domain.types.Detection` (resets_at in UTC).

    Raises:
        UnknownAgent: no adapter for ``agent``.
        ValueError: ``now`` is naive.
    """
    return detect_screen(get_profile(agent), screen, now, tz, user_patterns, trace)


def resume_actions(agent: str) -> tuple[str, list[str] | None]:
    """Keys the controller uses to resume ``agent``: (continue text, restart argv or None).

    Claude Code: ("continue", None) - it reads the new login before every request.
    Codex: ("continue", ["codex", "resume", "--last"]) - restart in the tab's cwd, then continue.

    Raises:
        UnknownAgent: no adapter for ``agent``.
    """
    adapter = get_adapter(agent)
    return adapter.continue_text, list(adapter.restart_argv) if adapter.restart_argv else None
