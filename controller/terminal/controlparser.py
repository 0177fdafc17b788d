"""The tmux control-mode protocol, parsed: bytes read from the control stream in, replies to the waiting
commands and pane notifications out (see :mod:`controller.terminal.control` for the protocol and its
bounds). Pure: no I/O and no clock but the monotonic one of the rate bound; it resolves the futures of
the commands it is told to expect (:meth:`ControlParser.expect`) and calls ``on_change`` when a pane or
the tab list changed. Everything it reads was written by a process in the box: a line, a block and the
byte rate are bounded, and anything out of step fails every caller instead of answering one wrongly.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Callable

_PAUSE = re.compile(rb"^%(?:pause|continue) (%\d{1,10})$")
_PANE = re.compile(rb"^%(?:output|extended-output) (%\d{1,10})(?: |$)")
_BLOCK = re.compile(rb"^%(begin|end|error) (\d{1,20}) (\d{1,20}) (\d{1,10})$")
MAX_DIRTY = 1024
"""Most pane ids marked before the first tab list (then only known panes are)."""
_TAB_EVENTS = (b"%window-add", b"%window-close", b"%unlinked-window-add", b"%unlinked-window-close",
               b"%window-renamed", b"%layout-change", b"%session-window-changed", b"%sessions-changed")


class ControlError(RuntimeError):
    """A control-mode command could not be answered; ``reason``: ``"closed"`` (the stream ended),
    ``"timeout"``, ``"output_too_large"``, ``"protocol"`` (the stream broke the protocol: forged or
    out-of-step blocks), ``"flood"`` (more bytes than the rate bound) or ``"unquotable"`` (an argument
    tmux's parser cannot carry). ``sent``: the command was written to the stream (tmux may have run it; its
    reply never came), so running it again elsewhere could run it twice."""

    def __init__(self, message: str, reason: str, sent: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.sent = sent


@dataclass
class Reply:
    """One command's answer: ``ok`` (``%end``) or not (``%error``), its output lines (UTF-8, replaced)."""

    ok: bool
    lines: list[str]


@dataclass
class Pending:
    """One command sent and not answered yet: its future gets its :class:`Reply` (or a :class:`ControlError`).

    Attributes:
        lines, size, too_large: its block's output so far (bytes, bounded by ``max_block``).
        reply: held until the sync block proves the stream in step.
        nonce: set on the sync command of a group; ``group``: the commands that sync command vouches for.
    """

    future: asyncio.Future[Reply]
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    too_large: bool = False
    reply: Reply | None = None                   # held until the sync block proves the stream in step
    nonce: bytes | None = None                   # set on the sync command of a group
    group: list["Pending"] = field(default_factory=list)  # the sync command's: the commands it vouches for


