"""Pod healing: recreate a missing pod, replace an ended (evicted, failed) one, recreate an out-of-date one
when spec.podUpdate allows it (`controller.domain.podheal.decide_pod` says which), and the Ready of a pod
being healed; `pod_creation` says what a `CreatePod` outcome means.

May touch: `Pass.mem` (out_of_date, replacing), `Pass.period_s` (the heal retry), Events, and the blocking
`DeletePod` / `CreatePod`.
"""

from __future__ import annotations

from dataclasses import replace

from controller import constants as C
from controller.conditions import set_condition
from controller.domain.actions import CreatePod, DeletePod, Done, PodCreated
from controller.domain.box.conditions import conditions_of, owned, pod_date
from controller.domain.box.model import READY_REASONS, BoxStatus
from controller.domain.box.observation import PodFacts
from controller.domain.box.passstate import Pass
from controller.domain.podheal import decide_pod
from controller.domain.resume import Phase


HEAL_RETRY_S = 1.0
"""Seconds to the next pass while the pod is being healed (at most the scan interval)."""


def _idle(p: Pass) -> bool:
    """No tab is working, resuming, awaiting input or mid-action, and no human typed lately."""
    human = p.cfg.resume.human_idle_s
    return all(r.phase in (Phase.IDLE, Phase.UNKNOWN) and r.journal is None
               and (r.last_input_at is None or (p.now - r.last_input_at).total_seconds() >= human)
               for r in p.records.values())


POD_CREATED_REASON = "CreatedPod"
"""The reason of the reconcile's Event for a pod it created (`controller.service.boxes`)."""


def pod_creation(made: PodCreated) -> tuple[bool, str | None]:
    """What the outcome of a `CreatePod` means.

    Args:
        made: the reconcile's raw outcome (its Events, the retry it asked for).
    Returns:
        (created, retry message): created is True when one of its Events has the reason
        `POD_CREATED_REASON`; the retry message is the message of its last Event when it asked for a retry
        (`retry_after_s` set and not 0: a missing dependency, which that Event names), else None.
    """
    created = any(reason == POD_CREATED_REASON for _, reason, _ in made.events)
    retry = made.events[-1][2] if made.retry_after_s and made.events else None
    return created, retry


def heal_pod(p: Pass, pod: PodFacts) -> BoxStatus | None:
    """Recreate a missing pod, replace an ended (evicted, failed) one, recreate an out-of-date one when
    `spec.podUpdate` allows it (`controller.domain.podheal`). Returns the status while the pod is not usable
    (the next pass follows soon: `period_s`), None when the pass goes on."""
    if pod.obj is None and not pod.created_before:
        return None  # never created yet: the reconcile handler creates the first pod and owns Ready
    decision = decide_pod(dict(pod.obj) if pod.obj is not None else None, pod.name, pod.desired_hash, pod.policy,
                          _idle(p), pod.box_deleting)
    was = p.mem.out_of_date
    out_of_date = decision.message if decision.out_of_date and decision.action == "none" else None
    p.mem = replace(p.mem, out_of_date=out_of_date)
    if decision.action == "none" and not decision.reason:
        if was != out_of_date and out_of_date:
            p.event("Normal", C.R_TEMPLATE_CHANGED, out_of_date)
        return None
    message = decision.message
    if decision.action == "delete" and pod.obj is not None:
        gone: Done = p.ask(DeletePod(pod.name, pod.uid))
        if gone.ok:
            failed = decision.reason == C.R_POD_FAILED
            p.event("Warning" if failed else "Normal", "ReplacingPod" if failed else "RecreatingPod", message)
            p.mem = replace(p.mem, replacing=(decision.reason, message.removesuffix("; replacing it")))
    created = False
    if decision.action == "create":
        made: PodCreated = p.ask(CreatePod(pod.name))
        for type_, reason, text in made.events:
            p.event(type_, reason, text)
        created, retry_message = pod_creation(made)
        if created:
            message = f"Pod {pod.name} was missing; created a new one"
        elif retry_message:
            message = retry_message
    reason = decision.reason or C.R_POD_PENDING
    if created:
        # The pass that deleted an ended pod may be followed at once by this one (the deletion wakes the
        # box): Ready keeps saying why the pod is being replaced.
        why = p.mem.replacing
        if why is not None:
            reason, message = why[0], f"{why[1]}; created a new one"
        p.mem = replace(p.mem, replacing=None)
    conds = conditions_of(p)
    current = next((c for c in conds if c.get("type") == C.COND_READY), None)
    if current is None or current.get("reason") in READY_REASONS:
        conds = set_condition(conds, C.COND_READY, False, reason, message, p.now, p.obs.generation)
    conds = pod_date(p, conds)
    p.period_s = HEAL_RETRY_S
    return BoxStatus({"state": "Pending", "pod": pod.name}, owned(conds, (C.COND_READY, C.COND_POD_OUT_OF_DATE)))
