"""`decide`: the rules of one pass composed in one fixed order (`_decide`), the replay of blocking actions
with the write-ahead snapshot, and the pass period (`_period`).

Creates the `Pass`; what a pass touches, it touches through the rule modules it calls.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from controller import constants as C
from controller.domain.actions import ClearAnnotation
from controller.domain.box.annotations import read_annotations
from controller.domain.box.conditions import ready_status, squatter_status, unwatched_status
from controller.domain.box.heal import heal_pod
from controller.domain.box.model import BoxDecision, BoxStatus, DecideConfig, Memory
from controller.domain.box.observation import CAPTURE_TRANSPORT, Observation
from controller.domain.box.passstate import Blocked, Pass
from controller.domain.box.reserve import apply_reserve
from controller.domain.box.state import capture_failed, watched_status
from controller.domain.box.structured import merge_structured
from controller.domain.box.switch import complete_pending_switch, follow_spec_change, rotate
from controller.domain.box.tabplan import forget_closed_tabs, plan_tabs


def decide(obs: Observation, memory: Memory, now: datetime, cfg: DecideConfig | None = None) -> BoxDecision:
    """Decide one pass for one box.

    Args:
        obs: what this pass observed, with the results of the blocking actions already performed.
        memory: the memory at the start of the pass (the same for every call of one pass).
        now: the pass's instant (UTC, tz-aware; the same for every call of one pass).
        cfg: tunables.
    Returns:
        A `BoxDecision`. While `complete` is False the last action(s) wait for a result: perform the
        actions not yet performed, add the results to `obs.results` and call again.
    """
    p = Pass(obs, memory, now, cfg or DecideConfig())
    complete = True
    try:
        status = _decide(p)
    except Blocked:
        complete, status = False, None
    mem = replace(p.mem, records=p.records, seen=p.seen)
    if status is None and not complete:
        # What the journals are written ahead with. A snapshot only: what its status would announce (an
        # Event) is the complete decision's; an action after the waiting ones would break the replay.
        performed = len(p.actions)
        status = watched_status(p)
        del p.actions[performed:]
    return BoxDecision(tuple(p.actions), mem, status, tuple(p.wake.values()), complete, _period(p, mem),
                       p.observe_tabs)


def _period(p: Pass, mem: Memory) -> float:
    """The pass period (`BoxDecision.period_s`)."""
    obs = p.obs
    if p.period_s is not None:
        return min(obs.scan_interval_s, p.period_s)
    if not p.tabs_decided:
        return obs.scan_interval_s
    live = obs.stream is not None and obs.stream.connected
    period = obs.stream_rescan_s if live else obs.scan_interval_s
    if mem.out_of_date:  # a pod update waits for idle tabs, judged from this pass's records
        period = min(period, obs.scan_interval_s)
    return period


def _decide(p: Pass) -> BoxStatus | None:
    """The rules of one pass, in the order they run; a rule that returns ends the pass with its status."""
    obs = p.obs
    if not obs.spec_valid:
        # The reconcile handler reports the invalid spec (its condition, its Event): nothing to do or write
        # here; looked at again at the scan interval (`_period`), when the spec may have been fixed.
        return None
    if not obs.pod_owned:
        return squatter_status(p)
    p.mem = replace(p.mem, squatter=None)
    if obs.pod_facts is not None:
        healing = heal_pod(p, obs.pod_facts)
        if healing is not None:
            return healing
    if not obs.box.watched:
        return unwatched_status(p)  # limit features are off: Ready only
    if obs.pod is None:
        return None
    if not obs.pod.running:
        return ready_status(p, obs.pod, None)
    failure = obs.capture_failure
    if failure is not None and failure.kind == CAPTURE_TRANSPORT:
        return None  # nothing is known of the tabs: no status, looked at again at the next scan
    for source, (reason, messages) in obs.input_problems.items():
        p.ignore(source, reason, messages)
    if failure is not None:
        return capture_failed(p, failure)
    if obs.tabs is None:
        p.observe_tabs = True  # the tabs are read next (then `decide` again)
        return None
    p.mem = replace(p.mem, output_problem=None, tab_ids={**p.mem.tab_ids, **{t.name: t.id for t in obs.tabs}})
    p.tabs_decided = True
    merge_structured(p)
    obs = p.obs  # the tabs with the structured usage merged into their detections
    assert obs.tabs is not None

    annotations = read_annotations(p)
    dets = {t.name: t.detection for t in obs.tabs}
    dets = complete_pending_switch(p, dets)
    follow_spec_change(p, dets)
    rotate(p, dets)
    apply_reserve(p, dets)
    plan_tabs(p, dets, annotations, resume_on=obs.box.resume_after_reset and not p.mem.reserved)
    forget_closed_tabs(p)
    if C.ANNOTATION_RESUME_NOW in annotations:
        p.actions.append(ClearAnnotation(C.ANNOTATION_RESUME_NOW))
    return watched_status(p)
