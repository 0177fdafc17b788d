"""What the benches read of their child processes (Linux /proc, proc(5)), and the parent-death signal they set."""

from __future__ import annotations

import ctypes
import os
import signal


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
