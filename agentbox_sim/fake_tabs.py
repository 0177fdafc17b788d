"""Fake box tabs inside the emulated API server: every box pod's `pods/exec` is answered in-process, with no
tmux server, shell or agent process behind it (bench/shards.py: 10,000 real tmux servers do not fit on one
machine).

What the controller sees is what real tmux 3.3a answers, for the commands it sends:

* one-shot exec: ``tmux -V``, ``has-session``, ``list-windows``/``list-clients`` (one window ``main``, pane
  ``%1``, foreground command ``claude``, no human client), ``display-message -p`` (formats and the sync
  nonce), ``capture-pane -p -J``, ``send-keys`` (``-l`` text and named keys), ``refresh-client``; the agent's
  structured usage files (absent: exit 3) and the login file (written, replaced, removed and read back as
  the box's ``$HOME`` would hold it);
* the live stream (``tmux -N -C attach-session``, stdin open): control mode, one ``%begin``/``%end`` block
  (``%error`` for a failed command) per command line in order, the attach block with flags 0, and
  ``%output %1`` whenever the screen changes (a limit line printed, typed text echoed, a submitted line).

Each tab is one screen string (:class:`FakeTab`): a prompt, the limit line a test prints with
:meth:`FakeTabs.limit`, the text typed at the prompt; an Enter submits the typed line (recorded with its
arrival time, epoch seconds, as the emulator received it) and the screen then shows ``working``.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from controller.agents import adapter as _adapter

PANE = "%1"
WINDOW = "@1"
TAB_NAME = "main"
COMMAND = "claude"
BOX_WIDTH = 100
_VAR = re.compile(r"#\{([a-z_]+)\}")
_LOGIN_SCRIPTS = {_adapter._LOGIN_WRITE: "write", _adapter._LOGIN_REPLACE: "replace",
                  _adapter._LOGIN_REMOVE: "remove", _adapter._LOGIN_READ: "read", _adapter._NOTICE: "notice"}


@dataclass
class FakeTab:
    """One box's only tab: its screen and what was typed into it.

    Attributes:
        pod: the pod (= box) name.
        history: the lines above the prompt (limit lines, submitted lines, the agent's answers).
        typed: the text typed at the prompt since the last Enter.
        working: the last submitted line was accepted (the screen shows ``working``).
        submits: (epoch seconds the Enter arrived, the line submitted), in order.
        keys: every key or text sent (``send-keys`` arguments), with its arrival time.
        files: the box's files written through exec ($HOME-relative path -> content).
        streams: its control streams open now; opened: when each was opened (epoch seconds).
    """

    pod: str
    history: list[str] = field(default_factory=list)
    typed: str = ""
    working: bool = False
    submits: list[tuple[float, str]] = field(default_factory=list)
    keys: list[tuple[float, str]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    streams: set["FakeControl"] = field(default_factory=set)
    opened: list[float] = field(default_factory=list)
    activity: int = field(default_factory=lambda: int(time.time()))

    def screen(self) -> str:
        """The visible screen (what ``capture-pane -p -J`` prints), drawn as agentbox_sim.fake_agent draws Claude
        Code: the history (the limit line, each submitted line and the agent's answer to it), the spinner while
        it works, the prompt box with the typed text."""
        lines = ["", "  claude-code (emulated tab)", *self.history]
        if self.working:
            lines.append("\u2736 Composing\u2026 (3s \u00b7 \u2193 1.2k tokens \u00b7 esc to interrupt)")
        lines += ["\u256d" + "\u2500" * BOX_WIDTH + "\u256e",
                  ("\u2502 > " + self.typed).ljust(BOX_WIDTH + 1)[:BOX_WIDTH + 1] + "\u2502",
                  "\u2570" + "\u2500" * BOX_WIDTH + "\u256f", "  ? for shortcuts"]
        return "\n".join(lines[-40:]) + "\n"

    def changed(self) -> None:
        """The screen changed: every open control stream gets ``%output`` for the pane."""
        self.activity = int(time.time())
        for stream in list(self.streams):
            stream.emit(f"%output {PANE} x\n")


class _FakeProcess:
    """What `KubeEmulator._serve_exec_stream` needs of a process (``stdin.write``/``drain``/``close``,
    ``stdout``/``stderr`` readers, ``wait()``, ``returncode``); subclasses feed stdin (`feed`) and end (`end`)."""

    def __init__(self) -> None:
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.stdin = _Stdin(self)
        self.returncode: int | None = None
        self.pid = 0
        self._done = asyncio.Event()

    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def end(self, rc: int = 0) -> None:
        raise NotImplementedError

    async def wait(self) -> int:
        """Wait until the process ended; its exit code."""
        await self._done.wait()
        return self.returncode if self.returncode is not None else 0


class FakeControl(_FakeProcess):
    """One ``tmux -C attach`` of a fake tab, as a process object for `KubeEmulator._serve_exec_stream`
    (``stdin.write``/``drain``/``close``, ``stdout``/``stderr`` readers, ``wait()``, ``returncode``;
    ``kill_emulated()`` instead of a process group to kill)."""

    def __init__(self, owner: "FakeTabs", tab: FakeTab) -> None:
        super().__init__()
        self.owner, self.tab = owner, tab
        self._buffer = b""
        self._number = 0
        tab.streams.add(self)
        tab.opened.append(time.time())
        owner.streams_opened += 1
        now = int(time.time())
        self.emit(f"%begin {now} {self._next()} 0\n%end {now} {self._number} 0\n%session-changed $1 agentbox\n")

    def _next(self) -> int:
        self._number += 1
        return self._number

    def emit(self, text: str) -> None:
        """Write control-mode output (ignored once ended)."""
        if self.returncode is None:
            self.stdout.feed_data(text.encode())

    def feed(self, data: bytes) -> None:
        """Command lines from the client: each is run and answered with its block, in order."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                words = shlex.split(line)
            except ValueError:
                words = []
            ok, out = self.owner.run_command(self.tab, words) if words else (False, ["parse error"])
            now = int(time.time())
            n = self._next()
            body = "".join(x + "\n" for x in out)
            self.emit(f"%begin {now} {n} 1\n{body}%{'end' if ok else 'error'} {now} {n} 1\n")

    def end(self, rc: int = 0) -> None:
        """The client detached (or the pod went away): end the stream."""
        if self.returncode is not None:
            return
        self.stdout.feed_data(b"%exit\n")
        self.returncode = rc
        self.tab.streams.discard(self)
        self.stdout.feed_eof()
        self.stderr.feed_eof()
        self._done.set()

    def kill_emulated(self) -> None:
        """What a SIGKILL of the control client would do."""
        self.end(137)


class FakeCommand(_FakeProcess):
    """A one-shot command run with its stdin streamed (the emulator streams every exec with stdin, e.g. a login
    file written from stdin): stdin is collected until closed, then the command runs (:meth:`FakeTabs.__call__`)
    and its output and exit code come back."""

    def __init__(self, owner: "FakeTabs", namespace: str, pod: str, container: str, argv: list[str]) -> None:
        super().__init__()
        self.owner, self.where, self.argv = owner, (namespace, pod, container), argv
        self._data = b""
        self._task: asyncio.Task[None] | None = None

    def feed(self, data: bytes) -> None:
        """Bytes of stdin."""
        self._data += data

    def end(self, rc: int = 0) -> None:
        """stdin closed: run the command."""
        if self._task is None and self.returncode is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        out, err, rc = await self.owner(*self.where, self.argv, self._data)
        self._finish(out, err, rc)

    def _finish(self, out: bytes, err: bytes, rc: int) -> None:
        if self.returncode is not None:
            return
        self.stdout.feed_data(out)
        self.stderr.feed_data(err)
        self.returncode = rc
        self.stdout.feed_eof()
        self.stderr.feed_eof()
        self._done.set()

    def kill_emulated(self) -> None:
        """What a SIGKILL would do: no output, rc 137."""
        if self._task is not None:
            self._task.cancel()
        self._finish(b"", b"", 137)


class _Stdin:
    def __init__(self, proc: _FakeProcess) -> None:
        self._proc = proc
        self._closed = False

    def write(self, data: bytes) -> None:
        if data and not self._closed:
            self._proc.feed(data)

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self._closed = True
        self._proc.end(0)

    def is_closing(self) -> bool:
        return self._closed or self._proc.returncode is not None


class FakeTabs:
    """The exec handler of `KubeEmulator` for bench pods (see the module docstring).

    Attributes:
        tabs: pod name -> its :class:`FakeTab` (added by :meth:`add` when the pod runs).
        oneshot: one-shot exec calls by kind (``tmux <command>``, ``structured``, ``login:<op>``, other).
        streams_opened: control streams opened so far.
    """

    def __init__(self) -> None:
        self.tabs: dict[str, FakeTab] = {}
        self.oneshot: Counter[str] = Counter()
        self.streams_opened = 0
        self._structured = {tuple(s.argv) for a in _adapter_list() for s in a.structured_sources}

    def add(self, pod: str, files: dict[str, str] | None = None) -> FakeTab:
        """The pod runs: its tab exists from now on (`files`: what its entrypoint put in $HOME)."""
        tab = self.tabs.get(pod)
        if tab is None:
            tab = self.tabs[pod] = FakeTab(pod, files=dict(files or {}))
        return tab

    def limit(self, pod: str, line: str) -> None:
        """Print a limit line in the pod's tab (the agent stops on its usage limit)."""
        tab = self.tabs[pod]
        tab.history += ["", line]
        tab.working, tab.typed = False, ""
        tab.changed()

    def open_streams(self) -> int:
        """Control streams open now."""
        return sum(len(t.streams) for t in self.tabs.values())

    # ------------------------------------------------------------------ the ExecHandler protocol
    def refuse(self, namespace: str, pod: str, container: str) -> str | None:
        """A pod without its tab yet answers as a container not started."""
        return None if pod in self.tabs else "container not running"

    def release(self, namespace: str, pod: str) -> None:
        """The pod is gone: its tab and streams with it."""
        tab = self.tabs.pop(pod, None)
        if tab is not None:
            for stream in list(tab.streams):
                stream.end(137)

    async def spawn(self, namespace: str, pod: str, container: str, argv: list[str]) -> Any:
        """A streamed exec: the control client of ``tmux -C attach``, or a one-shot command fed by stdin."""
        tab = self.tabs.get(pod)
        if tab is None:
            raise LookupError("container not running")
        if argv[:1] == ["tmux"] and "-C" in argv:
            return FakeControl(self, tab)
        return FakeCommand(self, namespace, pod, container, argv)

    async def __call__(self, namespace: str, pod: str, container: str, argv: list[str],
                       stdin: bytes | None) -> tuple[bytes, bytes, int]:
        tab = self.tabs.get(pod)
        if tab is None:
            return b"", b"container not running\n", 126
        if argv[:1] == ["tmux"]:
            return self._tmux_oneshot(tab, argv[1:])
        if tuple(argv) in self._structured:
            self.oneshot["structured"] += 1
            return b"", b"", 3
        op = _LOGIN_SCRIPTS.get(argv[2]) if len(argv) >= 3 and argv[:2] == ["sh", "-c"] else None
        if op is None:
            self.oneshot[" ".join(argv[:2])] += 1
            return b"", b"", 0
        self.oneshot[f"login:{op}"] += 1
        path = argv[4] if len(argv) > 4 else ""
        if op == "write":
            tab.files[path] = (stdin or b"").decode()
        elif op == "replace":
            if path not in tab.files:
                return b"", b"", _adapter.LOGIN_FILE_MISSING_RC
            tab.files[path] = (stdin or b"").decode()
        elif op == "remove":
            tab.files.pop(path, None)
        elif op == "read":
            if path not in tab.files:
                return b"", b"", _adapter.LOGIN_FILE_MISSING_RC
            return tab.files[path].encode(), b"", 0
        return b"", b"", 0

    def _tmux_oneshot(self, tab: FakeTab, args: list[str]) -> tuple[bytes, bytes, int]:
        if args == ["-V"]:
            self.oneshot["tmux -V"] += 1
            return b"tmux 3.3a\n", b"", 0
        commands: list[list[str]] = [[]]
        for word in args:
            if word == ";":
                commands.append([])
            else:
                commands[-1].append(word)
        self.oneshot["tmux " + (commands[0][0] if commands[0] else "")] += 1
        out: list[str] = []
        for words in commands:
            if not words:
                continue
            ok, lines = self.run_command(tab, words)
            if not ok:
                return "".join(x + "\n" for x in out).encode(), ("".join(x + "\n" for x in lines)).encode(), 1
            out += lines
        return "".join(x + "\n" for x in out).encode(), b"", 0

    # ------------------------------------------------------------------ tmux commands
    def _vars(self, tab: FakeTab) -> dict[str, str]:
        return {"window_id": WINDOW, "window_index": "0", "window_name": TAB_NAME, "pane_id": PANE,
                "pane_current_command": COMMAND, "pane_pid": "100", "window_activity": str(tab.activity),
                "pane_tty": "/dev/pts/1", "session_name": "agentbox"}

    def _format(self, tab: FakeTab, text: str) -> str:
        values = self._vars(tab)
        return _VAR.sub(lambda m: values.get(m.group(1), ""), text)

    def run_command(self, tab: FakeTab, words: list[str]) -> tuple[bool, list[str]]:
        """Run one tmux command (its words, without ``tmux``) on the tab: (succeeded, output lines)."""
        verb, rest = words[0], words[1:]
        opts = _options(rest)
        if verb in ("has-session", "refresh-client", "select-window", "resize-window"):
            return True, []
        if verb == "list-windows":
            return True, [self._format(tab, opts.get("-F", "#{window_id}"))]
        if verb == "list-clients":
            return True, []
        if verb == "display-message":
            return True, [self._format(tab, opts.get("", ""))]
        if verb == "capture-pane":
            return True, tab.screen().rstrip("\n").split("\n")
        if verb == "send-keys":
            return self._send_keys(tab, rest)
        return False, [f"unknown command: {verb}"]

    def _send_keys(self, tab: FakeTab, rest: list[str]) -> tuple[bool, list[str]]:
        now = time.time()
        literal, keys, i = False, [], 0
        while i < len(rest):
            word = rest[i]
            if word == "-t":
                i += 2
                continue
            if word == "-l":
                literal = True
            elif word == "--":
                keys += rest[i + 1:]
                break
            else:
                keys.append(word)
            i += 1
        for key in keys:
            tab.keys.append((now, ("-l " if literal else "") + key))
            if literal:
                tab.typed += key
            elif key == "Enter":
                tab.submits.append((now, tab.typed))
                if tab.typed.strip():
                    tab.history += ["", "> " + tab.typed, "", "\u23fa Continuing the task where I left off."]
                    tab.working = True
                tab.typed = ""
            elif key in ("C-u", "C-c", "Escape"):
                tab.typed = ""
        tab.changed()
        return True, []


def _options(rest: list[str]) -> dict[str, str]:
    """tmux flags of one command: ``-F fmt``/``-t target`` -> value; the last bare word under ``""``."""
    out: dict[str, str] = {}
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in ("-F", "-t", "-A") and i + 1 < len(rest):
            out[word] = rest[i + 1]
            i += 2
            continue
        if not word.startswith("-"):
            out[""] = word
        i += 1
    return out


def _adapter_list() -> list[Any]:
    from controller.agents.registry import ADAPTERS

    return list(ADAPTERS.values())
