"""Switching subscriptions: a switch a previous controller left in status.switch (completed, or overruled by
spec.subscription with rotation off), following a changed spec.subscription with rotation off
(`follow_spec_change`), rotation on a trigger (`rotate`), and the status patches that journal a switch
(`switch_patches`).

May touch: `Pass.mem` (current, next_sub, pre_switch, switched_keys, group_exhausted, sub_problem, noted,
reserved), the records of the limited tabs (resumed on the new login), Events, metrics, `PatchStatus`,
`RemoveLogin`, and the blocking `SwitchSubscription` / `InstallLogin`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller import constants as C
from controller.conditions import rfc3339
from controller.domain.actions import Done, InstallLogin, PatchStatus, RemoveLogin, SwitchSubscription
from controller.domain.box.passstate import Pass
from controller.domain.box.reserve import stop_line
from controller.domain.resume import Phase, limit_key
from controller.domain.rotation import choose_next, first_to_reset, follow_spec, group_members, must_leave
from controller.domain.types import Detection, LimitKind, TabState
from controller.redact import bounded


def switch_patches(action: SwitchSubscription) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The status patches of a switch (`SwitchSubscription`), written in order: the journal at its first
    step (before the agents are stopped), at `InstallLogin` (before the new login is written), and the
    end (the new subscription, no journal). A controller killed in between finds status.switch and
    completes it (`complete_switch`)."""
    journal = {"to": action.new, "fromSubscription": action.old, "step": "StopAgents",
               "startedAt": rfc3339(action.started_at), "tabs": list(action.limited)[:64],
               "reason": bounded(action.reason, 1024)}
    return ({"switch": journal}, {"switch": {**journal, "step": "InstallLogin"}},
            {"subscription": action.new, "switch": None})



def _usage_limited(det: Detection) -> bool:
    return det.state == TabState.RATE_LIMITED and det.kind in (LimitKind.USAGE, LimitKind.CREDITS)


def _resume_on_new(p: Pass, tab: str, det: Detection, new: str) -> None:
    """Answer a tab's limit event by the switch to `new`: the key is marked switched (never a trigger
    again) and the tab is resumed now by the normal flow, on the new login."""
    key = limit_key(det)
    p.mem = replace(p.mem, switched_keys=p.mem.switched_keys | {key})
    p.records[tab] = replace(
        p.rec(tab), phase=Phase.RATE_LIMITED, limit_key=key, resets_at=None, resume_at=p.now, sent_for=None,
        window=None, auto_continue=False, detected_by=det.detected_by,
        message=f"Switched to {new}; resuming", attempts=0)


def complete_pending_switch(p: Pass, dets: dict[str, Detection]) -> dict[str, Detection]:
    """A switch a previous controller left in status.switch (`Memory.pending_switch`), finished or given up
    once, by the first pass that reads the tabs; with rotation off, spec.subscription wins over its target
    (`switch_overruled`). Returns the detections, those of the tabs it had stopped replaced by their limit;
    `dets` itself when there is no such switch."""
    if p.mem.pending_switch is None:
        return dets
    if switch_overruled(p):
        # Rotation off: spec.subscription wins. Its login is installed (the switch may have installed
        # another one already), and the switch's tabs are planned again on it.
        p.mem = replace(p.mem, pending_switch={**p.mem.pending_switch, "to": p.obs.box.subscription,
                                               "reason": "spec.subscription (rotation is off)"})
    dets = complete_switch(p, dets)
    p.mem = replace(p.mem, pending_switch=None)  # finished or given up: once
    return dets


