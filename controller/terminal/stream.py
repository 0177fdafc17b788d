"""A box terminal backed by one live tmux control-mode stream, with polling as the fallback.

:class:`BoxStream` keeps one ``tmux -C attach`` exec open per box (reconnecting with backoff), captures
panes only when tmux says they changed, and calls ``on_change`` when a changed screen looks different to
the caller's ``classify`` (for the watcher: the detected tab state), so a busy agent's spinner does not wake
anyone.  :class:`StreamTerminal` is a :class:`controller.terminal.session.BoxTerminal` whose tmux commands
travel over that stream and whose captures come from the stream's cache; anything else (and every tmux
command while the stream is down) uses the one-shot exec, so polling stays correct as the fallback.

Where control mode cannot be used (no tmux in the image, tmux older than 3.2) the stream says so in
:attr:`BoxStream.unavailable` and the caller polls.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Hashable

from controller.terminal import control, tmux
from controller.terminal.control import ControlClient, ControlError
from controller.terminal.session import BoxTerminal, ExecFn, ExecResultLike

log = logging.getLogger("agentbox.stream")

_CAUSES = {"protocol": "forged or out-of-step replies", "flood": "output flood",
           "timeout": "commands unanswered", "no answer": "no tmux control-mode answer"}

OpenFn = Callable[[list[str]], Awaitable[Any]]
"""Opens an exec stream in the box container: ``await open_fn(argv) -> ExecStream`` (stdin open)."""


@dataclass(frozen=True)
class _Result:
    stdout: str
    stderr: str
    rc: int


class BoxStream:
    """The live tmux stream of one box.

    Args:
        open_fn: opens an exec stream in the box container (ownership already proven by the caller).
        exec_fn: one-shot exec in the box container (for the ``tmux -V`` check).
        classify: ``(pane_id, screen) -> key``; a changed key calls ``on_change`` (``None``: every change).
        on_change: called (sync) when a pane's key or the tab list changed, or the stream went up or down.
        debounce_s: seconds to gather changes before capturing (bursts of output cost one capture).
        backoff_s: (first, most) seconds between reconnects; doubled per failure, with jitter.
        max_output: most bytes one command's reply may hold (as the one-shot exec's bound; a larger
            reply falls back to the exec, which reports it).
        keepalive_s: seconds without news after which a sync command checks the stream is alive.
        max_failures: consecutive streams the box's side broke (forged or out-of-step blocks, a flood
            over ``max_rate`` bytes in 10 s, commands unanswered, a list of tabs never answered: not tmux)
            after which streaming is given up for this pod and the caller polls.
        retry_unusable_s: after giving up, seconds (with jitter) until one more stream is tried (the pod
            is polled meanwhile; a stream that then lives a minute clears ``unavailable``); ``None``: never.
        max_tabs: most panes followed (a longer tab list is cut; the watcher's own list is unaffected).
        min_wake_s: least seconds between two ``on_change`` calls (later changes are gathered into one
            call at the end of that time).
    Attributes:
        unavailable: why control mode cannot be used (``"no tmux"``, ``"tmux 3.1 is older than 3.2"``,
            ``"the tmux control stream failed 5 times in a row (forged or out-of-step replies)"``), else
            ``None``.  The caller polls instead.  Set once for a missing or old tmux; after giving up on a
            misbehaving stream, cleared when a retry (``retry_unusable_s`` later) lives a minute.  Never
            holds text printed by the box.
        failures: consecutive failed streams (reset by a stream that lived over a minute).
        connected: the stream is up now.
        screens: the last captured screen per pane id (fresh while connected).
        opened: streams opened so far (1 plus reconnects).
    """

    def __init__(self, open_fn: OpenFn, exec_fn: ExecFn, *, classify: Callable[[str, str], Hashable] | None = None,
                 on_change: Callable[[], None] = lambda: None, debounce_s: float = 0.2,
                 backoff_s: tuple[float, float] = (1.0, 60.0), command_timeout_s: float = 10.0,
                 max_output: int = 1024 * 1024, keepalive_s: float = 30.0, max_failures: int = 5,
                 max_rate: int = 8 * 1024 * 1024, max_tabs: int = 1000, min_wake_s: float = 1.0,
                 retry_unusable_s: float | None = 600.0) -> None:
        self.open_fn = open_fn
        self.exec_fn = exec_fn
        self.classify = classify
        self.on_change = on_change
        self.debounce_s = debounce_s
        self.backoff_s = backoff_s
        self.command_timeout_s = command_timeout_s
        self.max_output = max_output
        self.keepalive_s = keepalive_s
        self.max_failures = max_failures
        self.max_rate = max_rate
        self.max_tabs = max_tabs
        self.min_wake_s = min_wake_s
        self._last_wake = float("-inf")
        self._deferred: asyncio.TimerHandle | None = None
        self._tabs_key: tuple[tuple[str, str, str], ...] | None = None
        self.retry_unusable_s = retry_unusable_s
        self._gave_up = False
        self.failures = 0
        self.last_failure: str | None = None
        self.unavailable: str | None = None
        self.client: ControlClient | None = None
        self.screens: dict[str, str] = {}
        self.keys: dict[str, Hashable] = {}
        self.opened = 0
        self.capturing: set[str] = set()
        self._checked = False
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        """The control client is attached now."""
        return self.client is not None and not self.client.closed.is_set()

    def fresh(self, pane: str) -> bool:
        """The cached screen of `pane` is current: tmux reported no output since it was captured (a pane with
        output not captured yet is read live, so a pass right after our keys never sees the screen before them)."""
        client = self.client
        return (pane in self.screens and pane not in self.capturing
                and (client is None or pane not in client.dirty))

    def start(self) -> None:
        """Start the connect-and-follow loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def aclose(self) -> None:
        """Stop following and detach."""
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self.client is not None:
            await self.client.aclose()

    async def _check_version(self) -> bool:
        try:
            result = await self.exec_fn(["tmux", "-V"])
        except Exception as exc:  # noqa: BLE001 - transport: try again later
            log.info("tmux version check failed (%s)", type(exc).__name__)
            return False
        self._checked = True
        m = control._VERSION.search(result.stdout or "")
        if result.rc != 0:
            self.unavailable = "no tmux in the box container" if result.rc in (126, 127) else "tmux -V failed"
        elif m is None:  # the box's answer is not repeated: only the version numbers tmux would print
            self.unavailable = "tmux -V printed no tmux version"
        elif not control.supported(result.stdout):
            self.unavailable = (f"tmux {int(m.group(1))}.{int(m.group(2))} is older than "
                                f"{control.MIN_VERSION[0]}.{control.MIN_VERSION[1]}")
        return self.unavailable is None

    async def _run(self) -> None:
        delay = self.backoff_s[0]
        while True:
            if not self._checked and not await self._check_version():
                if self.unavailable is not None:
                    self.on_change()
                    return
            else:
                started = time.monotonic()
                self.client = None
                try:
                    stream = await self.open_fn(control.attach_argv())
                    self.opened += 1
                    self.client = ControlClient(stream, max_block=self.max_output, max_rate=self.max_rate)
                    self.screens.clear()
                    self.keys.clear()
                    await self._follow(self.client)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - transport or tmux failure: reconnect
                    log.info("tmux stream failed (%s)", type(exc).__name__)
                cause = None
                if self.client is not None:
                    await self.client.aclose()
                    cause = self.client.exit_reason
                    if cause not in ("protocol", "flood", "timeout"):
                        # bytes that never formed one tmux block: not tmux (a session that is missing
                        # answers an %error block, a dropped connection nothing: neither counts)
                        cause = "no answer" if self.client.blocks == 0 and self.client.received else None
                if cause is not None:  # the box's side misbehaved
                    self.failures += 1
                    self.last_failure = cause
                elif time.monotonic() - started > 60:
                    self.failures = 0
                    if self._gave_up:  # a retry after giving up lived a minute: streaming again
                        self.unavailable, self._gave_up = None, False
                if self.failures >= self.max_failures:
                    self.unavailable = (f"the tmux control stream failed {self.failures} times in a row "
                                        f"({_CAUSES[self.last_failure or 'no answer']})")
                    self._gave_up = True
                    log.warning("tmux stream given up: %s", self.unavailable)
                    self.on_change()
                    if self.retry_unusable_s is None:
                        return
                    # Polled meanwhile, then tried again much later: an overloaded controller or API server
                    # (commands unanswered in time count as failures) must not lose a box's stream for good.
                    await asyncio.sleep(self.retry_unusable_s * (0.5 + random.random()))
                    delay = self.backoff_s[0]
                    continue
                self._wake()  # down: the watcher polls meanwhile
                if time.monotonic() - started > 60:
                    delay = self.backoff_s[0]
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, self.backoff_s[1])

    async def _follow(self, client: ControlClient) -> None:
        """Capture what changed, tell the caller about changes that matter, until the stream ends.

        A changed pane's output is paused for this client until the debounce is over (a pane printing
        megabytes sends one ``%output``), then continued before its capture (output after the capture
        marks it again).  With nothing to do for ``keepalive_s`` a sync command proves the stream alive (a
        stalled stream is found within ``keepalive_s + command_timeout_s``, not at the next rescan).
        """
        first = True
        while not client.closed.is_set():
            try:
                async with asyncio.timeout(self.keepalive_s):
                    await client.changed.wait()
            except TimeoutError:
                await client.command(["tmux", "display-message", "-p", "ok"], self.command_timeout_s)
                continue
            if client.closed.is_set():
                break
            if client.dirty:
                await client.pause_panes(set(client.dirty))
            await asyncio.sleep(self.debounce_s)
            dirty, tabs_changed = client.take_dirty()
            self.capturing = set(dirty)  # their cached screens are older than their output: not served
            if tabs_changed or first:
                result = await self.command(tmux.list_tabs_argv())
                if result.rc != 0:  # the session is gone
                    raise ControlError("session not found", "closed")
                tabs = tmux.parse_tabs(result.stdout)[0][:self.max_tabs]
                tabs_key = tuple((t.id, t.name, t.pane_id) for t in tabs)
                if tabs_key == self._tabs_key:
                    tabs_changed = False  # a layout change, a rename back and forth: nothing to tell
                self._tabs_key = tabs_key
                panes = {t.pane_id for t in tabs}
                client.known = frozenset(panes)
                client.paused &= panes
                for gone in set(self.screens) - panes:
                    self.screens.pop(gone, None)
                    self.keys.pop(gone, None)
                dirty |= panes - set(self.screens)
            dirty &= client.known or set()
            notify = tabs_changed or first
            first = False
            captured = await client.resume_and_capture(dirty, self.command_timeout_s)
            for pane in sorted(dirty):
                reply = captured.get(pane)
                if reply is None:
                    self.screens.pop(pane, None)  # too large, not cached: the watcher's own capture reports it
                    self._wake()
                    continue
                if not reply.ok:
                    continue
                screen = "\n".join(reply.lines).rstrip("\n")
                self.screens[pane] = screen
                key = self.classify(pane, screen) if self.classify is not None else object()
                if self.keys.get(pane, None) != key or pane not in self.keys:
                    notify = True
                self.keys[pane] = key
            self.capturing = set()
            if notify:
                self._wake()

    def _wake(self) -> None:
        """Call ``on_change`` now, or once ``min_wake_s`` after the last call (a box whose screens or tabs
        change all the time wakes its watcher, whose pass costs API requests, at most once a
        ``min_wake_s``; polling passes every ``scan_interval_s``)."""
        now = time.monotonic()
        wait = self._last_wake + self.min_wake_s - now
        if wait <= 0:
            self._last_wake = now
            self.on_change()
        elif self._deferred is None:
            def later() -> None:
                self._deferred = None
                self._last_wake = time.monotonic()
                self.on_change()
            self._deferred = asyncio.get_running_loop().call_later(wait, later)

    async def command(self, argv: list[str]) -> _Result:
        """Run a ``tmux`` argv over the stream: stdout the output lines of every command, rc 0 when all
        succeeded, else 1 with the failing commands' lines in stderr.

        :raises ControlError: the stream is down or failed (the caller falls back to exec).
        """
        if self.client is None or self.client.closed.is_set():
            raise ControlError("control stream not connected", "closed")
        replies = await self.client.command(argv, self.command_timeout_s)
        out = "".join(line + "\n" for r in replies if r.ok for line in r.lines)
        err = "".join(line + "\n" for r in replies if not r.ok for line in r.lines)
        return _Result(out, err, 0 if all(r.ok for r in replies) else 1)


