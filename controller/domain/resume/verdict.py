"""The usage read at a resume: whether it says the limit is lifted (`usage_verdict`) and the plan it makes,
send (armed or now) or wait for the new reset (`after_usage`, `unknown_reset_plan`). Pure."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from controller.domain.resume.record import Phase, TabPlan, TabRecord
from controller.domain.resume.timing import ResumeConfig, prepare_at
from controller.domain.types import Usage, plausible_reset


@dataclass(frozen=True)
class UsageVerdict:
    """Whether the usage read says the limit is lifted.

    `reset` True: no window is exhausted (or no usage could be read: the screen's reset passed).
    `new_reset`: when still exhausted, the latest reset among the exhausted windows (UTC).
    """

    reset: bool
    new_reset: datetime | None = None
    reason: str = ""
    known: bool = True   # False when no usage could be read


def usage_verdict(usage: Usage | None, window: str | None, now: datetime) -> UsageVerdict:
    """Judge a fresh usage read at the resume instant.

    Args:
        usage: the subscription's windows read at or after the reset, or None if the read failed.
        window: the window the limit line named ("five_hour" | "weekly") or None for any.
        now: current instant (UTC).
    """
    if usage is None or not usage.windows:
        return UsageVerdict(True, reason="no usage data; the screen's reset has passed", known=False)
    exhausted = [
        w for w in usage.windows.values()
        if w.utilization >= 100 and (window is None or w.name == window or w.name in ("five_hour", "weekly"))
    ]
    future = [at for at in (plausible_reset(w.resets_at, now) for w in exhausted) if at and at > now]
    if future:
        new = max(future)
        return UsageVerdict(False, new, reason=f"window still at 100 %, resets {new:%Y-%m-%d %H:%M:%S} UTC")
    if any(w.resets_at and plausible_reset(w.resets_at, now) is None for w in exhausted):
        return UsageVerdict(True, reason="a window at 100 % gives an implausible reset; treated as unknown",
                            known=False)
    return UsageVerdict(True, reason="usage windows have reset")


def after_usage(rec: TabRecord, verdict: UsageVerdict, now: datetime, cfg: ResumeConfig) -> TabPlan:
    """Turn a usage verdict into "send" (record marked as sent) or "wait for the new reset".

    The returned record with phase RESUMING is the write-ahead marker: persist it before sending.
    `action` NONE with phase RESUMING means: send the resume keys. When the read came before the resume
    instant (`prepare_at`: read during the margin) the send is **armed**: `not_before` is the resume
    instant, the Enter is pressed then, not before (`sent_at` is that instant). `not_before` None: send
    now. When the usage read failed (``verdict.known`` False) and the reset came from the screen (minute
    precision), the send waits until the end of the printed minute plus ``margin_s`` (armed for it when
    that is at most ``prepare_s`` away, else re-read at its own `prepare_at`): an API outage never burns
    attempts before the real reset.
    """
    if not verdict.reset:
        assert verdict.new_reset is not None
        wait = cfg.auto_continue_grace_s if rec.auto_continue else cfg.margin_s
        resume_at = verdict.new_reset + timedelta(seconds=wait)
        who = "Claude Code continues by itself; checking at" if rec.auto_continue else "resuming at"
        return TabPlan(replace(
            rec, phase=Phase.RATE_LIMITED, resets_at=verdict.new_reset, resume_at=resume_at,
            message=f"Not reset yet ({verdict.reason}); {who} {resume_at:%H:%M:%S} UTC",
        ), wake_at=prepare_at(resume_at, verdict.new_reset, cfg), event="ResetNotYet")
    if rec.resets_at is None and not verdict.known:
        return unknown_reset_plan(rec, now, cfg)
    send_at = max(now, rec.resume_at) if rec.resume_at is not None else now
    if not verdict.known and rec.resets_at is not None and not (rec.detected_by or "").startswith("structured:"):
        # The usage API could not confirm the reset and the screen prints it to the minute only (the
        # real reset may be up to 59 s later): a continue sent earlier would hit the limit again and
        # burn an attempt. Wait until the end of the printed minute plus the margin, then send.
        end = rec.resets_at.replace(second=0, microsecond=0) + timedelta(seconds=60 + cfg.margin_s)
        if now < end and (end - now).total_seconds() > cfg.prepare_s:
            return TabPlan(replace(
                rec, phase=Phase.RATE_LIMITED, resume_at=end,
                message=f"Usage API could not confirm the reset ({verdict.reason}); the screen gives the minute "
                        f"only: resuming at {end:%H:%M:%S} UTC"), wake_at=prepare_at(end, rec.resets_at, cfg))
        send_at = max(send_at, end)
    armed = send_at > now
    message = (f"Limit reset; continue armed for {send_at:%H:%M:%S} UTC" if armed
               else "Limit reset; sending continue")
    return TabPlan(replace(
        rec, phase=Phase.RESUMING, sent_for=rec.limit_key, sent_at=send_at, resume_at=None,
        attempts=rec.attempts + 1, message=message,
    ), wake_at=send_at + timedelta(seconds=cfg.settle_s), event="Resuming", not_before=send_at if armed else None)


def unknown_reset_plan(rec: TabRecord, now: datetime, cfg: ResumeConfig) -> TabPlan:
    """No reset instant from the screen and none from usage (all windows under 100 %) right
    after the limit appeared: the usage data lags, look again later rather than send at once."""
    at = now + timedelta(seconds=cfg.unknown_reset_recheck_s)
    return TabPlan(replace(rec, resume_at=at, message=f"Limit without a reset time; re-checking at {at:%H:%M:%S} UTC"),
                   wake_at=at)