def complete_switch(p: Pass, dets: dict[str, Detection]) -> dict[str, Detection]:
    """Finish a switch a previous controller left in status.switch: install the new login (idempotent),
    move the box, and mark the tabs it had stopped as due on the new subscription. A tab it had already
    stopped sits at the shell: it is given the remembered limit so the normal resume relaunches it."""
    sw = p.mem.pending_switch or {}
    to = str(sw.get("to"))
    done: Done = p.ask(InstallLogin(to, "complete"))
    # Finished (or given up) now, once: status.switch is cleared; the box moves only with its new login.
    p.actions.append(PatchStatus((("switch", None),) + ((("subscription", to),) if done.ok else ())))
    if not done.ok:
        p.event("Warning", "SwitchFailed", f"Cannot finish the switch to {to}: its login Secret is missing or invalid")
        return dets
    p.mem = replace(p.mem, current=to)
    wanted = set(sw.get("tabs") or [])
    out = dict(dets)
    for tab in p.obs.tabs or ():
        if tab.name not in wanted:
            continue
        det = dets[tab.name]
        if det.state != TabState.RATE_LIMITED:
            if det.state == TabState.WORKING:
                continue
            det = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, None, None, prompt_text="",
                            evidence=f"stopped to switch to {to}", detected_by="switch")
            out[tab.name] = det
        key = limit_key(det)
        p.mem = replace(p.mem, switched_keys=p.mem.switched_keys | {key})
        p.records[tab.name] = replace(
            p.rec(tab.name), phase=Phase.RATE_LIMITED, limit_key=key, resets_at=None, resume_at=p.now,
            sent_for=None, window=None, auto_continue=False, detected_by=det.detected_by, journal=None,
            message=f"Switched to {to}; resuming", attempts=0)
    if sw.get("fromSubscription") == to:  # a switch overruled by spec.subscription back to where it started
        p.event("Normal", "Switched", f"Stayed on {to}: {sw.get('reason')} (a switch left unfinished by a "
                "controller restart or a failed pass was abandoned)")
    else:
        p.event("Normal", "Switched", f"Switched from {sw.get('fromSubscription')} to {to}: "
                f"{sw.get('reason') or 'rotation'} (completed after it was interrupted: a controller restart or a "
                "failed pass)")
    return out


def switch_overruled(p: Pass) -> bool:
    """A switch left in status.switch goes to spec.subscription instead of its own target when rotation is
    off and spec.subscription names another subscription (the box follows spec)."""
    box = p.obs.box
    to = (p.mem.pending_switch or {}).get("to")
    return not box.rotation and bool(box.subscription) and to != box.subscription


def follow_spec_change(p: Pass, dets: dict[str, Detection]) -> None:
    """Rotation off and spec.subscription changed: move the box to it (`rotation.follow_spec`).

    The same journaled switch as the rotation's (status.switch): the limited tabs of an agent that refuses
    another account's login in flight (Codex) are stopped first, then the new login goes into the box Secret
    and the live login file, then status.subscription. A tab stopped on the old subscription's limit is
    planned again on the new one now (its usage read decides: resumed when it has headroom, else it waits
    for the new subscription's reset), never left waiting for the old one's reset. A working agent is left
    alone (a human's edit never interrupts work): Claude Code reads the new file at its next request; a
    running Codex ignores another account's file and moves at its next restart (docs/logins.md).
    The reserve follows the new subscription (`reserve.apply_reserve`): a stop by the old one's reserve is
    lifted when the new one is not reserved; a new one that is reserved stops the box (or keeps it stopped,
    with its own stop line). An unusable new login changes nothing (the reconcile reports it on spec.subscription)."""
    obs, box = p.obs, p.obs.box
    target = follow_spec(p.mem.current, box.subscription, box.rotation, obs.subscriptions or (), box.provider)
    if target is None:
        return
    old = p.mem.current
    tabs = obs.tabs or ()
    limited = [t for t in tabs if _usage_limited(dets[t.name]) and p.rec(t.name).journal is None]
    stop = tuple((t.name, t.pane) for t in limited if box.stop_to_switch and p.safe(replace(t, detection=dets[t.name])))
    done: Done = p.ask(SwitchSubscription(old, target.name, "spec.subscription changed", "spec",
                                          tuple(t.name for t in limited), stop, p.now))
    if not done.ok:
        return
    for t in limited:
        _resume_on_new(p, t.name, dets[t.name], target.name)
    p.mem = replace(p.mem, current=target.name, pre_switch=frozenset(t.name for t in tabs) - {t.name for t in limited})
    p.count("SWITCHES", "$ns", "$name", "spec")
    p.event("Normal", C.R_SUBSCRIPTION_CHANGED, f"Moved from {old} to {target.name}: spec.subscription changed "
            "(rotation is off)" + (f"; {len(limited)} limited tab(s) planned again on {target.name}" if limited else ""))
    if p.mem.reserved and target.state == "Reserved":
        # Stopped by the old subscription's reserve and the new one is reserved too: no login file; the stop
        # line is the new subscription's.
        p.actions.append(RemoveLogin())
        p.mem = replace(p.mem, reserved=stop_line(p, target))


