"""The plan of one tab at one pass (`plan_tab`): a limit event detected, came back or known, scheduled for its
reset + margin, held for a human (typing, a prompt, a half-typed line, a menu), or answered by its rate-limit
menu; and the stall check (`stall_plan`). Pure: `now` is a parameter."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from controller.domain.resume.record import Action, Phase, TabPlan, TabRecord, first_reading, limit_key
from controller.domain.resume.timing import ResumeConfig, prepare_at
from controller.domain.types import Detection, LimitKind, TabState, plausible_reset


def _human_busy(rec: TabRecord, last_input_at: datetime | None, now: datetime, cfg: ResumeConfig) -> datetime | None:
    """When the human's recent typing stops holding us back, or None if it does not."""
    if last_input_at is None:
        return None
    until = last_input_at + timedelta(seconds=cfg.human_idle_s)
    return until if until > now else None


def _due_at(det: Detection, now: datetime, cfg: ResumeConfig) -> datetime:
    if det.resets_at is None:
        return now  # no instant on screen: the usage read decides at once
    if not det.auto_continue:
        return det.resets_at + timedelta(seconds=cfg.margin_s)
    # Claude Code prints its reset rounded down to the minute: the real reset may be up to 59 s
    # later, and its own continue fires 60-110 s after that. The grace counts from the end of
    # the printed minute unless the instant came from structured data (exact to the second).
    rounded = not (det.detected_by or "").startswith("structured:")
    return det.resets_at + timedelta(seconds=cfg.auto_continue_grace_s + (60 if rounded else 0))


def plan_tab(rec: TabRecord, det: Detection, last_input_at: datetime | None, now: datetime,
             cfg: ResumeConfig, resume_enabled: bool = True) -> TabPlan:
    """Decide what to do with one tab at `now`.

    Args:
        rec: the tab's record from the previous scan (or a fresh `TabRecord(name)`).
        det: detection of the tab's live bottom at `now`.
        last_input_at: last time a human typed in this tab (UTC) or None.
        now: current instant (UTC, tz-aware).
        cfg: tunables.
        resume_enabled: spec.whenAgentStops.resumeAfterReset.
    Returns:
        A `TabPlan`; `action` CHECK_USAGE means the handler re-reads usage and calls `after_usage`.
    """
    rec = replace(rec, last_input_at=last_input_at)
    det = first_reading(rec, det)
    if det.resets_at is not None and plausible_reset(det.resets_at, now) is None:
        det = replace(det, resets_at=None)  # year 9999 and the like: unknown, the usage read decides

    if (det.state == TabState.IDLE and rec.phase == Phase.RATE_LIMITED and rec.limit_key
            and (rec.detected_by or "").startswith("structured:") and rec.sent_for != rec.limit_key):
        # A limit known only from structured data (no line on screen) vanishes from that data at
        # its reset instant: the remembered event stands until the tab is resumed.
        remembered = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, rec.resets_at, rec.window,
                               prompt_text=det.prompt_text, detected_by=rec.detected_by or "")
        return _schedule(rec, remembered, now, cfg, resume_enabled)

    if det.state != TabState.RATE_LIMITED:
        phase = {
            TabState.WORKING: Phase.WORKING,
            TabState.IDLE: Phase.IDLE,
            TabState.AWAITING_INPUT: Phase.AWAITING_INPUT,
        }.get(det.state, Phase.UNKNOWN)
        if rec.phase == Phase.NEEDS_ATTENTION and det.state in (TabState.IDLE, TabState.UNKNOWN) and rec.limit_key:
            # A human has not acted yet: keep asking.
            return TabPlan(rec)
        progressed = det.state == TabState.WORKING
        message = {
            Phase.WORKING: "Agent is working",
            Phase.IDLE: "Agent is idle at its prompt",
            Phase.AWAITING_INPUT: "Agent waits for an answer (permission prompt, question or menu)",
        }.get(phase, "No agent screen recognised")
        keep_sent = rec.sent_for if rec.phase == Phase.RESUMING or phase != Phase.WORKING else None
        return TabPlan(TabRecord(
            name=rec.name, phase=phase, message=message, last_input_at=last_input_at,
            sent_for=keep_sent, sent_at=rec.sent_at if keep_sent else None,
            attempts=0 if progressed else rec.attempts, stopped_by_reserve=rec.stopped_by_reserve,
        ))

    # ---- rate limited
    if det.kind == LimitKind.CREDITS:
        return TabPlan(replace(
            rec, phase=Phase.NEEDS_ATTENTION, limit_key=limit_key(det), resets_at=None, resume_at=None,
            detected_by=det.detected_by, window=det.window,
            message="Out of credits or at the spend cap: no reset lifts this; a human must act",
        ), event="OutOfCredits" if rec.limit_key != limit_key(det) else None)

    key = limit_key(det)
    if rec.phase == Phase.NEEDS_ATTENTION and key == rec.limit_key and rec.attempts >= cfg.max_attempts:
        # Parked after `max_attempts` resumes that did not take: a human acts (or annotates the box
        # with resume-now). Nothing is re-counted, re-announced or re-scheduled on later passes.
        return TabPlan(rec)
    if key == rec.sent_for and rec.phase == Phase.RESUMING:
        # The line a resume was just sent for.
        if rec.sent_at and now - rec.sent_at < timedelta(seconds=cfg.settle_s):
            return TabPlan(rec, wake_at=rec.sent_at + timedelta(seconds=cfg.settle_s))
        # Still the same line after the settle time: the limit came back with the same text
        # (counted once per send: the record leaves RESUMING here).
        return _new_event(rec, det, key, now, cfg, resume_enabled, came_back=True)
    if key != rec.limit_key:
        came_back = rec.sent_for is not None
        return _new_event(rec, det, key, now, cfg, resume_enabled, came_back=came_back)

    # Known event: refresh what the screen shows and see whether it is due.
    if det.auto_continue != rec.auto_continue and rec.resume_at is not None:
        # The native wait was armed since (a person chose "Wait here, then continue automatically")
        # or cancelled: its due time follows, from the reset first recorded (exact when structured).
        basis = replace(det, resets_at=rec.resets_at or det.resets_at,
                        detected_by=(rec.detected_by or "") if (rec.detected_by or "").startswith("structured:")
                        else det.detected_by)
        rec = replace(rec, resume_at=_due_at(basis, now, cfg))
    rec = replace(rec, auto_continue=det.auto_continue,
                  detected_by=det.detected_by if det.resets_at == rec.resets_at or not
                  (rec.detected_by or "").startswith("structured:") else rec.detected_by)
    return _schedule(rec, det, now, cfg, resume_enabled)


