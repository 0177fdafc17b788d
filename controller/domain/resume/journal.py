"""Resumable actuation: the write-ahead journal of a multi-step action on one tab (its actions, steps and
limits) and, after a restart, the step the screen says to perform next (`recovery_step`). Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime

from controller.domain.types import Detection, TabState


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