def rotate(p: Pass, dets: dict[str, Detection]) -> None:
    """Rotation: leave the current subscription on a trigger for the best usable one of the group."""
    obs, box = p.obs, p.obs.box
    subs = list(obs.subscriptions or ())
    current = p.mem.current or box.subscription or ""
    cur = next((c for c in subs if c.name == current), None)
    # The first limit line a tab shows after a switch, before it was seen working again, was printed on
    # the old subscription: it is answered by that switch, not counted as the new subscription's limit.
    for name in sorted(p.mem.pre_switch):
        det = dets.get(name)
        if det is None or det.state == TabState.WORKING:
            # Seen working: it runs on the new login. An idle screen proves nothing (the live stream sees an
            # agent's screen half painted, before its limit line).
            p.mem = replace(p.mem, pre_switch=p.mem.pre_switch - {name})
        elif _usage_limited(det):
            p.mem = replace(p.mem, pre_switch=p.mem.pre_switch - {name})
            if limit_key(det) not in p.mem.switched_keys:
                _resume_on_new(p, name, det, current)
    fresh_limit = any(_usage_limited(d) and limit_key(d) not in p.mem.switched_keys for d in dets.values())
    p.mem = replace(p.mem, group_exhausted=False, sub_problem=None)
    if cur is None and not box.rotation:
        problem = (f"Subscription {current!r} was deleted or is missing; the box cannot be resumed "
                   "(set spec.subscription to another one, or enable rotation)")
        p.mem = replace(p.mem, sub_problem=problem)
        if p.note(f"missing-{current}"):
            p.event("Warning", C.R_SUBSCRIPTION_NOT_FOUND, problem)
    if not box.rotation:
        p.mem = replace(p.mem, next_sub=None)
        return
    members = group_members(box.rotation_group, [*box.rotation_selected, box.subscription or ""], box.provider, subs)
    nxt = choose_next(current, members)
    leave = must_leave(cur, fresh_limit)
    if leave.leave and nxt is not None:
        tabs = obs.tabs or ()
        limited = [t for t in tabs if _usage_limited(dets[t.name])]
        stop = tuple((t.name, t.pane) for t in limited if box.stop_to_switch and p.safe(replace(t, detection=dets[t.name])))
        done: Done = p.ask(SwitchSubscription(current or None, nxt.name, str(leave.reason), leave.trigger,
                                              tuple(t.name for t in limited), stop, p.now))
        if done.ok:
            for t in limited:
                _resume_on_new(p, t.name, dets[t.name], nxt.name)
            # A tab not seen limited now may still show the old subscription's limit line on the next
            # capture (printed just before the switch): that line is not a limit of the new one.
            p.mem = replace(p.mem, current=nxt.name,
                            pre_switch=frozenset(t.name for t in tabs) - {t.name for t in limited})
            p.count("SWITCHES", "$ns", "$name", leave.trigger)
            p.event("Normal", "Switched", f"Switched from {current or None} to {nxt.name}: {leave.reason}")
            nxt = choose_next(nxt.name, members)
        else:
            p.event("Warning", "SwitchFailed", f"Cannot switch to {nxt.name}: its login Secret is missing or invalid")
    elif leave.leave:
        p.mem = replace(p.mem, group_exhausted=True)
        first = first_to_reset(members, p.now)
        msg = "Every subscription of the rotation group is exhausted; waiting" + (
            f" for {first.name} to reset at {first.until:%H:%M} UTC" if first and first.until else "")
        if p.note("group-exhausted"):
            p.event("Warning", "RotationGroupExhausted", msg)
    else:
        p.unnote("group-exhausted")
    p.mem = replace(p.mem, next_sub=nxt.name if nxt else None)