def _needs_attention(rec: TabRecord, message: str, event: str, before: TabRecord | None = None) -> TabPlan:
    """Hold the tab for a human with `message`. The Event only when the tab enters this state or
    its message changes (compared with `before`, default `rec`), never on the passes that find it
    unchanged. No resume instant and no wake-up: the next scan looks again."""
    was = before or rec
    changed = was.phase != Phase.NEEDS_ATTENTION or was.message != message
    return TabPlan(replace(rec, phase=Phase.NEEDS_ATTENTION, resume_at=None, message=message),
                   event=event if changed else None)


def _new_event(rec: TabRecord, det: Detection, key: str, now: datetime, cfg: ResumeConfig,
               resume_enabled: bool, came_back: bool) -> TabPlan:
    # `attempts` counts the resumes sent (see `after_usage`): kept while the limit keeps coming
    # back, cleared by a new limit after progress.
    attempts = rec.attempts if came_back else 0
    prev = rec
    rec = replace(
        rec, phase=Phase.RATE_LIMITED, limit_key=key, resets_at=det.resets_at, window=det.window,
        auto_continue=det.auto_continue, detected_by=det.detected_by, attempts=attempts,
        resume_at=_due_at(det, now, cfg) if resume_enabled else None,
    )
    if came_back and attempts >= cfg.max_attempts:
        return _needs_attention(rec, f"The limit came back after {attempts} resumes; a human should look",
                                "ResumeNotTakingEffect", before=prev)
    plan = _schedule(rec, det, now, cfg, resume_enabled)
    return replace(plan, event=plan.event or ("LimitCameBack" if came_back else "LimitDetected"))


