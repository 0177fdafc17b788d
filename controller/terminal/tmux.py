"""tmux driven through pod exec: argv builders and output parsers (tmux 3.x).

Every command is an argv list run by `controller.kube.exec` in the box container; nothing
here builds a shell string, and user text is passed to `send-keys -l` as one literal argument.
The box runs one tmux session (`agentbox`), one tab per tmux window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from controller.constants import TMUX_SESSION

_FIELD_SEP = "\x1f"
SHELLS = frozenset({"bash", "sh", "zsh", "fish", "dash", "ash", "ksh", "login"})

_TAB_FORMAT = _FIELD_SEP.join([
    "#{window_id}", "#{window_index}", "#{window_name}", "#{pane_id}",
    "#{pane_current_command}", "#{pane_pid}", "#{window_activity}",
])
_CLIENT_FORMAT = _FIELD_SEP.join(["#{client_activity}", "#{window_id}", "#{client_tty}", "#{client_control_mode}"])
_MARK = "\x1eabx-tab "


@dataclass(frozen=True)
class Tab:
    """One tmux window of the box session.

    Attributes:
        id: tmux window id ("@3"), stable while the window lives.
        index: window index in the session.
        name: window name.
        pane_id: id of the window's active pane ("%5").
        command: the pane's foreground command (pane_current_command).
        pid: the pane's process id.
        activity: last output/keys activity of the window (UTC), or None.
    """

    id: str
    index: int
    name: str
    pane_id: str
    command: str
    pid: int
    activity: datetime | None

    @property
    def at_shell(self) -> bool:
        """The pane's foreground process is a login shell (the agent is not running)."""
        return self.command.lstrip("-") in SHELLS


def _epoch(value: str) -> datetime | None:
    try:
        seconds = int(value)
    except ValueError:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc) if seconds > 0 else None


def has_session_argv(session: str = TMUX_SESSION) -> list[str]:
    """argv whose rc says whether the session exists (0 yes, 1 no)."""
    return ["tmux", "has-session", "-t", f"={session}"]


def list_tabs_argv(session: str = TMUX_SESSION) -> list[str]:
    """argv listing the session's tabs and, in the same call, the attached clients."""
    return ["tmux", "list-windows", "-t", f"={session}", "-F", _TAB_FORMAT, ";",
            "list-clients", "-t", f"={session}", "-F", "clients" + _FIELD_SEP + _CLIENT_FORMAT]


def parse_tabs(out: str) -> tuple[list[Tab], dict[str, datetime]]:
    """Parse `list_tabs_argv` output into tabs and {window id: last human key time (UTC)}.

    Human typing moves only `client_activity` (send-keys does not; real-agents.md, tmux 3.3a),
    so the last input in a tab is the newest activity of the clients showing that window.  Control-mode
    clients on no terminal (the controller's own live stream, `controller.terminal.control`, runs on exec
    pipes) are not humans, so they are left out.  A control client on a terminal is a person's (iTerm2's
    `tmux -CC`): it counts, from its attach (tmux 3.3a moves a client's activity when it attaches, not with
    the commands a control client sends, so the keys such a person sends as commands are protected by the
    half-typed prompt rule, which reads the screen, not by this input time).
    """
    tabs: list[Tab] = []
    inputs: dict[str, datetime] = {}
    for line in out.splitlines():
        parts = line.split(_FIELD_SEP)
        if parts[0] == "clients" and len(parts) >= 3:
            if len(parts) >= 5 and parts[4] == "1" and not parts[3]:
                continue  # a control client on no terminal: the controller's stream, not a person
            at = _epoch(parts[1])
            if at and (parts[2] not in inputs or inputs[parts[2]] < at):
                inputs[parts[2]] = at
        elif len(parts) == 7:
            wid, idx, name, pane, cmd, pid, act = parts
            tabs.append(Tab(wid, int(idx), name, pane, cmd, int(pid or 0), _epoch(act)))
    return tabs, inputs


def capture_argv(tabs: list[Tab]) -> list[str]:
    """argv capturing the visible screen of every tab in one tmux call, each after a marker line."""
    argv = ["tmux"]
    for i, tab in enumerate(tabs):
        if i:
            argv.append(";")
        argv += ["display-message", "-p", "-t", tab.pane_id, f"{_MARK}{tab.id}", ";",
                 "capture-pane", "-p", "-J", "-t", tab.pane_id]
    return argv


def parse_captures(out: str) -> dict[str, str]:
    """Split `capture_argv` output into {window id: screen text}."""
    screens: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in out.split("\n"):
        if line.startswith(_MARK):
            if current is not None:
                screens[current] = "\n".join(lines).rstrip("\n")
            current, lines = line[len(_MARK):].strip(), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        screens[current] = "\n".join(lines).rstrip("\n")
    return screens


def send_text_argv(pane_id: str, text: str) -> list[str]:
    """argv typing `text` literally (no key names interpreted) into a pane."""
    return ["tmux", "send-keys", "-t", pane_id, "-l", "--", text]


def send_key_argv(pane_id: str, key: str) -> list[str]:
    """argv pressing one named key (Enter, Escape, C-c) in a pane."""
    if key not in {"Enter", "Escape", "C-c", "C-u", "C-e"} and not (len(key) == 1 and key.isdigit()):
        raise ValueError("refusing to send an unexpected key")
    return ["tmux", "send-keys", "-t", pane_id, key]


def capture_one_argv(pane_id: str) -> list[str]:
    """argv capturing one pane's visible screen."""
    return ["tmux", "capture-pane", "-p", "-J", "-t", pane_id]


def pane_command_argv(pane_id: str) -> list[str]:
    """argv printing a pane's foreground command."""
    return ["tmux", "display-message", "-p", "-t", pane_id, "#{pane_current_command}"]


def pane_tty_argv(pane_id: str) -> list[str]:
    """argv printing a pane's terminal device ("/dev/pts/3"; untrusted: checked by the caller)."""
    return ["tmux", "display-message", "-p", "-t", pane_id, "#{pane_tty}"]
