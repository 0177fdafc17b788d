"""The agent registry: agent names used in ``AgentBox.spec`` → their screen profiles, and detection by name.

Each agent adapter module (:mod:`controller.agents.claude_code`, :mod:`controller.agents.codex`) builds its
:class:`~controller.domain.profile.Profile` from the vocabulary in :mod:`controller.domain.profile`; this
module imports them (never the other way round). No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from controller.agents.claude_code import PROFILE as CLAUDE
from controller.agents.codex import PROFILE as CODEX
from controller.domain.detection import UserPattern, detect_screen
from controller.domain.profile import Profile, generic_profile
from controller.domain.types import Detection

__all__ = ["PROFILES", "Profile", "UnknownAgent", "detect", "get_profile", "resume_actions"]


class UnknownAgent(KeyError):
    """Raised for an agent name that has no profile (message names the known agents)."""


def _registry() -> dict[str, Profile]:
    profiles = {CLAUDE.agent: CLAUDE, CODEX.agent: CODEX}
    for name in ("opencode", "gemini-cli", "claude-wrapper", "shell"):
        profiles[name] = generic_profile(name)
    return profiles


PROFILES: dict[str, Profile] = _registry()


def get_profile(agent: str) -> Profile:
    """Return the profile of ``agent`` ("claude-code", "codex", "opencode", "gemini-cli",
    "claude-wrapper", "shell").

    Raises:
        UnknownAgent: no profile for that name.
    """
    try:
        return PROFILES[agent]
    except KeyError:
        raise UnknownAgent(f"unknown agent {agent!r}; known: {', '.join(sorted(PROFILES))}") from None


def detect(
    agent: str,
    screen: str,
    now: datetime,
    tz: str,
    user_patterns: Sequence[UserPattern] = (),
    trace: list[str] | None = None,
) -> Detection:
    """Detect what a tab's screen means for ``agent`` (see :func:`detect_screen`).

    Args:
        agent: agent name from ``spec.agent``.
        screen: captured pane text (``tmux capture-pane -p``; ANSI allowed).
        now: tz-aware instant the screen was seen.
        tz: the box's IANA zone (applies when a line names none).
        user_patterns: compiled ``spec.detection.patterns`` (see ``compile_user_pattern``).
        trace: a list that receives one sentence per decision step (family, time expression, why a
            line is history); see :func:`detect_screen`.

    Returns:
        A :class:`~controller.domain.types.Detection` (resets_at in UTC).

    Raises:
        UnknownAgent: no profile for ``agent``.
        ValueError: ``now`` is naive.
    """
    return detect_screen(get_profile(agent), screen, now, tz, user_patterns, trace)


def resume_actions(agent: str) -> tuple[str, list[str] | None]:
    """Keys the controller uses to resume ``agent``: (continue text, restart argv or None).

    Claude Code: ("continue", None) - it reads the new login before every request.
    Codex: ("continue", ["codex", "resume", "--last"]) - restart in the tab's cwd, then continue.

    Raises:
        UnknownAgent: no profile for ``agent``.
    """
    profile = get_profile(agent)
    return profile.continue_text, list(profile.restart_argv) if profile.restart_argv else None
