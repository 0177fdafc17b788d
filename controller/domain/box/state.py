"""The status of a box whose tabs are watched: status.tabs, state, resumeAt, subscription, nextSubscription,
the watcher's conditions (Ready, PodOutOfDate, RateLimited, NeedsAttention, InputIgnored, Reserved,
TerminalStream) and its gauges; and the status of a pass whose tabs could not be captured.

May touch: `Pass.mem` (output_problem, stream_warned) and Events (once per episode).
"""

from __future__ import annotations

from dataclasses import replace

from controller import constants as C
from controller.conditions import rfc3339, set_condition
from controller.domain.box.codec import record_to_status
from controller.domain.box.conditions import conditions_of, owned, ready_conditions
from controller.domain.box.model import BoxStatus
from controller.domain.box.observation import CAPTURE_TOO_LARGE, CaptureFailure, Observation, stream_given_up
from controller.domain.box.passstate import Pass
from controller.domain.podstate import ContainerView
from controller.domain.resume import Phase


def watched_status(p: Pass) -> BoxStatus:
    """The status of a pass that decided the tabs (a missing subscription is NeedsAttention)."""
    problem = (C.R_SUBSCRIPTION_NOT_FOUND, p.mem.sub_problem) if p.mem.sub_problem else None
    return tabs_status(p, p.obs, problem=problem)


def capture_failed(p: Pass, failure: CaptureFailure) -> BoxStatus:
    """The status of a pass whose tabs could not be read: NeedsAttention says why (the box printed more than
    the exec output bound, `CAPTURE_TOO_LARGE`, warned once; else the tmux session is missing)."""
    obs = p.obs
    if failure.kind == CAPTURE_TOO_LARGE:
        # What the box prints is bounded (the exec's output bound): too many tabs, a huge window, or a
        # tmux that floods. Reported once; watched again when it prints less.
        message = (f"the box printed more than {failure.limit_bytes} bytes when its tabs were captured "
                   "(too many tabs or a very large window); its tabs are not watched until it prints less")
        if p.mem.output_problem != message:
            p.mem = replace(p.mem, output_problem=message)
            p.event("Warning", C.R_BOX_OUTPUT_TOO_LARGE, message)
        return tabs_status(p, obs, problem=(C.R_BOX_OUTPUT_TOO_LARGE, message))
    return tabs_status(p, obs, problem=(C.R_TMUX_MISSING, f"tmux session '{C.TMUX_SESSION}' not found in "
                                        "the box container"), session=False)


def tabs_status(p: Pass, obs: Observation, problem: tuple[str, str] | None = None,
                session: bool = True) -> BoxStatus:
    """status.tabs, state, resumeAt, subscription, nextSubscription and the watcher's conditions."""
    records = list(p.records.values())
    limited = [r for r in records if r.phase in (Phase.RATE_LIMITED, Phase.RESUMING)]
    attention = [r for r in records if r.phase == Phase.NEEDS_ATTENTION]
    resume_ats = [r.resume_at for r in records if r.resume_at]
    now, gen, mem = p.now, obs.generation, p.mem
    conds = ready_conditions(p, conditions_of(p), ContainerView(True, "ContainerRunning", ""), session)
    if limited:
        conds = set_condition(conds, C.COND_RATE_LIMITED, True, C.R_WAITING_FOR_RESET,
                              f"{len(limited)} tab(s) wait for a usage reset", now, gen)
    else:
        conds = set_condition(conds, C.COND_RATE_LIMITED, False, C.R_NONE_LIMITED, "No tab is rate limited", now, gen)
    if attention or problem:
        msg = problem[1] if problem else "; ".join(f"tab {r.name}: {r.message}" for r in attention)
        reason = C.R_RESUME_FAILED if attention else problem[0]  # type: ignore[index]
        conds = set_condition(conds, C.COND_NEEDS_ATTENTION, True, reason, msg, now, gen)
    else:
        conds = set_condition(conds, C.COND_NEEDS_ATTENTION, False, C.R_ALL_CLEAR, "No tab needs a human", now, gen)
    if mem.ignored:
        first = next(iter(mem.ignored.values()))[0]
        conds = set_condition(conds, C.COND_INPUT_IGNORED, True, first,
                              "; ".join(m for _, msgs in mem.ignored.values() for m in msgs), now, gen)
    elif any(c.get("type") == C.COND_INPUT_IGNORED for c in conds):
        conds = set_condition(conds, C.COND_INPUT_IGNORED, False, C.R_ALL_CLEAR,
                              "Every pattern, annotation and box file read is valid", now, gen)
    if mem.reserved:
        conds = set_condition(conds, C.COND_RESERVED, True, "ReserveReached", mem.reserved, now, gen)
    else:
        conds = set_condition(conds, C.COND_RESERVED, False, "BelowReserve",
                              "The subscription's reserve is not reached", now, gen)
    stream = obs.stream
    if stream is not None:
        if stream.connected:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, True, C.R_STREAMING,
                                  "The live tmux stream is attached", now, gen)
        elif stream_given_up(stream):
            why = f"Polling the tabs: {stream.why or 'the live tmux stream failed again and again'}"
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_UNUSABLE, why, now, gen)
            if p.mem.stream_warned != stream.pod:
                p.mem = mem = replace(p.mem, stream_warned=stream.pod)
                p.event("Warning", C.R_STREAM_UNUSABLE, why)
        elif stream.why:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_NO_CONTROL_MODE,
                                  f"Polling the tabs: {stream.why}", now, gen)
        else:
            conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_RECONNECTING,
                                  "Polling the tabs: the live tmux stream is down; reconnecting with backoff", now, gen)
    elif obs.stream_disabled:
        conds = set_condition(conds, C.COND_TERMINAL_STREAM, False, C.R_STREAM_DISABLED,
                              "Polling the tabs: settings.tmuxStream is off", now, gen)
    state = ("NeedsAttention" if attention or problem else "Reserved" if mem.reserved
             else "RateLimited" if limited or mem.group_exhausted else "Running")
    fields = {
        "tabs": [record_to_status(r, mem.tab_ids.get(r.name)) for r in records], "state": state,
        "resumeAt": rfc3339(min(resume_ats)) if resume_ats else None,
        "subscription": mem.current, "nextSubscription": mem.next_sub,
    }
    gauges = {"TABS_NEEDING_HUMAN": float(len(attention)), "TABS_RATE_LIMITED": float(len(limited)),
              "ROTATION_GROUP_EXHAUSTED": 1.0 if mem.group_exhausted else 0.0}
    return BoxStatus(fields, owned(conds), gauges=gauges)
