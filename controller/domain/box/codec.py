"""Status <-> memory: tab records and their journals read from and written to status.tabs[], the memory a
(re)started watcher begins with, the Subscription objects as rotation sees them (`candidate_from`,
`reserve_from`), and `parse_time` (RFC 3339 -> UTC).

Pure conversions of untrusted status (an unreadable value is None, never a guess); touches no pass state.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from controller import constants as C
from controller.conditions import rfc3339
from controller.domain.box.model import Memory
from controller.domain.box.observation import Reserve
from controller.domain.resume import MAX_ARMED_S, Journal, JournalAction, Phase, Step, TabRecord
from controller.domain.rotation import Candidate
from controller.redact import STATUS_MESSAGE_MAX, bounded


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 instant as UTC; None when absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (ValueError, OverflowError):  # year 9999 at -12:00 is year 10000 in UTC
        return None


def journal_from_status(data: Any) -> Journal | None:
    """Rebuild a Journal from status.tabs[].journal; None when absent or unreadable (then nothing is resumed
    from it: an unreadable journal never sends keys)."""
    if not isinstance(data, dict):
        return None
    try:
        started = parse_time(data.get("startedAt"))
        step_at = parse_time(data.get("stepAt")) or started
        if started is None or step_at is None:
            return None
        not_before = parse_time(data.get("notBefore"))
        if data.get("notBefore") is not None and not_before is None:
            return None  # an armed send whose instant cannot be read: never sent early
        if not_before is not None and (not_before - started).total_seconds() > MAX_ARMED_S:
            return None  # an instant this controller never arms (years away): never waited for
        pod = data.get("pod")
        return Journal(JournalAction(data.get("action")), Step(data.get("step")), started, step_at,
                       data.get("forKey"), data.get("text"), int(data.get("recoveries") or 0),
                       not_before=not_before, pod=pod if isinstance(pod, str) and pod else None)
    except (ValueError, TypeError):
        return None


def journal_to_status(journal: Journal | None) -> dict[str, Any] | None:
    """status.tabs[].journal of a Journal (camelCase, no None values). `notBefore` is rounded up to the
    second (status instants have one-second resolution: an armed Enter is never moved earlier)."""
    if journal is None:
        return None
    not_before = journal.not_before
    if not_before is not None and not_before.microsecond:
        not_before = not_before.replace(microsecond=0) + timedelta(seconds=1)
    out = {"action": journal.action.value, "step": journal.step.value, "startedAt": rfc3339(journal.started_at),
           "stepAt": rfc3339(journal.step_at), "forKey": journal.for_key, "text": journal.text,
           "recoveries": journal.recoveries or None, "notBefore": rfc3339(not_before), "pod": journal.pod}
    return {k: v for k, v in out.items() if v is not None}


def record_from_status(tab: dict[str, Any]) -> TabRecord:
    """Rebuild a TabRecord from a status.tabs[] entry (controller restart)."""
    try:
        phase = Phase(tab.get("state") or "Unknown")
    except ValueError:
        phase = Phase.UNKNOWN
    return TabRecord(
        name=tab.get("name", ""), phase=phase, limit_key=tab.get("limitKey"),
        resets_at=parse_time(tab.get("resetsAt")), resume_at=parse_time(tab.get("resumeAt")),
        detected_by=tab.get("detectedBy"), message=tab.get("message"), sent_for=tab.get("sentFor"),
        sent_at=parse_time(tab.get("sentAt")), attempts=int(tab.get("attempts") or 0),
        last_input_at=parse_time(tab.get("lastInputAt")), stopped_by_reserve=bool(tab.get("stoppedByReserve")),
        journal=journal_from_status(tab.get("journal")),
        menu_for=tab.get("menuAnsweredFor"), menu_at=parse_time(tab.get("menuAnsweredAt")),
    )


def record_to_status(rec: TabRecord, tab_id: str | None) -> dict[str, Any]:
    """status.tabs[] entry of a TabRecord (camelCase, no None values)."""
    out = {
        "name": rec.name, "id": tab_id, "state": rec.phase.value,
        "resetsAt": rfc3339(rec.resets_at), "resumeAt": rfc3339(rec.resume_at),
        "detectedBy": rec.detected_by, "message": bounded(rec.message, STATUS_MESSAGE_MAX) if rec.message else None,
        "lastInputAt": rfc3339(rec.last_input_at),
        "limitKey": rec.limit_key, "sentFor": rec.sent_for, "sentAt": rfc3339(rec.sent_at),
        "attempts": rec.attempts, "stoppedByReserve": rec.stopped_by_reserve or None,
        "journal": journal_to_status(rec.journal),
        "menuAnsweredFor": rec.menu_for, "menuAnsweredAt": rfc3339(rec.menu_at),
    }
    return {k: v for k, v in out.items() if v is not None}


def memory_from_status(status: Mapping[str, Any], spec_subscription: str | None) -> Memory:
    """The memory a (re)started watcher begins with: tab records, the subscription, the reserve stop line and
    a switch left unfinished (status.switch) as the last controller wrote them to status."""
    tabs = [t for t in status.get("tabs") or [] if isinstance(t, dict) and t.get("name")]
    reserved = next((c for c in status.get("conditions") or []
                     if c.get("type") == C.COND_RESERVED and c.get("status") == "True"), None)
    switch = status.get("switch")
    return Memory(
        records={t["name"]: record_from_status(t) for t in tabs},
        tab_ids={t["name"]: t.get("id", "") for t in tabs},
        current=status.get("subscription") or spec_subscription,
        reserved=reserved.get("message") if reserved else None,
        pending_switch=switch if isinstance(switch, dict) and switch.get("to") else None,
        loaded=True,
    )


def candidate_from(sub: Mapping[str, Any]) -> Candidate:
    """Rotation's view of a Subscription object (spec.provider and status)."""
    status = sub.get("status") or {}
    windows = status.get("windows") or {}
    five, week = windows.get("fiveHour") or {}, windows.get("weekly") or {}
    until = parse_time(status.get("reservedUntil"))
    if status.get("state") == "Exhausted":
        resets = [parse_time(w.get("resetsAt")) for w in (five, week)
                  if (w.get("utilization") or 0) >= 100 and w.get("resetsAt")]
        until = max((r for r in resets if r), default=None)
    return Candidate(
        name=sub["metadata"]["name"], provider=(sub.get("spec") or {}).get("provider", ""),
        state=status.get("state") or "Unknown", five_hour=five.get("utilization"), weekly=week.get("utilization"),
        five_hour_reset=parse_time(five.get("resetsAt")), until=until,
    )


def reserve_from(sub: Mapping[str, Any]) -> Reserve:
    """spec.reserve of a Subscription object (missing values are 0)."""
    reserve = (sub.get("spec") or {}).get("reserve") or {}
    return Reserve(reserve.get("fiveHourPercent") or 0, reserve.get("weeklyPercent") or 0)
