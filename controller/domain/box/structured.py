"""When to read the agent's structured usage files and when to reuse the last read (the live stream),
and their merge into the tabs' detections (`controller.domain.signals.merge`).

May touch: `Pass.obs` (the tabs, with merged detections), `Pass.mem.structured`, InputIgnored ("files"),
and one blocking `ReadStructured`.
"""

from __future__ import annotations

from dataclasses import replace

from controller import constants as C
from controller.domain.actions import ReadStructured
from controller.domain.box.passstate import Pass
from controller.domain.box.screens import screen_digest
from controller.domain.resume import limit_key
from controller.domain.signals import merge
from controller.domain.types import TabState


_STOPPED = (TabState.RATE_LIMITED, TabState.IDLE, TabState.UNKNOWN)


def merge_structured(p: Pass) -> None:
    """Merge the agent's own machine-readable usage into the screen detections (`signals.merge`).

    Read only when some tab is not visibly busy (rate limited, idle or unrecognised). On the live stream
    the last read is reused while the tabs' (state, kind, limit) are those it was read for and either the
    tabs' screens are still those it was read with (nothing was drawn since: the agents write these files
    when they draw a turn's end) or it is younger than `stream_rescan_s` (a screen changed but no tab
    changed state: read again at most once a rescan period). An unchanged idle box thus reads its files once,
    not at every rescan pass. Polling reads every pass. A reused read is merged at this pass's `now` (a window
    whose reset passed no longer limits). A failed read merges nothing and leaves the files' last problems
    standing."""
    tabs = p.obs.tabs or ()
    if not any(t.detection.state in _STOPPED for t in tabs):
        return
    key = tuple(sorted((t.name, t.detection.state.value, t.detection.kind.value if t.detection.kind else None,
                        limit_key(t.detection) if t.detection.state == TabState.RATE_LIMITED else None)
                       for t in tabs))
    screens = tuple(sorted((t.name, screen_digest(t.screen)) for t in tabs))
    seen = p.mem.structured
    live = p.obs.stream is not None and p.obs.stream.connected
    if (live and seen is not None and seen[0] == key
            and (seen[3] == screens or (p.now - seen[1]).total_seconds() < p.obs.stream_rescan_s)):
        read = seen[2]
    else:
        read = p.ask(ReadStructured(p.obs.box.agent, p.now))
        if read.failed:
            return
        p.mem = replace(p.mem, structured=(key, p.now, read, screens))
    p.ignore("files", C.R_INVALID_BOX_FILE, read.problems)
    if read.usage is None:
        return
    usage, source = read.usage, read.source
    p.obs = replace(p.obs, tabs=tuple(replace(t, detection=merge(t.detection, usage, source, p.now)) for t in tabs))
