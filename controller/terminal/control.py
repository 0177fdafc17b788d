"""tmux control mode over one long-lived exec stream (``tmux -C attach``), source: tmux(1) "CONTROL MODE"
and https://github.com/tmux/tmux/wiki/Control-Mode (tmux 3.2+; checked against 3.3a).

One stream per box carries both directions:

* **commands**: one command per line on stdin; tmux answers each with a block ``%begin <time> <number>
  <flags>`` ... ``%end|%error <time> <number> <flags>`` in the order the commands were sent, so blocks are
  matched to callers first-in first-out.  Blocks with flags 0 are not ours (the ``attach`` command itself)
  and are skipped.  Notifications do not come inside a block, except ``%pause``/``%continue`` (tmux 3.3a
  sends them inside the block of the command during which they happened), handled as notifications
  wherever they come.  A block ends only at the ``%end``/``%error`` line repeating its ``%begin``'s time and
  number.  Command output inside a block is NOT escaped (a captured screen is raw text), and both numbers
  are guessable (seconds, and a server-wide counter any tmux client in the box can watch), so a pane can
  print a line that ends a capture's block early and forge the blocks after it.  Every :meth:`ControlClient.command`
  therefore ends with a sync command, ``display-message -p abx-sync-<random>``: the replies of a command
  are delivered only when the block after them holds exactly that nonce, which nothing in the box can know;
  anything else (a wrong or missing nonce, an ``%end`` outside a block, a ``%begin`` nobody waits for) is
  a protocol violation that closes the stream (reason ``"protocol"``), so the callers fall back to the
  one-shot exec.  (A box that replaces ``tmux`` itself answers the one-shot exec too: nothing tmux says
  about a box decides anything outside that box.)
* **notifications**: ``%output %<pane> ...`` / ``%extended-output %<pane> ...`` mark the pane changed (its
  bytes are dropped at once: the watcher captures the screen it needs), ``%pause %<pane>`` (flow control,
  ``pause-after``) marks it changed and it is continued at its next capture.  Only panes of the last tab
  list (:attr:`ControlClient.known`) are marked; another pane id marks the tab list changed instead, so
  forged ids cannot grow the sets; ``%window-add``,
  ``%window-close``, ``%unlinked-window-*``, ``%window-renamed``, ``%layout-change`` mark the tab list
  changed; ``%exit`` (and the end of the stream) ends the client.

The client attaches with ``-f ignore-size,pause-after=N`` (never sizes the human's windows, bounded
buffering in the box's tmux server) and without ``active-pane``; it sends no keys of its own.  tmux counts
it as a client whose ``client_activity`` moves with every command, so :func:`controller.terminal.tmux.parse_tabs`
leaves control clients out of the last human input.

Bounds (the stream is written by a process in the box): lines are split in time linear in the bytes
received; a line longer than ``max_line`` bytes is dropped (an ``%output`` line still marks its pane), a
block longer than ``max_block`` bytes answers :class:`ControlError` ``"output_too_large"`` to its caller;
more than ``max_rate`` bytes within ``rate_window_s`` seconds closes the stream (reason ``"flood"``; real
tmux stays far below it because the follower pauses a pane's output between two captures).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Protocol

from controller.constants import TMUX_SESSION
from controller.terminal import tmux

MIN_VERSION = (3, 2)
"""Oldest tmux whose control mode has client flags (``attach -f ignore-size,pause-after=N``)."""

_SAFE_WORD = re.compile(r"^(?:%\d+|[A-Za-z0-9_@:=./,+-]+)$")  # "%" only as a pane id: "%0:continue" is a parse error
_PAUSE = re.compile(rb"^%(?:pause|continue) (%\d{1,10})$")
_BAD_CHARS = re.compile(r"[\x00\n\r]")
_VERSION = re.compile(r"tmux (?:next-)?(\d+)\.(\d+)")
_PANE = re.compile(rb"^%(?:output|extended-output) (%\d{1,10})(?: |$)")
_BLOCK = re.compile(rb"^%(begin|end|error) (\d{1,20}) (\d{1,20}) (\d{1,10})$")
SYNC_PREFIX = "abx-sync-"
MAX_DIRTY = 1024
"""Most pane ids marked before the first tab list (then only known panes are)."""
_TAB_EVENTS = (b"%window-add", b"%window-close", b"%unlinked-window-add", b"%unlinked-window-close",
               b"%window-renamed", b"%layout-change", b"%session-window-changed", b"%sessions-changed")


class Stream(Protocol):
    """The byte stream of one exec (``controller.kube.aexec.ExecStream``)."""

    async def write(self, data: bytes) -> None: ...
    async def read(self) -> tuple[int, bytes] | None: ...
    async def aclose(self) -> None: ...


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


def supported(version_output: str) -> bool:
    """True when ``tmux -V`` output (``"tmux 3.3a"``) names a version with control-mode client flags."""
    m = _VERSION.search(version_output)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= MIN_VERSION


def attach_argv(session: str = TMUX_SESSION, pause_after_s: int = 5) -> list[str]:
    """argv of the control client: attach to ``session`` without sizing its windows, and never start a tmux
    server (``-N``).

    ``attach-session`` starts a server when none runs (tmux 3.3a), which then exits at once for want of a
    session. While the box has no session yet (its entrypoint has not started it) the stream retries, and a
    ``tmux new-session`` that reaches such a short-lived server fails ("server exited unexpectedly"; the
    box image's entrypoint runs under ``set -e``), or makes the box's session on a server our exec started
    (its environment, not the entrypoint's). ``-N`` (tmux 3.2+, as control mode's client flags) makes an
    attach without a server fail like any attach without the session.

    :param pause_after_s: seconds of unread output after which tmux pauses a pane (flow control).
    """
    return ["tmux", "-N", "-C", "attach-session", "-t", f"={session}", "-f",
            f"ignore-size,pause-after={pause_after_s}"]


def quote(word: str) -> str:
    """One argument for tmux's command parser: as is when plain, else single-quoted (``'`` as ``'\\''``).

    Plain: letters, digits and ``_@:=./,+-``, or a bare pane id (``%3``); tmux 3.3a's parser refuses a
    word such as ``%3:continue`` unquoted ("parse error: syntax error").

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
    reply: Reply | None = None                   # held until the sync block proves the stream in step
    nonce: bytes | None = None                   # set on the sync command of a group
    group: list["_Pending"] = field(default_factory=list)  # the sync command's: the commands it vouches for


class ControlClient:
    """tmux control mode on one stream; see the module docstring.

    Args:
        stream: the exec stream running :func:`attach_argv`.
        max_line, max_block: bounds in bytes (see the module docstring).
        max_rate, rate_window_s: most bytes read within ``rate_window_s`` seconds before the stream is
            closed as a flood (8 MiB in 10 s by default: parsing costs about 0.2 s of CPU per MiB of short
            lines, and the event loop serves every box).
    Attributes:
        known: pane ids of the last tab list (set by the caller; ``None`` until then).
        received: bytes read from the stream; ``blocks``: well-formed ``%begin`` lines read.
        dirty: pane ids ("%3") with output since :meth:`take_dirty`.
        tabs_changed: a window was added, closed, renamed or re-laid out since :meth:`take_dirty`.
        changed: set whenever ``dirty`` or ``tabs_changed`` gains something (cleared by :meth:`take_dirty`).
        closed: set when the stream ended (``%exit``, connection lost, protocol violation, flood).
        exit_reason: why it ended: ``"closed"``, ``"exit"``, ``"timeout"``, ``"protocol"``, ``"flood"``
            (a fixed word: nothing the box printed).
        paused: panes tmux paused (continued by :meth:`resume_panes`).
    """

    def __init__(self, stream: Stream, *, max_line: int = 256 * 1024, max_block: int = 1024 * 1024,
                 max_rate: int = 8 * 1024 * 1024, rate_window_s: float = 10.0) -> None:
        self.stream = stream
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
        self.changed = asyncio.Event()
        self.closed = asyncio.Event()
        self.exit_reason: str | None = None
        self._waiting: list[_Pending] = []   # sent, block not started
        self._block: tuple[bytes, _Pending | None] | None = None  # (b"<time> <number>", pending or None)
        self._partial: list[bytes] = []
        self._partial_len = 0
        self._skipping = False
        self._write_lock = asyncio.Lock()
        self.changed.set()  # the first look: every pane is unknown
        self._reader = asyncio.ensure_future(self._read_loop())

    # ------------------------------------------------------------------ commands
    async def command(self, argv: list[str], timeout: float = 10.0) -> list[Reply]:
        """Send a ``tmux`` argv (commands split on ``";"``) and return one :class:`Reply` per command.

        :raises ControlError: closed, timeout, output_too_large, protocol, flood or unquotable.
        """
        lines = command_lines(argv)
        if self.closed.is_set():
            raise ControlError("control stream closed", "closed")
        loop = asyncio.get_running_loop()
        pending = [_Pending(loop.create_future()) for _ in lines]
        nonce = SYNC_PREFIX + secrets.token_hex(12)
        lines.append(f"display-message -p {nonce}")
        pending.append(_Pending(loop.create_future(), nonce=nonce.encode(), group=list(pending)))
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
                return list(await asyncio.gather(*(p.future for p in pending)))[:-1]
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

    async def pause_panes(self, panes: set[str]) -> None:
        """Pause panes' output to this client (``refresh-client -A '%N:pause'``) until :meth:`resume_panes`:
        between two captures a busy pane (``yes``) sends one ``%output``, not megabytes.  Pausing is per
        client: the pane, the agent and a human client are not affected (``off`` would stop tmux reading
        the pane once every client turned it off: never used)."""
        todo = sorted(p for p in panes - self.paused if self.known is None or p in self.known)
        self.paused |= set(todo)
        if todo:
            await self.command(["tmux", "refresh-client", *sum((["-A", f"{p}:pause"] for p in todo), [])])

    async def resume_panes(self, panes: set[str]) -> None:
        """Continue panes tmux paused (``refresh-client -A '%N:continue'``)."""
        todo = sorted(panes & self.paused)
        self.paused -= set(todo)
        if todo:
            await self.command(["tmux", "refresh-client", *sum((["-A", f"{p}:continue"] for p in todo), [])])

    async def resume_and_capture(self, panes: set[str], timeout: float = 10.0) -> dict[str, Reply | None]:
        """Continue the paused ones of `panes`, then capture each (``capture-pane -p -J``), in ONE round trip
        (one line per command, one sync block): a changed pane cost three round trips (pause, continue,
        capture); at a reset a thousand boxes' panes change together.

        Returns:
            pane id -> its capture's :class:`Reply`, or None for a pane whose screen was over ``max_block``
            (captured alone, so one large pane does not cost the others their capture).
        Raises:
            ControlError: as :meth:`command` (closed, timeout, protocol, flood).
        """
        order = sorted(panes)
        todo = sorted(panes & self.paused)
        self.paused -= set(todo)
        argv = ["tmux"]
        if todo:
            argv += ["refresh-client", *sum((["-A", f"{p}:continue"] for p in todo), []), ";"]
        for pane in order:
            argv += [*tmux.capture_one_argv(pane)[1:], ";"]
        if len(argv) == 1:
            return {}
        try:
            replies = await self.command(argv[:-1], timeout)
        except ControlError as exc:
            if exc.reason != "output_too_large":
                raise
        else:
            return dict(zip(order, replies[1:] if todo else replies))
        out: dict[str, Reply | None] = {}
        for pane in order:  # tmux ran them all (the sync block came): capture one by one to tell which
            try:
                out[pane] = (await self.command(tmux.capture_one_argv(pane), timeout))[0]
            except ControlError as exc:
                if exc.reason != "output_too_large":
                    raise
                out[pane] = None
        return out

    async def aclose(self, reason: str = "closed") -> None:
        """Detach (end the stream) and fail the waiting callers."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self._fail_all(reason if reason in ("timeout", "protocol", "flood") else "closed")
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
                elif not self._account(len(item[1])):  # stderr is dropped, but counts towards the bound
                    self._violation("flood")
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

    def _violation(self, reason: str, pending: _Pending | None = None) -> None:
        """The stream broke the protocol or its bounds: fail every caller (``pending``: a sync command whose
        block ended, and its group) and stop reading it (the read loop ends)."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self._fail_all(reason)
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

    def _feed(self, data: bytes) -> None:
        """Split ``data`` into lines (linear in its size: no copy of the rest per line)."""
        if not self._account(len(data)):
            self._violation("flood")
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
        self.changed.set()

    def _end_block(self, line: bytes, pending: _Pending | None) -> None:
        self._block = None
        if pending is None:
            return
        ok = line.startswith(b"%end ")
        if pending.nonce is not None:  # the sync block: proves every reply before it came from tmux
            if not ok or pending.too_large or pending.lines != [pending.nonce]:
                self._violation("protocol", pending)
                return
            for p in pending.group:
                if p.future.done():
                    continue
                if p.too_large:
                    p.future.set_exception(ControlError("control reply too large", "output_too_large"))
                elif p.reply is None:
                    self._violation("protocol", pending)
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
                self._violation("protocol")
                return
            ours = m.group(4) != b"0"
            if ours and not self._waiting:
                self._violation("protocol")  # a reply nobody asked for: forged, or the stream is out of step
                return
            pending = self._waiting.pop(0) if ours else None
            self.blocks += 1
            self._block = (m.group(2) + b" " + m.group(3), pending)
            return
        if line.startswith((b"%end ", b"%error ")):
            self._violation("protocol")  # an end outside any block: a block was ended early by forged text
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
            self.changed.set()
        elif line == b"%exit" or line.startswith(b"%exit "):
            self.exit_reason = "exit"
