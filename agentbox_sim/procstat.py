"""What the benches read of their child processes (Linux /proc, proc(5)), and the parent-death signal they set."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import signal
import time


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system: fields 14 and 15 of /proc/<pid>/stat) of process `pid` (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid: int) -> float:
    """Resident set (`VmRSS` of /proc/<pid>/status) of process `pid` in MiB (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pdeathsig_kill() -> None:
    """A `preexec_fn`: the child gets SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG), so a bench killed
    midway leaves no controller running."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LoopStalls:
    """How long this process's event loop went without running (the bench's emulated API server is one
    Python thread: a stall of seconds is every replica's request unanswered) and its garbage collector's
    longest pause. Start with `start()` on the running loop, read `max_stall_s`, `stalls_over_1s`,
    `gc_max_s`, `gc_full` (full collections), `stop()` at the end."""

    TICK_S = 0.05

    def __init__(self) -> None:
        self.max_stall_s = 0.0
        self.stalls_over_1s = 0
        self.gc_max_s = 0.0
        self.gc_full = 0
        self._gc_started = 0.0
        self._task: "asyncio.Task[None] | None" = None

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_max_s = max(self.gc_max_s, time.perf_counter() - self._gc_started)
            self.gc_full += info.get("generation") == 2

    async def _tick(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.TICK_S)
            stall = time.monotonic() - before - self.TICK_S
            self.max_stall_s = max(self.max_stall_s, stall)
            self.stalls_over_1s += stall > 1.0

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.get_running_loop().create_task(self._tick())

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()

    def figures(self) -> dict[str, float]:
        """The JSON figures: seconds, rounded."""
        return {"loop_stall_max_s": round(self.max_stall_s, 2), "loop_stalls_over_1s": self.stalls_over_1s,
                "gc_pause_max_s": round(self.gc_max_s, 2), "gc_full_collections": self.gc_full}
