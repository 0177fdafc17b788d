"""A box's tmux session driven through pod exec: capture, type, press keys, restart an agent.

Text and Enter go as two separate `send-keys` calls with a pause (Ink takes a paste otherwise;
field-pitfalls §7). Output of the exec calls is never logged.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Protocol

from controller.terminal import tmux


class ExecResultLike(Protocol):
    stdout: str
    stderr: str
    rc: int


ExecFn = Callable[[list[str]], Awaitable[ExecResultLike]]
"""Runs one argv in the box container: `await exec_fn(argv) -> result(stdout, stderr, rc)`."""


class TmuxCommandFailed(RuntimeError):
    """A tmux command exited non-zero (message: the tmux subcommand and rc only)."""


class BoxTerminal:
    """The tmux session of one box pod.

    Args:
        exec_fn: runs an argv in the box container.
        send_pause_s: pause between typed text and Enter, seconds.
    """

    def __init__(self, exec_fn: ExecFn, send_pause_s: float = 0.3) -> None:
        self._exec = exec_fn
        self.send_pause_s = send_pause_s

    @property
    def exec_fn(self) -> ExecFn:
        """The exec function of the box container (for commands other than tmux)."""
        return self._exec

    async def run(self, argv: list[str], check: bool = True) -> ExecResultLike:
        """Run one tmux argv; raises TmuxCommandFailed on a non-zero rc when `check`."""
        result = await self._exec(argv)
        if check and result.rc != 0:
            raise TmuxCommandFailed(f"tmux {argv[1] if len(argv) > 1 else ''} exited {result.rc}")
        return result

    async def tabs(self) -> tuple[list[tmux.Tab], dict[str, "tmux.datetime"]]:
        """Tabs of the session and the last human key time per window id."""
        result = await self.run(tmux.list_tabs_argv())
        return tmux.parse_tabs(result.stdout)

    async def capture_all(self, tabs: list[tmux.Tab]) -> dict[str, str]:
        """Visible screen of every tab, by window id, in one exec call."""
        if not tabs:
            return {}
        result = await self.run(tmux.capture_argv(tabs))
        return tmux.parse_captures(result.stdout)

    async def capture(self, pane_id: str) -> str:
        """Visible screen of one pane."""
        return (await self.run(tmux.capture_one_argv(pane_id))).stdout.rstrip("\n")

    async def type_line(self, pane_id: str, text: str) -> None:
        """Type `text` literally, pause, then press Enter in a separate call."""
        await self.run(tmux.send_text_argv(pane_id, text))
        await asyncio.sleep(self.send_pause_s)
        await self.run(tmux.send_key_argv(pane_id, "Enter"))

    async def press(self, pane_id: str, key: str) -> None:
        """Press one key (Enter, Escape, C-c, a digit)."""
        await self.run(tmux.send_key_argv(pane_id, key))

    async def foreground(self, pane_id: str) -> str:
        """The pane's foreground command name."""
        return (await self.run(tmux.pane_command_argv(pane_id))).stdout.strip()

    async def wait_until(self, probe: Callable[[], Awaitable[bool]], timeout_s: float, every_s: float = 0.2) -> bool:
        """Poll `probe` until it returns True or `timeout_s` passes; returns the last result."""
        deadline = time.monotonic() + timeout_s
        while True:
            if await probe():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(every_s)

    async def wait_changed(self, pane_id: str, before: str, timeout_s: float) -> bool:
        """Wait until the pane's screen differs from `before`."""
        async def changed() -> bool:
            return (await self.capture(pane_id)) != before
        return await self.wait_until(changed, timeout_s)
