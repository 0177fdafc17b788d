"""The resume annotations: which are valid (a resume-at that is not an instant within 31 days is
InputIgnored; one already acted upon is dropped) and what they do to a rate-limited or stalled tab's plan
(resume now, resume at, cancel).

May touch: `Pass.mem` (ignored, resume_at_done) and `Pass.seen` (a stalled tab resumed by hand).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Mapping

from controller import constants as C
from controller.domain.box.codec import parse_time
from controller.domain.box.passstate import Pass
from controller.domain.resume import Action as PlanAction, Phase, TabPlan
from controller.domain.types import Detection, TabState, plausible_reset


def read_annotations(p: Pass) -> dict[str, str]:
    """The box's annotations, without a resume-at that is not an instant within 31 days (reported as
    InvalidAnnotation naming it) or that was already acted upon (one request, one resume)."""
    annotations = dict(p.obs.annotations)
    raw = annotations.get(C.ANNOTATION_RESUME_AT)
    problems: list[str] = []
    if raw is not None:
        at = parse_time(raw)
        if at is None or plausible_reset(at, p.now) is None:
            problems.append(f"metadata.annotations[{C.ANNOTATION_RESUME_AT}]: {raw[:64]!r} is not an RFC 3339 "
                            "instant within 31 days of now; ignored")
        if problems or raw == p.mem.resume_at_done:
            annotations.pop(C.ANNOTATION_RESUME_AT)
    p.ignore("annotations", C.R_INVALID_ANNOTATION, problems)
    return annotations


def apply_annotations(p: Pass, plan: TabPlan, det: Detection, annotations: Mapping[str, str]) -> TabPlan:
    rec = plan.record
    stalled = rec.phase == Phase.NEEDS_ATTENTION and rec.limit_key == "stalled"
    if not stalled and (rec.phase not in (Phase.RATE_LIMITED, Phase.NEEDS_ATTENTION)
                        or det.state != TabState.RATE_LIMITED):
        return plan
    if annotations.get(C.ANNOTATION_CANCEL_RESUME, "").lower() == "true":
        return TabPlan(replace(rec, resume_at=None, message="Scheduled resume cancelled by annotation "
                               f"{C.ANNOTATION_CANCEL_RESUME}"))
    at: datetime | None = None
    if C.ANNOTATION_RESUME_NOW in annotations:
        at = p.now
    elif C.ANNOTATION_RESUME_AT in annotations:
        at = parse_time(annotations[C.ANNOTATION_RESUME_AT])
    if at is None:
        return plan
    rec = replace(rec, phase=Phase.RATE_LIMITED, resume_at=at, sent_for=None, attempts=0,
                  message=f"Resume requested by annotation for {at:%H:%M:%S} UTC")
    if at > p.now:
        return TabPlan(rec, wake_at=at)
    if C.ANNOTATION_RESUME_AT in annotations and C.ANNOTATION_RESUME_NOW not in annotations:
        p.mem = replace(p.mem, resume_at_done=annotations[C.ANNOTATION_RESUME_AT])  # once, not every pass
    if stalled:
        p.seen.pop(rec.name, None)
    return TabPlan(replace(rec, resets_at=None), action=PlanAction.CHECK_USAGE, event="ResumeRequested")
