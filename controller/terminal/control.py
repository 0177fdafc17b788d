"""tmux control mode over one long-lived exec stream (``tmux -C attach``), source: tmux(1) "CONTROL MODE"
and https://github.com/tmux/tmux/wiki/Control-Mode (tmux 3.2+; checked against 3.3a).

One stream per box carries both directions:

* **commands**: one command per line on stdin; tmux answers each with a block ``%begin <time> <number>
  <flags>`` ... ``%end|%error <time> <number> <flags>`` in the order the commands were sent, so blocks are
  matched to callers first-in first-out.  Blocks with flags 0 are not ours (the ``attach`` command itself)
  and are skipped.  tmux never interleaves notifications inside a block.  A block ends only at the
  ``%end``/``%error`` line repeating its ``%begin``'s time and number (a screen line ``%end ...`` inside a
  captured pane does not end it unless it guesses both; and the box's screen is untrusted text anyway: what
  the box prints is never what decides ownership or credentials).
* **notifications**: ``%output %<pane> ...`` / ``%extended-output %<pane> ...`` mark the pane changed (its
  bytes are dropped at once: the watcher captures the screen it needs), ``%pause %<pane>`` (flow control,
  ``pause-after``) marks it changed and it is continued at its next capture; ``%window-add``,
  ``%window-close``, ``%unlinked-window-*``, ``%window-renamed``, ``%layout-change`` mark the tab list
  changed; ``%exit`` (and the end of the stream) ends the client.

The client attaches with ``-f ignore-size,pause-after=N`` (never sizes the human's windows, bounded
buffering in the box's tmux server) and without ``active-pane``; it sends no keys of its own.  tmux counts
it as a client whose ``client_activity`` moves with every command, so :func:`controller.terminal.tmux.parse_tabs`
leaves control clients out of the last human input.

Bounds: a line longer than ``max_line`` bytes is dropped (an ``%output`` line still marks its pane), a
block longer than ``max_block`` bytes answers :class:`ControlError` ``"output_too_large"`` to its caller.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Protocol

from controller.constants import TMUX_SESSION

MIN_VERSION = (3, 2)
"""Oldest tmux whose control mode has client flags (``attach -f ignore-size,pause-after=N``)."""

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%:=./,+-]+$")
_BAD_CHARS = re.compile(r"[\x00\n\r]")
_VERSION = re.compile(r"tmux (?:next-)?(\d+)\.(\d+)")
_PANE = re.compile(rb"^%(?:output|extended-output|pause) (%\d+)")
_TAB_EVENTS = (b"%window-add", b"%window-close", b"%unlinked-window-add", b"%unlinked-window-close",
               b"%window-renamed", b"%layout-change", b"%session-window-changed", b"%sessions-changed")


class Stream(Protocol):
    """The byte stream of one exec (``controller.kube.aexec.ExecStream``)."""

    async def write(self, data: bytes) -> None: ...
    async def read(self) -> tuple[int, bytes] | None: ...
    async def aclose(self) -> None: ...


class ControlError(RuntimeError):
    """A control-mode command could not be answered; ``reason``: ``"closed"`` (the stream ended),
    ``"timeout"``, ``"output_too_large"`` or ``"unquotable"`` (an argument tmux's parser cannot carry).
    ``sent``: the command was written to the stream (tmux may have run it; its reply never came), so
    running it again elsewhere could run it twice."""

    def __init__(self, message: str, reason: str, sent: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.sent = sent


@dataclass
class Reply:
    """One command's answer: ``ok`` (``%end``) or not (``%error``), its output lines (UTF-8, replaced)."""

    ok: bool
    lines: list[str]


def supported(version_output: str) -> bool:
    """True when ``tmux -V`` output (``"tmux 3.3a"``) names a version with control-mode client flags."""
    m = _VERSION.search(version_output)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= MIN_VERSION


def attach_argv(session: str = TMUX_SESSION, pause_after_s: int = 5) -> list[str]:
    """argv of the control client: attach to ``session`` without sizing its windows.

    :param pause_after_s: seconds of unread output after which tmux pauses a pane (flow control).
    """
    return ["tmux", "-C", "attach-session", "-t", f"={session}", "-f", f"ignore-size,pause-after={pause_after_s}"]


def quote(word: str) -> str:
    """One argument for tmux's command parser: as is when plain, else single-quoted (``'`` as ``'\\''``).

    :raises ControlError: ``"unquotable"`` for NUL, CR or LF (a line ends a command in control mode).
    """
    if _BAD_CHARS.search(word):
        raise ControlError("argument holds a line break", "unquotable")
    if _SAFE_WORD.match(word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def command_lines(argv: list[str]) -> list[str]:
    """The control-mode lines of a ``tmux`` argv (``argv[0] == "tmux"``, commands separated by ``";"``
    words), one line per command so each gets its own block."""
    if not argv or argv[0] != "tmux":
        raise ValueError("not a tmux argv")
    lines: list[str] = []
    words: list[str] = []
    for word in [*argv[1:], ";"]:
        if word == ";":
            if words:
                lines.append(" ".join(quote(w) for w in words))
            words = []
        else:
            words.append(word)
    return lines


@dataclass
class _Pending:
    future: asyncio.Future[Reply]
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    too_large: bool = False


class ControlClient:
    """tmux control mode on one stream; see the module docstring.

    Args:
        stream: the exec stream running :func:`attach_argv`.
        max_line, max_block: bounds in bytes (see the module docstring).
    Attributes:
        dirty: pane ids ("%3") with output since :meth:`take_dirty`.
        tabs_changed: a window was added, closed, renamed or re-laid out since :meth:`take_dirty`.
        changed: set whenever ``dirty`` or ``tabs_changed`` gains something (cleared by :meth:`take_dirty`).
        closed: set when the stream ended (``%exit``, connection lost, protocol violation).
        paused: panes tmux paused (continued by :meth:`resume_panes`).
    """

    def __init__(self, stream: Stream, *, max_line: int = 256 * 1024, max_block: int = 1024 * 1024) -> None:
        self.stream = stream
        self.max_line = max_line
        self.max_block = max_block
        self.dirty: set[str] = set()
        self.paused: set[str] = set()
        self.tabs_changed = True
        self.changed = asyncio.Event()
        self.closed = asyncio.Event()
        self.exit_reason: str | None = None
        self._waiting: list[_Pending] = []   # sent, block not started
        self._block: tuple[bytes, _Pending | None] | None = None  # (b"<time> <number>", pending or None)
        self._buf = b""
        self._skipping = False
        self._write_lock = asyncio.Lock()
        self.changed.set()  # the first look: every pane is unknown
        self._reader = asyncio.ensure_future(self._read_loop())

    # ------------------------------------------------------------------ commands
    async def command(self, argv: list[str], timeout: float = 10.0) -> list[Reply]:
        """Send a ``tmux`` argv (commands split on ``";"``) and return one :class:`Reply` per command.

        :raises ControlError: closed, timeout, output_too_large or unquotable.
        """
        lines = command_lines(argv)
        if self.closed.is_set():
            raise ControlError("control stream closed", "closed")
        loop = asyncio.get_running_loop()
        pending = [_Pending(loop.create_future()) for _ in lines]
        async with self._write_lock:
            self._waiting.extend(pending)
            try:
                await self.stream.write(("\n".join(lines) + "\n").encode())
            except Exception:
                self._fail_all("closed")
                # a failed write may still have delivered part of it: counted as sent
                raise ControlError("control stream closed", "closed", sent=True) from None
        try:
            async with asyncio.timeout(timeout):
                return [await p.future for p in pending]
        except TimeoutError:
            # the replies may still come: an out-of-step stream cannot be trusted any more
            await self.aclose("timeout")
            raise ControlError("control command timed out", "timeout", sent=True) from None
        except ControlError as exc:  # the stream ended while waiting: tmux may have run the command
            raise ControlError(str(exc), exc.reason, sent=True) from None

    def take_dirty(self) -> tuple[set[str], bool]:
        """Return and clear (changed panes, tab list changed)."""
        dirty, tabs = self.dirty, self.tabs_changed
        self.dirty, self.tabs_changed = set(), False
        self.changed.clear()
        return dirty, tabs

    async def resume_panes(self, panes: set[str]) -> None:
        """Continue panes tmux paused (``refresh-client -A '%N:continue'``)."""
        todo = sorted(panes & self.paused)
        self.paused -= set(todo)
        if todo:
            await self.command(["tmux", "refresh-client", *sum((["-A", f"{p}:continue"] for p in todo), [])])

    async def aclose(self, reason: str = "closed") -> None:
        """Detach (end the stream) and fail the waiting callers."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self._fail_all(reason if reason in ("timeout", "output_too_large") else "closed")
        self.closed.set()
        self.changed.set()
        self._reader.cancel()
        try:
            await self.stream.aclose()
        except Exception:  # a dead stream: nothing to report
            pass

    # ------------------------------------------------------------------ parsing
    def _fail_all(self, reason: str) -> None:
        waiting = self._waiting
        if self._block is not None and self._block[1] is not None:
            waiting = [self._block[1], *waiting]
        self._waiting, self._block = [], None
        for p in waiting:
            if not p.future.done():
                p.future.set_exception(ControlError("control stream closed", reason))

    async def _read_loop(self) -> None:
        reason = "closed"
        try:
            while (item := await self.stream.read()) is not None:
                if item[0] == 1:
                    self._feed(item[1])
                if self.exit_reason is not None:
                    reason = self.exit_reason
                    break
        except asyncio.CancelledError:
            raise
        except Exception:  # transport or protocol failure: the caller reconnects
            reason = "closed"
        if self.exit_reason is None:
            self.exit_reason = reason
        self._fail_all("closed")
        self.closed.set()
        self.changed.set()

    def _feed(self, data: bytes) -> None:
        self._buf += data
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                if len(self._buf) > self.max_line:
                    self._note_long(self._buf)
                    self._buf, self._skipping = b"", True
                return
            line, self._buf = self._buf[:nl], self._buf[nl + 1:]
            if self._skipping:
                self._skipping = False
                continue
            if len(line) > self.max_line:
                self._note_long(line)
                continue
            self._line(line.rstrip(b"\r"))

    def _note_long(self, head: bytes) -> None:
        if self._block is None:
            m = _PANE.match(head)
            if m:
                self._mark(m.group(1).decode())
        elif self._block[1] is not None:
            self._block[1].too_large = True

    def _mark(self, pane: str) -> None:
        self.dirty.add(pane)
        self.changed.set()

    def _line(self, line: bytes) -> None:
        if self._block is not None:
            key, pending = self._block
            if (line.startswith(b"%end ") or line.startswith(b"%error ")) and \
                    line.split(b" ", 1)[1].rsplit(b" ", 1)[0] == key:
                self._block = None
                if pending is not None and not pending.future.done():
                    if pending.too_large:
                        pending.future.set_exception(ControlError("control reply too large", "output_too_large"))
                    else:
                        pending.future.set_result(Reply(line.startswith(b"%end "),
                                                        [x.decode("utf-8", "replace") for x in pending.lines]))
            elif pending is not None and not pending.too_large:
                pending.size += len(line) + 1
                if pending.size > self.max_block:
                    pending.too_large, pending.lines = True, []
                else:
                    pending.lines.append(line)
            return
        if line.startswith(b"%begin "):
            parts = line.split(b" ")
            if len(parts) != 4:
                return
            ours = parts[3] != b"0"
            pending = self._waiting.pop(0) if ours and self._waiting else None
            self._block = (parts[1] + b" " + parts[2], pending)
            return
        m = _PANE.match(line)
        if m:
            pane = m.group(1).decode()
            if line.startswith(b"%pause"):
                self.paused.add(pane)
            self._mark(pane)
        elif line.startswith(_TAB_EVENTS):
            self.tabs_changed = True
            self.changed.set()
        elif line.startswith(b"%exit"):
            self.exit_reason = "exit: " + line[6:].decode("utf-8", "replace")[:200] if len(line) > 6 else "exit"
