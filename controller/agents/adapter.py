"""The shape of an agent adapter: every fact the controller uses about one agent CLI, as data.

Each agent module (:mod:`controller.agents.claude_code`, :mod:`controller.agents.codex`) defines one
``ADAPTER``; :mod:`controller.agents.registry` maps agent names to them. This module imports no agent
module (no circle). No I/O: the argv lists here are run in the box by :mod:`controller.service.boxfiles`
(and the login keeper), which knows no agent.

Every command is an argv list whose shell script is a constant; the variable parts (a path under the
agent user's $HOME, the notice text, the terminal's path) are positional arguments, never spliced into
the script. Only the byte bounds (integers of this module) are written into scripts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from controller.domain.profile import Profile
from controller.domain.types import Usage

Provider = Literal["anthropic", "openai"]
"""Whose subscription an agent runs on (the usage API and OAuth endpoints of :mod:`controller.providers`)."""

StructuredSourceName = Literal["statusline", "transcript", "rollout"]
"""Names of the machine-readable usage an agent leaves in the box (``Detection.detected_by`` says
``structured:<name>``): ``statusline``: the statusline input saved by the box image's helper (Claude Code
2.1.x ``rate_limits``); ``transcript``: the newest API-error entry of Claude Code's transcripts
(``~/.claude/projects/*/*.jsonl``); ``rollout``: the last ``token_count`` event of Codex's newest rollout
(``~/.codex/sessions/…/rollout-*.jsonl``)."""

STRUCTURED_MAX = 65536
"""Longest statusline file, rollout line or transcript line read from a box (bytes). Scripts cut their
output in the box at one byte more (``head -c 65537``), so a longer answer is seen and counts as no data."""

LOGIN_READ_MAX = 262144
"""Longest login file read back from a box (bytes; the login keeper's read-back of a refreshed login)."""

# Write stdin to $HOME/<path> atomically (mode 0600): the agent never reads a half-written file.
_LOGIN_WRITE = ('umask 077; f="$HOME/$1"; mkdir -p "$(dirname "$f")" && cat > "$f.agentbox-tmp" '
                '&& mv -f "$f.agentbox-tmp" "$f"')
# The same, only if the file exists: a box whose file was removed (the reserve stop) is left without
# one. Exit 4: no file.
_LOGIN_REPLACE = ('umask 077; f="$HOME/$1"; [ -f "$f" ] || exit 4; cat > "$f.agentbox-tmp" '
                  '&& mv -f "$f.agentbox-tmp" "$f"')
_LOGIN_REMOVE = 'rm -f -- "$HOME/$1"'
# Exit 4: no file.
_LOGIN_READ = f'f="$HOME/$1"; [ -f "$f" ] || exit 4; head -c {LOGIN_READ_MAX} "$f"'
# Print a line on a pane's terminal (shown to the human; not input to the agent).
_NOTICE = 'printf "\\r\\n\\033[1m%s\\033[0m\\r\\n" "$1" > "$2"'

LOGIN_FILE_MISSING_RC = 4
"""Exit status of :meth:`AgentAdapter.login_replace_argv` and :meth:`AgentAdapter.login_read_argv` when the
box has no login file (not an error: a box stopped by the reserve has none)."""


class NoLoginFile(ValueError):
    """The agent has no login file the controller installs (message names the agent)."""


class SourceUnreadable(ValueError):
    """A structured source's data is malformed. The message says what is wrong (a field name, "not a
    JSON object"), never a value from the file."""


def head_cut(max_bytes: int) -> str:
    """The shell words that cut a script's output at one byte past ``max_bytes`` ("head -c 65537")."""
    return f"head -c {int(max_bytes) + 1}"


@dataclass(frozen=True)
class StructuredSource:
    """One box file (or family of files) holding an agent's own usage, and how to read it.

    Attributes:
        name: the source's name (``structured:<name>`` in ``detectedBy``).
        argv: run in the box container; prints the data cut at ``max_bytes + 1`` bytes and exits 0, or
            exits non-zero (3 by convention) when there is no such file (no data, no problem).
        path: the file as shown in problem messages (``~/.agentbox/statusline.json``, globs allowed).
        parse: ``parse(stdout, now) -> Usage | None`` of the whole output; None is "no data" (an empty
            output, a window not used up); raises :class:`SourceUnreadable` for malformed data (its message
            becomes the problem).
        max_bytes: the bound of the data in bytes (above it the data counts as none and a problem names
            the file).
        header_lines: leading lines of the output that are not the data (the statusline's mtime line):
            not counted in the bound.
        unit: what the bound applies to in the problem message ("a token_count event"), "" for the file.
    """

    name: StructuredSourceName
    argv: tuple[str, ...]
    path: str
    parse: Callable[[str, datetime], Usage | None]
    max_bytes: int = STRUCTURED_MAX
    header_lines: int = 0
    unit: str = ""

    def too_large(self) -> str:
        """The problem message of data above the bound ("a token_count event larger than 65536 bytes")."""
        return f"{self.unit + ' ' if self.unit else ''}larger than {self.max_bytes} bytes"


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
        structured_sources: the box files holding the agent's own usage (:class:`StructuredSource`: argv,
            bound, parser), read in this order; the first that yields usage wins.
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

    def _login_path(self) -> str:
        if not self.login_file:
            raise NoLoginFile(f"agent {self.name} has no login file path")
        return self.login_file

    def login_secret_key(self) -> str:
        """The key of the login file in the box credentials Secret (:attr:`secret_key`, e.g.
        ``credentials.json``). The adapter is the only source: there is no default file name.

        Raises:
            NoLoginFile: the agent has none (the controller installs no login for it: asking is a
                programming error, never a reason to invent a key).
        """
        if not self.secret_key:
            raise NoLoginFile(f"agent {self.name} has no login Secret key")
        return self.secret_key

    def login_write_argv(self) -> list[str]:
        """argv writing stdin to the login file (``$HOME/<login_file>``, mode 0600, atomic; parents made).

        Raises:
            NoLoginFile: the agent has none.
        """
        return ["sh", "-c", _LOGIN_WRITE, "sh", self._login_path()]

    def login_replace_argv(self) -> list[str]:
        """argv replacing the login file with stdin only where one exists (exit
        :data:`LOGIN_FILE_MISSING_RC` when none; atomic, mode 0600).

        Raises:
            NoLoginFile: the agent has none.
        """
        return ["sh", "-c", _LOGIN_REPLACE, "sh", self._login_path()]

    def login_remove_argv(self) -> list[str]:
        """argv removing the login file (the reserve stop; no file is not an error).

        Raises:
            NoLoginFile: the agent has none.
        """
        return ["sh", "-c", _LOGIN_REMOVE, "sh", self._login_path()]

    def login_read_argv(self) -> list[str]:
        """argv printing the login file cut at :data:`LOGIN_READ_MAX` bytes (exit
        :data:`LOGIN_FILE_MISSING_RC` when none). What it prints is untrusted.

        Raises:
            NoLoginFile: the agent has none.
        """
        return ["sh", "-c", _LOGIN_READ, "sh", self._login_path()]

    def notice_argv(self, tty: str, text: str) -> list[str]:
        """argv printing ``text`` as a bold line of its own on the terminal ``tty`` ("/dev/pts/3") of the
        agent's pane: shown to the human, not input to the agent."""
        return ["sh", "-c", _NOTICE, "sh", text, tty]