def _schedule(rec: TabRecord, det: Detection, now: datetime, cfg: ResumeConfig, resume_enabled: bool) -> TabPlan:
    reset_txt = det.resets_at.strftime("%Y-%m-%d %H:%M UTC") if det.resets_at else "an unknown time"
    if not resume_enabled:
        return TabPlan(replace(rec, phase=Phase.RATE_LIMITED, resume_at=None,
                               message=f"Stopped on a usage limit until {reset_txt}; resume is off"))
    busy_until = _human_busy(rec, rec.last_input_at, now, cfg)
    if det.limit_menu:
        if det.menu_choice is None:
            return _needs_attention(rec, "The rate-limit menu is open and has no 'Stop and wait' option",
                                    "NeedsAttention")
        if rec.menu_for is not None and rec.menu_for == rec.limit_key:
            # Answered once for this limit event: never pressed again. The menu may take a moment to
            # close; still open after `settle_s`, it is a human's to look at (one Warning).
            answered = rec.menu_at or now
            if now - answered < timedelta(seconds=cfg.settle_s):
                return TabPlan(replace(rec, message=f"Answered the rate-limit menu with option {det.menu_choice}; "
                                       "waiting for it to close"), wake_at=answered + timedelta(seconds=cfg.settle_s))
            return _needs_attention(rec, f"The rate-limit menu stayed open after option {det.menu_choice} "
                                    "('Stop and wait') was pressed once; it is not pressed again", "LimitMenuStillOpen")
        if busy_until:
            return TabPlan(replace(rec, message="Rate-limit menu open; a human typed recently"), wake_at=busy_until)
        return TabPlan(replace(rec, message=f"Answering the rate-limit menu with option {det.menu_choice}"),
                       action=Action.ANSWER_MENU, menu_choice=det.menu_choice)
    resume_at = rec.resume_at or _due_at(det, now, cfg)
    rec = replace(rec, resume_at=resume_at)
    check_at = prepare_at(resume_at, rec.resets_at, cfg)
    if check_at > now:
        who = "Claude Code continues by itself; checking at" if det.auto_continue else "Resuming at"
        message = f"Usage limit until {reset_txt}. {who} {resume_at:%H:%M:%S} UTC"
        if _explains_wait(rec, resume_at):
            message = rec.message or message  # kept until the wait it explains ends
        return TabPlan(replace(rec, phase=Phase.RATE_LIMITED, message=message), wake_at=check_at)
    if busy_until:
        return TabPlan(replace(rec, phase=Phase.RATE_LIMITED,
                               message="Reset passed; waiting until the human has not typed for a minute"),
                       wake_at=busy_until, event=None)
    if det.prompt_text:
        return _needs_attention(rec, "Reset passed but the prompt holds a half-typed line; left intact for its author",
                                "PromptNotEmpty")
    return TabPlan(rec, action=Action.CHECK_USAGE)


_AFTER_USAGE_WAITS = ("Not reset yet (", "Usage API could not confirm the reset (")
"""How `after_usage` words a wait it sets (the usage read said "not yet", or could not confirm a reset the
screen prints to the minute)."""


def _explains_wait(rec: TabRecord, resume_at: datetime) -> bool:
    """`rec.message` is `after_usage`'s word for the wait that ends at `resume_at` (it names that instant).
    The next passes keep it until then: the screen's line alone would word the wait as the plain one for the
    printed reset, within a second of the usage read, and the reason for the later resume would be lost."""
    msg = rec.message or ""
    return (rec.phase == Phase.RATE_LIMITED and msg.startswith(_AFTER_USAGE_WAITS)
            and msg.endswith(f"{resume_at:%H:%M:%S} UTC"))


def stall_plan(rec: TabRecord, det: Detection, unchanged_since: datetime, now: datetime, stall_s: float,
               last_lines: str) -> TabPlan | None:
    """Level 3 of detection: a tab whose screen has not changed for `stall_s` seconds, with no
    recognised limit and no structured signal (state working or unrecognised), needs a human.

    Returns None when the tab is not stalled; otherwise a NEEDS_ATTENTION plan whose message
    carries the last screen lines (already redacted by the caller).
    """
    if det.state not in (TabState.WORKING, TabState.UNKNOWN):
        return None
    quiet = (now - unchanged_since).total_seconds()
    if quiet < stall_s:
        return None
    minutes = int(quiet // 60)
    message = (f"No progress for {minutes} min and no limit recognised; annotate the box with "
               f"agentbox.dev/resume-now to send continue. Last lines: {last_lines}")
    first = rec.phase != Phase.NEEDS_ATTENTION
    return TabPlan(replace(rec, phase=Phase.NEEDS_ATTENTION, limit_key="stalled", message=message,
                           resume_at=None), event="Stalled" if first else None)