class ControlParser:
    """The protocol state of one control stream.

    Args:
        max_line, max_block: bounds in bytes (a longer line is dropped; a longer block answers
            ``"output_too_large"``).
        max_rate, rate_window_s: most bytes within ``rate_window_s`` seconds (stdout and stderr) before the
            stream is a flood.
        on_change: called whenever ``dirty`` or ``tabs_changed`` gains something.
    Attributes:
        known: pane ids of the last tab list (set by the caller; ``None`` until then).
        received: bytes read from the stream; ``blocks``: well-formed ``%begin`` lines read.
        dirty: pane ids ("%3") with output since :meth:`take_dirty`.
        tabs_changed: a window was added, closed, renamed or re-laid out since :meth:`take_dirty`.
        paused: panes tmux paused (or the caller asked to pause).
        exit_reason: why the stream ended (``"exit"``, ``"protocol"``, ``"flood"``, or the caller's
            reason); None while it runs. A fixed word: nothing the box printed.
    """

    def __init__(self, *, max_line: int, max_block: int, max_rate: int, rate_window_s: float,
                 on_change: Callable[[], None]) -> None:
        self.max_line = max_line
        self.max_block = max_block
        self.max_rate = max_rate
        self.rate_window_s = rate_window_s
        self.known: frozenset[str] | None = None
        self.received = 0
        self.blocks = 0
        self._window = (time.monotonic(), 0)
        self.dirty: set[str] = set()
        self.paused: set[str] = set()
        self.tabs_changed = True
        self.exit_reason: str | None = None
        self._on_change = on_change
        self._waiting: list[Pending] = []   # sent, block not started
        self._block: tuple[bytes, Pending | None] | None = None  # (b"<time> <number>", pending or None)
        self._partial: list[bytes] = []
        self._partial_len = 0
        self._skipping = False

    def expect(self, pending: list[Pending]) -> None:
        """Commands about to be written: their blocks are matched to them in this order."""
        self._waiting.extend(pending)

    def take_dirty(self) -> tuple[set[str], bool]:
        """Return and clear (changed panes, tab list changed)."""
        dirty, tabs = self.dirty, self.tabs_changed
        self.dirty, self.tabs_changed = set(), False
        return dirty, tabs

    def feed_stderr(self, data: bytes) -> None:
        """Take stderr bytes of the stream: dropped, but counted towards the rate bound (a flood)."""
        if not self._account(len(data)):
            self.violation("flood")

    def fail_all(self, reason: str) -> None:
        """Fail every caller waiting for a reply (``ControlError(reason)``) and forget them."""
        waiting = self._waiting
        if self._block is not None and self._block[1] is not None:
            waiting = [self._block[1], *waiting]
        self._waiting, self._block = [], None
        for p in waiting:
            if not p.future.done():
                p.future.set_exception(ControlError("control stream closed", reason))

    def violation(self, reason: str, pending: Pending | None = None) -> None:
        """The stream broke the protocol or its bounds: fail every caller (``pending``: a sync command whose
        block ended, and its group) and stop reading it (the read loop ends)."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self.fail_all(reason)
        for p in ([pending, *pending.group] if pending is not None else []):
            if not p.future.done():
                p.future.set_exception(ControlError("control stream out of step", reason))

    def _account(self, size: int) -> bool:
        """Count ``size`` bytes read; False when the window's total is over ``max_rate``."""
        self.received += size
        now = time.monotonic()
        since, count = self._window
        if now - since > self.rate_window_s:
            since, count = now, 0
        self._window = (since, count + size)
        return count + size <= self.max_rate

    def feed(self, data: bytes) -> None:
        """Take stdout bytes of the stream: split ``data`` into lines (linear in its size: no copy of the rest
        per line) and act on each (replies, notifications); a flood or a protocol violation sets
        ``exit_reason`` (then the caller stops reading)."""
        if not self._account(len(data)):
            self.violation("flood")
            return
        lines = data.split(b"\n")  # one C-level pass; the last item is the unfinished line
        rest = lines.pop()
        for piece in lines:
            if self._skipping:
                self._skipping = False
                continue
            if self._partial:
                if self._partial_len + len(piece) > self.max_line:
                    self._note_long(self._partial[0][:64])
                    self._partial, self._partial_len = [], 0
                    continue
                piece = b"".join(self._partial) + piece
                self._partial, self._partial_len = [], 0
            elif len(piece) > self.max_line:
                self._note_long(piece[:64])
                continue
            self._line(piece[:-1] if piece.endswith(b"\r") else piece)
            if self.exit_reason is not None:
                return
        if rest and not self._skipping:
            if self._partial_len + len(rest) > self.max_line:
                self._note_long((self._partial[0] if self._partial else rest)[:64])
                self._partial, self._partial_len, self._skipping = [], 0, True
            else:
                self._partial.append(rest)
                self._partial_len += len(rest)

    def _note_long(self, head: bytes) -> None:
        if self._block is None:
            m = _PANE.match(head)
            if m:
                self._mark(m.group(1).decode())
        elif self._block[1] is not None:
            self._block[1].too_large = True

    def _flow(self, line: bytes, pane: str) -> None:
        """``%pause``: tmux paused the pane (``pause-after``): changed, continued at its capture; one this
        client asked for (:meth:`pause_panes`) is already known.  ``%continue``: nothing new to see."""
        if line.startswith(b"%pause"):
            if pane not in self.paused:
                self._mark(pane, paused=True)
        else:
            self.paused.discard(pane)

    def _mark(self, pane: str, paused: bool = False) -> None:
        if (pane not in self.known) if self.known is not None else len(self.dirty) >= MAX_DIRTY:
            self.tabs_changed = True  # a pane the last list did not show: list again
        else:
            self.dirty.add(pane)
            if paused:
                self.paused.add(pane)
        self._on_change()

    def _end_block(self, line: bytes, pending: Pending | None) -> None:
        self._block = None
        if pending is None:
            return
        ok = line.startswith(b"%end ")
        if pending.nonce is not None:  # the sync block: proves every reply before it came from tmux
            if not ok or pending.too_large or pending.lines != [pending.nonce]:
                self.violation("protocol", pending)
                return
            for p in pending.group:
                if p.future.done():
                    continue
                if p.too_large:
                    p.future.set_exception(ControlError("control reply too large", "output_too_large"))
                elif p.reply is None:
                    self.violation("protocol", pending)
                    return
                else:
                    p.future.set_result(p.reply)
            if not pending.future.done():
                pending.future.set_result(Reply(True, []))
            return
        if not pending.too_large:
            pending.reply = Reply(ok, [x.decode("utf-8", "replace") for x in pending.lines])
            pending.lines = []

    def _line(self, line: bytes) -> None:
        if self._block is None and not line.startswith(b"%"):
            return  # not protocol (a banner, noise): ignored
        if self._block is not None:
            key, pending = self._block
            flow = _PAUSE.match(line)
            if flow is not None:
                # tmux 3.3a sends %pause/%continue inside the block of the command that caused them (a
                # refresh-client -A, or any command while a pane falls behind): a notification, not output.
                # A screen line reading exactly "%pause %3" only costs a capture and a continue.
                self._flow(line, flow.group(1).decode())
                return
            if line.startswith((b"%end ", b"%error ")):
                m = _BLOCK.match(line)
                if m and m.group(2) + b" " + m.group(3) == key:
                    self._end_block(line, pending)
                    return
            if pending is not None and not pending.too_large:
                pending.size += len(line) + 1
                if pending.size > self.max_block:
                    pending.too_large, pending.lines = True, []
                else:
                    pending.lines.append(line)
            return
        if line.startswith(b"%begin "):
            m = _BLOCK.match(line)
            if m is None:
                self.violation("protocol")
                return
            ours = m.group(4) != b"0"
            if ours and not self._waiting:
                self.violation("protocol")  # a reply nobody asked for: forged, or the stream is out of step
                return
            pending = self._waiting.pop(0) if ours else None
            self.blocks += 1
            self._block = (m.group(2) + b" " + m.group(3), pending)
            return
        if line.startswith((b"%end ", b"%error ")):
            self.violation("protocol")  # an end outside any block: a block was ended early by forged text
            return
        flow = _PAUSE.match(line)
        if flow is not None:
            self._flow(line, flow.group(1).decode())
            return
        m = _PANE.match(line)
        if m:
            self._mark(m.group(1).decode())
        elif line.startswith(_TAB_EVENTS):
            self.tabs_changed = True
            self._on_change()
        elif line == b"%exit" or line.startswith(b"%exit "):
            self.exit_reason = "exit"
