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
  therefore ends with a sync command, ``display-message -p abx-sync-<random>-<n>`` (96 random bits per client,
  a counter per command): the replies of a command are delivered only when the block after them holds exactly
  that nonce, which nothing in the box can know;
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

Parsing is :class:`controller.terminal.controlparser.ControlParser` (bytes in, replies and pane notifications
out, no I/O); this module holds the connection: the commands written, their replies awaited, the read loop
and the end of the stream.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
from typing import Protocol

from controller.constants import TMUX_SESSION
from controller.terminal import tmux
from controller.terminal.controlparser import MAX_DIRTY, ControlError, ControlParser, Pending, Reply

__all__ = ["MAX_DIRTY", "MIN_VERSION", "SYNC_PREFIX", "ControlClient", "ControlError", "Reply", "Stream",
           "attach_argv", "command_lines", "quote", "supported"]

MIN_VERSION = (3, 2)
"""Oldest tmux whose control mode has client flags (``attach -f ignore-size,pause-after=N``)."""

_SAFE_WORD = re.compile(r"^(?:%\d+|[A-Za-z0-9_@:=./,+-]+)$")  # "%" only as a pane id: "%0:continue" is a parse error
_BAD_CHARS = re.compile(r"[\x00\n\r]")
_VERSION = re.compile(r"tmux (?:next-)?(\d+)\.(\d+)")
SYNC_PREFIX = "abx-sync-"


class Stream(Protocol):
    """The byte stream of one exec (``controller.kube.aexec.ExecStream``)."""

    async def write(self, data: bytes) -> None: ...
    async def read(self) -> tuple[int, bytes] | None: ...
    async def aclose(self) -> None: ...



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



class ControlClient:
    """tmux control mode on one stream; see the module docstring.

    Args:
        stream: the exec stream running :func:`attach_argv`.
        max_line, max_block: bounds in bytes (see the module docstring).
        max_rate, rate_window_s: most bytes read within ``rate_window_s`` seconds before the stream is
            closed as a flood (8 MiB in 10 s by default: parsing costs about 0.2 s of CPU per MiB of short
            lines, and the event loop serves every box).
    Attributes:
        parser: the protocol state (:class:`~controller.terminal.controlparser.ControlParser`); the
            attributes below are its, read (and ``known``, ``paused``, ``max_block`` set) through the client.
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
        self.changed = asyncio.Event()
        self.closed = asyncio.Event()
        self.parser = ControlParser(max_line=max_line, max_block=max_block, max_rate=max_rate,
                                    rate_window_s=rate_window_s, on_change=self.changed.set)
        self._write_lock = asyncio.Lock()
        # Sync nonces: a random part per client (nothing in the box sees our command lines) and a counter, so
        # a command costs no call to the OS's random source (at a reset, 500 commands at one instant).
        self._sync = f"{SYNC_PREFIX}{secrets.token_hex(12)}-"
        self._syncs = itertools.count()
        self.changed.set()  # the first look: every pane is unknown
        self._reader = asyncio.ensure_future(self._read_loop())

    # ------------------------------------------------------------------ the parser's state
    @property
    def known(self) -> frozenset[str] | None:
        """Pane ids of the last tab list (set by the caller); None until then."""
        return self.parser.known

    @known.setter
    def known(self, panes: frozenset[str] | None) -> None:
        self.parser.known = panes

    @property
    def paused(self) -> set[str]:
        """Panes tmux paused, or this client asked to pause."""
        return self.parser.paused

    @paused.setter
    def paused(self, panes: set[str]) -> None:
        self.parser.paused = panes

    @property
    def max_block(self) -> int:
        """Most bytes of one reply block (a longer one answers ``"output_too_large"``)."""
        return self.parser.max_block

    @max_block.setter
    def max_block(self, size: int) -> None:
        self.parser.max_block = size

    @property
    def dirty(self) -> set[str]:
        """Pane ids with output since :meth:`take_dirty`."""
        return self.parser.dirty

    @property
    def tabs_changed(self) -> bool:
        """The tab list changed since :meth:`take_dirty`."""
        return self.parser.tabs_changed

    @property
    def exit_reason(self) -> str | None:
        """Why the stream ended (a fixed word); None while it runs."""
        return self.parser.exit_reason

    @property
    def received(self) -> int:
        """Bytes read from the stream (stdout and stderr)."""
        return self.parser.received

    @property
    def blocks(self) -> int:
        """Well-formed ``%begin`` lines read."""
        return self.parser.blocks

    # ------------------------------------------------------------------ commands
    async def command(self, argv: list[str], timeout: float = 10.0) -> list[Reply]:
        """Send a ``tmux`` argv (commands split on ``";"``) and return one :class:`Reply` per command.

        :raises ControlError: closed, timeout, output_too_large, protocol, flood or unquotable.
        """
        lines = command_lines(argv)
        if self.closed.is_set():
            raise ControlError("control stream closed", "closed")
        loop = asyncio.get_running_loop()
        pending = [Pending(loop.create_future()) for _ in lines]
        nonce = f"{self._sync}{next(self._syncs):x}"
        lines.append(f"display-message -p {nonce}")
        pending.append(Pending(loop.create_future(), nonce=nonce.encode(), group=list(pending)))
        async with self._write_lock:
            self.parser.expect(pending)
            try:
                await self.stream.write(("\n".join(lines) + "\n").encode())
            except Exception:
                self.parser.fail_all("closed")
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
        dirty, tabs = self.parser.take_dirty()
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
        if self.parser.exit_reason is None:
            self.parser.exit_reason = reason
        self.parser.fail_all(reason if reason in ("timeout", "protocol", "flood") else "closed")
        self.closed.set()
        self.changed.set()
        self._reader.cancel()
        try:
            await self.stream.aclose()
        except Exception:  # a dead stream: nothing to report
            pass

    async def _read_loop(self) -> None:
        """Read the stream into the parser until it ends (or the parser ends it), then close: the waiting
        callers fail with ``"closed"``, ``closed`` and ``changed`` are set."""
        parser = self.parser
        reason = "closed"
        try:
            while (item := await self.stream.read()) is not None:
                if item[0] == 1:
                    parser.feed(item[1])
                else:
                    parser.feed_stderr(item[1])  # stderr is dropped, but counts towards the bound
                if parser.exit_reason is not None:
                    reason = parser.exit_reason
                    break
        except asyncio.CancelledError:
            raise
        except Exception:  # transport or protocol failure: the caller reconnects
            reason = "closed"
        if parser.exit_reason is None:
            parser.exit_reason = reason
        parser.fail_all("closed")
        self.closed.set()
        self.changed.set()
