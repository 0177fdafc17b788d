"""metav1.Condition bookkeeping: lastTransitionTime changes only when the status flips."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controller.redact import STATUS_MESSAGE_MAX, bounded


def rfc3339(at: datetime | None) -> str | None:
    """UTC RFC 3339 with a Z, to the second; None stays None."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ") if at else None


def set_condition(conditions: list[dict[str, Any]], type_: str, status: bool | str, reason: str,
                  message: str, now: datetime, generation: int | None) -> list[dict[str, Any]]:
    """Return a new conditions list with `type_` set.

    Args:
        conditions: current list (metav1.Condition dicts, camelCase); not modified.
        status: True/False or "True"/"False"/"Unknown".
        now: used as lastTransitionTime only when the status changes (or the condition is new).
        generation: metadata.generation the condition reflects.
        message: redacted and cut to `STATUS_MESSAGE_MAX` characters here.
    """
    value = status if isinstance(status, str) else ("True" if status else "False")
    message = bounded(message, STATUS_MESSAGE_MAX)  # masked, then cut: status is read by many
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(cond)
            continue
        found = True
        ltt = cond.get("lastTransitionTime") if cond.get("status") == value else None
        out.append(_cond(type_, value, reason, message, str(ltt or rfc3339(now)), generation))
    if not found:
        out.append(_cond(type_, value, reason, message, str(rfc3339(now)), generation))
    return out


def _cond(type_: str, status: str, reason: str, message: str, ltt: str, generation: int | None) -> dict[str, Any]:
    # observedGeneration is an integer in the CRD schema: left out when unknown (a None is refused, 422).
    cond: dict[str, Any] = {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": ltt}
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of `type_`, or None."""
    return next((c for c in conditions if c.get("type") == type_), None)


def merge_conditions(stored: list[dict[str, Any]], desired: list[dict[str, Any]] | tuple[dict[str, Any], ...],
                     now: datetime, guards: dict[str, frozenset[str]] | None = None) -> list[dict[str, Any]]:
    """Merge `desired` conditions into the `stored` list by type (two writers of one object each keep the
    types the other sets; a merge patch replaces a whole list, so the list is merged before it is sent).

    Args:
        stored: status.conditions as read just now (not modified).
        desired: the conditions one writer sets (metav1.Condition dicts).
        now: lastTransitionTime of a condition whose status flips against `stored`.
        guards: type -> reasons: a stored condition of that type is replaced only while its reason is
            one of them (e.g. Ready set by the reconcile for a failure of its own is kept by the watcher).
    Returns:
        The merged list: stored order, new types appended; lastTransitionTime kept unless the status flips.
    """
    guards = guards or {}
    out = [dict(c) for c in stored]
    index = {c.get("type"): i for i, c in enumerate(out)}
    for want in desired:
        type_ = want.get("type")
        i = index.get(type_)
        if i is None:
            out.append(dict(want))
            index[type_] = len(out) - 1
            continue
        have = out[i]
        if type_ in guards and have.get("reason") not in guards[type_]:
            continue
        new = dict(want)
        if have.get("status") == want.get("status"):
            new["lastTransitionTime"] = have.get("lastTransitionTime") or want.get("lastTransitionTime")
        else:
            new["lastTransitionTime"] = rfc3339(now)
        out[i] = new
    return out