_READ_ONLY = frozenset({"capture-pane", "list-windows", "list-panes", "list-sessions", "list-clients",
                        "display-message", "has-session", "show-options", "show-window-options"})


def _read_only(argv: list[str]) -> bool:
    """True when every command of a ``tmux`` argv (split on ``";"``) only reads (safe to run twice)."""
    heads = [w for i, w in enumerate(argv) if i == 1 or (i > 1 and argv[i - 1] == ";")]
    return bool(heads) and all(h in _READ_ONLY for h in heads)


class StreamTerminal(BoxTerminal):
    """A :class:`BoxTerminal` whose tmux commands go over the box's :class:`BoxStream` while it is up.

    Captures of panes the stream has seen come from its cache (tmux said nothing changed since); other
    commands, and everything while the stream is down or for an argument control mode cannot carry, use
    the one-shot exec.
    """

    def __init__(self, exec_fn: ExecFn, stream: BoxStream, send_pause_s: float = 0.3) -> None:
        super().__init__(exec_fn, send_pause_s)
        self.stream = stream

    async def run(self, argv: list[str], check: bool = True) -> ExecResultLike:
        """As :meth:`BoxTerminal.run`, over the stream when it is up and ``argv`` is a tmux command."""
        if argv and argv[0] == "tmux" and self.stream.connected:
            try:
                result: ExecResultLike = await self.stream.command(argv)
            except ControlError as exc:
                if exc.sent and not _read_only(argv):
                    # tmux may have run it (the stream broke before the reply): sending the keys again over
                    # the exec could type them twice. The pass fails; the tab's journal (written ahead) is
                    # completed from the screen on the next pass.
                    raise
                result = await self._exec(argv)
            if check and result.rc != 0:
                from controller.terminal.session import TmuxCommandFailed
                raise TmuxCommandFailed(f"tmux {argv[1] if len(argv) > 1 else ''} exited {result.rc}")
            return result
        return await super().run(argv, check)

    async def capture(self, pane_id: str) -> str:
        """As :meth:`BoxTerminal.capture`; from the stream's cache while it is fresh (tmux reported no output
        of the pane since its last capture: the same ``capture-pane -p -J`` text a new capture would give).
        The send steps' guards and checks (the Enter guard at the instant, the wait for the pane to change
        after a key) then cost no round trip while nothing was printed: at a reset, a burst of boxes' Enters
        no longer queues behind one capture per box at the API server and kubelet."""
        if self.stream.connected and self.stream.fresh(pane_id):
            return self.stream.screens[pane_id]
        return await super().capture(pane_id)

    async def capture_all(self, tabs: list[tmux.Tab]) -> dict[str, str]:
        """Screens of every tab: cached for panes the live stream follows, captured for the others."""
        if not self.stream.connected:
            return await super().capture_all(tabs)
        cached = {t.id: self.stream.screens[t.pane_id] for t in tabs if self.stream.fresh(t.pane_id)}
        missing = [t for t in tabs if t.id not in cached]
        if missing:
            cached.update(await super().capture_all(missing))
        return cached
