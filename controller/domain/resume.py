"""Resume planning for one tab (DESIGN §3 "Resume after reset"). Pure: `now` is a parameter.

The scanner observes a tab (a `Detection` of its live bottom plus the last time a human typed)
and calls `plan_tab` with the tab's remembered `TabRecord`. The plan says what to do *now*
(nothing, answer the limit menu, check usage then resume, verify a sent resume) and when to look
again. When a resume is due the handler re-reads the subscription's usage and asks
`usage_verdict` whether the window really reset; `after_usage` turns that into "send" or
"wait for the new reset". Rules:

* resume at the reset instant + `margin_s` (at most 30 s); Claude Code's own automatic continue
  is given `auto_continue_grace_s` after the reset before we step in;
* prepare during the margin: the usage is re-read `prepare_s` before the resume instant (never before
  the reset + 1 s: `prepare_at`), and when it says the window reset the continue is *armed*: its journal
  is written ahead with `not_before` = the resume instant and the executor presses Enter at that instant
  (`after_usage` returns the plan with `not_before`); `prepare_s` 0 re-reads at the resume instant and
  sends at once (the behaviour before arming);
* leave a tab alone while a human typed in it during the last `human_idle_s` seconds, while it
  awaits input (permission prompt, question, menu), or while its prompt holds a half-typed line;
* send nothing when the agent is working again;
* never send twice for one limit event; after a send, a limit line that comes back is a new
  event, rescheduled from its own reset, at most `max_attempts` sends in a row;
* a state that does not change is neither re-announced (a plan's `event` is set only when the tab
  enters a state) nor re-handled at once: `next_pass_in` never returns 0 s for an instant already
  passed.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable

from controller.domain.types import Detection, LimitKind, TabState, Usage, plausible_reset


@dataclass(frozen=True)
class ResumeConfig:
    """Tunables of resume planning (seconds).

    Attributes:
        margin_s: delay after the reset instant before resuming (0-30).
        human_idle_s: a tab a human typed in during this many seconds is left alone.
        auto_continue_grace_s: time after the reset given to Claude Code's native continue.
        settle_s: after a send, the same limit line seen within this time is the old one.
        max_attempts: resumes for consecutive limit events without progress before asking a human.
        unknown_reset_recheck_s: when neither screen nor usage gives a reset, look again after this.
        prepare_s: how long before the resume instant the usage is re-read and the continue armed
            (0-60; `prepare_at` gives the exact rule; 0: re-read at the resume instant, send at once).
    """

    margin_s: float = 10.0
    human_idle_s: float = 60.0
    auto_continue_grace_s: float = 120.0
    settle_s: float = 20.0
    max_attempts: int = 5
    unknown_reset_recheck_s: float = 300.0
    prepare_s: float = 8.0

    def __post_init__(self) -> None:
        if not 0 <= self.margin_s <= 30:
            raise ValueError("margin_s must be within 0-30 seconds")
        if not 0 <= self.prepare_s <= 60:
            raise ValueError("prepare_s must be within 0-60 seconds")


PREPARE_AFTER_RESET_S = 1.0
"""The usage is never re-read for a resume earlier than this many seconds after the reset instant (the
provider's window must have reset by then; a read before would see the old window)."""


def prepare_at(resume_at: datetime, resets_at: datetime | None, cfg: ResumeConfig) -> datetime:
    """The instant the usage is re-read (and the continue armed) for a resume due at `resume_at` (UTC).

    Rule: `resume_at - prepare_s`, but never before `resets_at + PREPARE_AFTER_RESET_S` (1 s) and never
    after `resume_at`. Without a known reset (`resets_at` None: a resume requested by annotation, after a
    switch, or with no reset on screen and in usage) or with `prepare_s` 0 it is `resume_at` itself: the
    read happens at the resume instant and the continue is sent at once, as before arming existed.
    With the defaults (margin 10 s, prepare 8 s) the read comes 2 s after the reset and Enter lands at
    reset + 10 s; with a margin of 1 s (or less) the rule gives the resume instant again.
    """
    if cfg.prepare_s <= 0 or resets_at is None:
        return resume_at
    earliest = resets_at + timedelta(seconds=PREPARE_AFTER_RESET_S)
    return min(resume_at, max(resume_at - timedelta(seconds=cfg.prepare_s), earliest))


class Phase(str, enum.Enum):
    """Where a tab is in the resume cycle (persisted as TabStatus.state)."""

    WORKING = "Working"
    IDLE = "Idle"
    RATE_LIMITED = "RateLimited"
    AWAITING_INPUT = "AwaitingInput"
    RESUMING = "Resuming"
    NEEDS_ATTENTION = "NeedsAttention"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class TabRecord:
    """What the controller remembers about a tab between scans (mirrors status.tabs[]).

    All instants are UTC. `limit_key` identifies the limit event being handled; `sent_for` the
    event a resume was already sent for; `attempts` counts the resumes actually sent since the
    agent last made progress (one per send, never per scan). `menu_for` is the limit event whose
    rate-limit menu was answered, at `menu_at` (the menu is answered once per limit event).
    """

    name: str
    phase: Phase = Phase.UNKNOWN
    limit_key: str | None = None
    resets_at: datetime | None = None
    resume_at: datetime | None = None
    window: str | None = None
    auto_continue: bool = False
    detected_by: str | None = None
    message: str | None = None
    sent_for: str | None = None
    sent_at: datetime | None = None
    attempts: int = 0
    last_input_at: datetime | None = None
    stopped_by_reserve: bool = False
    journal: "Journal | None" = None
    menu_for: str | None = None
    menu_at: datetime | None = None


class Action(str, enum.Enum):
    """What the handler must do now for a tab."""

    NONE = "none"
    ANSWER_MENU = "answer_menu"      # press the displayed number of "Stop and wait for limit to reset"
    CHECK_USAGE = "check_usage"      # re-read usage, then call after_usage()


@dataclass(frozen=True)
class TabPlan:
    """Result of planning: the updated record, an action, and when to look at the tab again.

    `not_before` (from `after_usage` only): the continue is armed; its Enter must not be pressed before
    this instant (UTC), the resume instant. None: send now."""

    record: TabRecord
    action: Action = Action.NONE
    menu_choice: int | None = None
    wake_at: datetime | None = None
    event: str | None = None       # a milestone worth an Event (e.g. "LimitDetected")
    not_before: datetime | None = None


def limit_key(det: Detection) -> str:
    """Stable identity of a limit event: the evidence line, its kind and its reset minute (12 hex chars).

    The reset counts to the minute only: the same limit read from structured data (exact to the
    second) and from the screen (rounded down to the minute, once the exact reset has dropped out
    of the structured data at the reset) keeps one identity. A reset printed relative to the reading
    (`Detection.reset_relative`: "try again in 3 hours") does not count: it reads later at every pass.
    """
    minute = det.resets_at.replace(second=0, microsecond=0).isoformat() if det.resets_at else ""
    if det.reset_relative and det.resets_at is not None:
        minute = "relative"  # "try again in 3 hours" reads later at every pass: the line is the identity
    basis = f"{det.evidence or ''}|{minute}|{det.kind}"
    return hashlib.sha256(basis.encode()).hexdigest()[:12]


_REREAD_SHIFTS = tuple(timedelta(days=days, hours=hours) for days in (1, 7, 365, 366) for hours in (0, -1, 1))
"""How much later the same printed reset reads when read again after its hour of grace: a clock alone a day
(the next occurrence, Claude; today's, Codex), a weekday a week, a date without a year a year; an hour either
way across a DST change."""


def first_reading(rec: TabRecord, det: Detection) -> Detection:
    """`det` with the reset first recorded for its line when it is the same limit line read again later.

    The screen is detected at every pass with that pass's ``now``, and a reset printed without a full date
    reads relative to it (`controller.domain.timeparse`): "resets 11:30pm" still on screen more than the
    hour of grace after 23:30 (the usage read said "not yet", a half-typed prompt held the tab, the operator
    was down) reads as the next day's 23:30, "Wed 11:30pm" as next week's, "Dec 8, 9pm" as next year's. The
    same text (evidence, kind) whose reading moved by whole days (`_REREAD_SHIFTS`, DST included) is the
    limit being handled, not a new one: its identity and resume (the usage read's reset) stand. A reset
    printed relative to the moment it is read ("try again in 3 hours 2 minutes", `Detection.reset_relative`)
    moves with every pass; the same line keeps the reset recorded for it. The reading only ever moves earlier
    here, so the usage read decides (never a continue before a confirmed reset).

    Args:
        rec: the tab's record (its `limit_key` is the limit being handled, from its first reading).
        det: this pass's detection.
    Returns:
        `det`, or `det` with `resets_at` set to the earlier instant whose `limit_key` is `rec.limit_key`.
    """
    if (det.state != TabState.RATE_LIMITED or det.resets_at is None or not rec.limit_key
            or rec.phase not in (Phase.RATE_LIMITED, Phase.RESUMING, Phase.NEEDS_ATTENTION)):
        return det
    if limit_key(det) == rec.limit_key:
        if det.reset_relative and rec.resets_at is not None:
            # "try again in 3 hours 2 minutes" read again: 3 h 2 min after this pass, not the reset meant
            return replace(det, resets_at=rec.resets_at)
        return det
    for shift in _REREAD_SHIFTS:
        try:
            earlier = replace(det, resets_at=det.resets_at - shift)
        except OverflowError:
            return det
        if limit_key(earlier) == rec.limit_key:
            return earlier
    return det


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


def next_pass_in(wakes: Iterable[datetime | None], now: datetime, scan_interval_s: float) -> float:
    """Seconds until the watcher's next pass.

    Args:
        wakes: the plans' `wake_at` instants (UTC; None = no deadline of its own).
        now: current instant (UTC).
        scan_interval_s: the regular scan period (the answer is never longer).
    Returns:
        The time to the earliest future wake-up, at most `scan_interval_s`. An instant at or before
        `now` (an action that was due and has been handled, or a plan that forgot to move its
        deadline) counts as `min(1, scan_interval_s)` seconds, never 0: a state that does not
        change is never re-handled in a busy loop.
    """
    floor = min(1.0, scan_interval_s)
    delay = scan_interval_s
    for at in wakes:
        if at is None:
            continue
        ahead = (at - now).total_seconds()
        delay = min(delay, ahead if ahead > 0 else floor)
    return delay


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


# ----------------------------------------------------------------------------- resumable actuation
class JournalAction(str, enum.Enum):
    """A multi-step action on one tab (persisted as status.tabs[].journal.action)."""

    CONTINUE = "Continue"                    # type the continue text, then Enter
    RESTART = "RestartAndContinue"           # Ctrl-C twice, relaunch the agent, wait for it, continue
    ANSWER_MENU = "AnswerMenu"               # press the number of "Stop and wait for limit to reset"


class Step(str, enum.Enum):
    """One step of a journaled action, written to status *before* it is performed."""

    INTERRUPT = "Interrupt"      # Ctrl-C, pause, Ctrl-C; then wait for the shell
    RELAUNCH = "Relaunch"        # the restart argv and Enter, in one tmux call (a shell takes no paste)
    AWAIT_AGENT = "AwaitAgent"   # wait until the relaunched agent shows its input box
    TYPE = "Type"                # the continue text, typed literally
    ENTER = "Enter"              # Enter, in a separate call after a pause (field-pitfalls §7)
    PRESS = "Press"              # one menu digit


STEPS: dict[JournalAction, tuple[Step, ...]] = {
    JournalAction.CONTINUE: (Step.TYPE, Step.ENTER),
    JournalAction.RESTART: (Step.INTERRUPT, Step.RELAUNCH, Step.AWAIT_AGENT, Step.TYPE, Step.ENTER),
    JournalAction.ANSWER_MENU: (Step.PRESS,),
}
"""The steps of each action, in order."""

MAX_RECOVERIES = 3
"""Restarts that may each pick up the same journal before it is given to a human."""

MAX_ARMED_S = 120.0
"""Most seconds between a journal's start and its `not_before`. An armed continue is written at most
`prepare_s` (at most 60 s, `ResumeConfig`) before its instant, plus the rounding up to the second in status;
a `notBefore` further away was not written by this controller (status edited, a clock gone wrong) and is
refused, both from its own `startedAt` (`controller.domain.box.journal_from_status`) and from the instant
of the judgement (`recovery_step`): the executor would wait for it and hold the box's watcher that long."""


@dataclass(frozen=True)
class Journal:
    """The write-ahead record of a multi-step action on one tab.

    `step` is the step about to be performed (or being performed): it is persisted before the step's
    keys are sent, so after a crash the step may or may not have happened and the screen decides
    (`recovery_step`). `for_key` is the limit event the action answers; `text` the text it types (the
    continue text) or the menu digit; instants are UTC; `recoveries` counts restarts that resumed it.
    `not_before` (UTC) is set on an armed continue (`after_usage`): its Enter is never pressed before this
    instant, also when a restarted controller completes the journal (the steps before the Enter may be
    performed earlier: the text is typed shortly before it, a restart runs at once). `pod` is the uid of
    the pod whose tab the action types into (None: not known, a journal of an older controller): a journal
    found with another pod under the box (deleted or replaced since: its agent and its screen are gone) is
    never completed in the new pod (`recovery_step`).
    """

    action: JournalAction
    step: Step
    started_at: datetime
    step_at: datetime
    for_key: str | None = None
    text: str | None = None
    recoveries: int = 0
    not_before: datetime | None = None
    pod: str | None = None

    def at(self, step: Step, now: datetime) -> "Journal":
        """The journal advanced to `step` (written ahead of performing it)."""
        return replace(self, step=step, step_at=now)

    def remaining(self, start: Step | None = None) -> tuple[Step, ...]:
        """The steps from `start` (default: the current step) to the end of the action."""
        steps = STEPS[self.action]
        return steps[steps.index(start or self.step):]


def start_journal(action: JournalAction, now: datetime, for_key: str | None, text: str | None,
                  not_before: datetime | None = None, pod: str | None = None) -> Journal:
    """A new journal at the first step of `action` (`not_before`: its Enter waits for that instant; `pod`:
    the uid of the pod it types into)."""
    return Journal(action, STEPS[action][0], now, now, for_key, text, not_before=not_before, pod=pod)


@dataclass(frozen=True)
class Recovery:
    """What a restarted controller does with an unfinished journal.

    `step`: the step to perform next (the rest of the action follows), or None when nothing is left
    to send. `outcome`: "resume" (perform from `step`), "done" (the action took effect: record it as
    sent), "abandon" (a human acted or the screen is not ours: send nothing, ask a human when
    `attention`). `reason` says why in a sentence.
    """

    step: Step | None
    outcome: str
    reason: str
    attention: bool = False


def recovery_step(journal: Journal, det: Detection, at_shell: bool, last_input_at: datetime | None,
                  pod: str | None = None, now: datetime | None = None) -> Recovery:
    """Judge by the screen which step of an unfinished `journal` to perform after a restart.

    Args:
        journal: the journal found in status.tabs[] (its `step` was written before it was performed).
        det: detection of the tab's screen now.
        at_shell: the pane's foreground process is a shell (the agent is not running).
        last_input_at: the last time a human typed in the tab (UTC) or None.
        pod: the uid of the box pod the tab is in now (None: not known).
        now: the instant of the judgement (UTC; None: not checked against `not_before`).

    Rules: a journal written for another pod (`journal.pod`: the pod was deleted or replaced since) is
    abandoned: the tab of the same name in the new pod holds a fresh agent, not the one the action
    answered, and a continue typed there would start a turn nobody asked for. A `not_before` more than
    `MAX_ARMED_S` after `now` was not armed by this controller: abandoned (a human is asked), never waited
    for. A human who typed after the step was written owns the tab (send nothing). Our own continue
    text still in the prompt gets its Enter - it is never a human's draft. An agent working again gets
    nothing. A Codex tab at the shell with a restart pending gets the restart. Any other text in the
    prompt is a human's draft: left intact, a human is asked. The step chosen does not depend on the
    journal's `not_before` (an armed continue): the action that performs it keeps the journal, and the
    executor never presses its Enter before that instant.
    """
    if journal.pod and pod and journal.pod != pod:
        return Recovery(None, "abandon", "the pod it was written for was deleted or replaced since; nothing is "
                        "typed into the new pod's agent")
    if journal.not_before is not None and now is not None and \
            (journal.not_before - now).total_seconds() > MAX_ARMED_S:
        return Recovery(None, "abandon", "its armed instant is further away than the controller ever arms; "
                        "nothing is sent", attention=True)
    if journal.recoveries >= MAX_RECOVERIES:
        return Recovery(None, "abandon", f"{journal.action.value} was interrupted {journal.recoveries} times; "
                        "a human should look", attention=True)
    if last_input_at is not None and last_input_at > journal.step_at:
        return Recovery(None, "abandon", "a human typed in the tab since the controller stopped; left to them")
    if journal.action == JournalAction.ANSWER_MENU:
        if det.limit_menu:
            return Recovery(Step.PRESS, "resume", "the rate-limit menu is still open")
        return Recovery(None, "done", "the rate-limit menu was answered")
    ours = journal.text or ""
    prompt = det.prompt_text
    if det.state == TabState.WORKING:
        return Recovery(None, "done", "the agent is working again")
    if journal.action == JournalAction.RESTART and journal.step in (Step.INTERRUPT, Step.RELAUNCH, Step.AWAIT_AGENT):
        if at_shell:
            return Recovery(Step.RELAUNCH, "resume", "the tab is at the shell with a restart pending")
        if journal.step == Step.INTERRUPT:
            return Recovery(Step.INTERRUPT, "resume", "the agent has not exited yet")
        return Recovery(Step.AWAIT_AGENT, "resume", "the agent was relaunched")
    if at_shell and journal.action == JournalAction.RESTART:
        return Recovery(Step.RELAUNCH, "resume", "the agent exited before it got the continue")
    if prompt is not None and ours and prompt.strip() == ours:
        return Recovery(Step.ENTER, "resume", f"our own '{ours}' is still in the prompt")
    if prompt:
        return Recovery(None, "abandon", "the prompt holds a line the controller did not type; left intact",
                        attention=True)
    if journal.step == Step.ENTER:
        return Recovery(None, "done", f"'{ours}' was submitted")
    if prompt is None:
        return Recovery(None, "abandon", "no agent input box on the screen", attention=True)
    return Recovery(Step.TYPE, "resume", f"'{ours}' was not typed yet")
