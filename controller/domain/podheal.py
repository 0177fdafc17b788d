"""Boxes that heal: what to do with a box's pod, read from the stored Pod. Pure (no I/O).

* no pod (deleted by someone, or never created): create it;
* a pod that ended (`Failed`, e.g. evicted, or `Succeeded`): delete it, and create a new one once it is gone;
* a pod being deleted: wait for it to go, then create;
* a pod built from an older `spec.template` (its `agentbox.dev/template-hash` annotation differs): condition
  `PodOutOfDate`; with `spec.podUpdate: WhenIdle` it is recreated once no tab is working, with `OnDelete`
  (the default) the next pod made after any deletion has the new template.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from controller.constants import ANNOTATION_TEMPLATE_HASH


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else {} (untrusted input: any shape may come)."""
    return value if isinstance(value, dict) else {}


_MAX_TEXT = 200


def template_hash(template: dict[str, Any]) -> str:
    """A stable digest (16 hex chars) of a pod template (`spec.template`), for the pod's annotation."""
    return hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _clip(text: Any) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= _MAX_TEXT else s[: _MAX_TEXT - 1] + "…"


@dataclass(frozen=True)
class PodDecision:
    """What to do with the box pod now.

    Attributes:
        action: "none", "create" (no pod) or "delete" (an ended or out-of-date pod; it is created again once
            gone).
        reason: Ready's reason while the pod is gone or not usable ("PodMissing", "PodFailed",
            "PodTerminating", "TemplateChanged"), "" when the pod is fine.
        message: one sentence for the condition and the Event (bounded).
        out_of_date: the pod was built from an older spec.template (condition PodOutOfDate).
    """

    action: str = "none"
    reason: str = ""
    message: str = ""
    out_of_date: bool = False


def decide_pod(pod: dict[str, Any] | None, pod_name: str, desired_hash: str, policy: str, idle: bool,
               box_deleting: bool) -> PodDecision:
    """Decide what to do with a box's pod.

    Args:
        pod: the stored Pod owned by the box, or None when there is none.
        pod_name: its name (for messages).
        desired_hash: `template_hash` of the box's current spec.template.
        policy: spec.podUpdate, "WhenIdle" or "OnDelete".
        idle: no tab is working, resuming, awaiting input or mid-action, and no human typed lately.
        box_deleting: the AgentBox itself is being deleted (nothing is created then).
    """
    if box_deleting:
        return PodDecision()
    if pod is None:
        return PodDecision("create", "PodMissing", f"Pod {pod_name} does not exist; creating it")
    meta = pod.get("metadata") or {}
    status = _dict(pod.get("status"))
    if meta.get("deletionTimestamp"):
        return PodDecision("none", "PodTerminating", f"Pod {pod_name} is being deleted; a new one follows")
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        why = f" ({_clip(status.get('reason'))}: {_clip(status.get('message'))})" if status.get("reason") else ""
        return PodDecision("delete", "PodFailed", f"Pod {pod_name} is {phase}{why}; replacing it")
    have = (meta.get("annotations") or {}).get(ANNOTATION_TEMPLATE_HASH)
    if have is None or have == desired_hash:
        return PodDecision()   # a pod made before the hash existed is taken as current
    if policy == "WhenIdle" and idle:
        return PodDecision("delete", "TemplateChanged", f"spec.template changed and no tab is working; "
                           f"recreating Pod {pod_name}", out_of_date=True)
    when = ("once no tab is working" if policy == "WhenIdle"
            else "when it is next deleted (spec.podUpdate: OnDelete)")
    return PodDecision("none", "", f"Pod {pod_name} was built from an older spec.template; it is recreated {when}",
                       out_of_date=True)
