"""Journals left unfinished (a controller restarted mid-action, a pass that failed mid-way, an armed continue
held before its Enter): judged by the screen (`controller.domain.resume.recovery_step`), then completed,
recorded done or abandoned; `journal_to_perform` is the journal as the executor performs it.

May touch: tab records, wake instants, Events, metrics, and the blocking `RunJournal` (recoveries).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from controller import constants as C
from controller.domain.actions import Performed, RunJournal
from controller.domain.box.observation import TabView
from controller.domain.box.passstate import Pass
from controller.domain.box.screens import describe, screen_digest
from controller.domain.resume import Journal, JournalAction, Phase, Step, TabRecord, recovery_step
from controller.domain.types import Detection


def recover_journals(p: Pass, dets: dict[str, Detection]) -> set[str]:
    """Unfinished journals first (a controller stopped mid-action, or a pass that failed mid-way): each is
    completed from the step it reached, judged by the screen, before anything else (their actions are
    performed together). Returns the names of the tabs that had one: they are not planned this pass."""
    done: set[str] = set()
    recovering: list[tuple[TabView, RunJournal, str, str]] = []
    for tab in p.obs.tabs or ():
        rec = p.records.get(tab.name)
        if rec is None or rec.journal is None:
            continue
        done.add(tab.name)
        pending = _recover(p, tab, rec, dets[tab.name])
        if pending is not None:
            recovering.append((tab, *pending))
    if recovering:
        results: list[Performed] = p.ask_all([a for _, a, _, _ in recovering])
        for (tab, again, what, reason), res in zip(recovering, results):
            _recovered(p, tab, again, what, reason, res)
    return done


_WHAT = {JournalAction.CONTINUE: "the continue", JournalAction.RESTART: "the restart and continue",
         JournalAction.ANSWER_MENU: "the menu answer"}


def _recover(p: Pass, tab: TabView, rec: TabRecord, det: Detection) -> tuple[RunJournal, str, str] | None:
    """Judge an unfinished journal by the screen (`recovery_step`): abandon it, record it done, or
    return the action that completes it (with what it was and why)."""
    journal = rec.journal
    assert journal is not None
    verdict = recovery_step(journal, det, tab.at_shell, tab.last_input_at, p.pod_uid, p.now)
    settle = p.now + timedelta(seconds=p.cfg.resume.settle_s)
    what = _WHAT[journal.action]
    p.count("JOURNAL_RECOVERIES", journal.action.value, journal.step.value, verdict.outcome)
    sent = journal.action != JournalAction.ANSWER_MENU
    if verdict.outcome == "abandon":
        if verdict.attention:
            event = "PromptNotEmpty" if "prompt holds" in verdict.reason else "NeedsAttention"
            p.event("Warning", event, f"Tab {tab.name}: {what} was interrupted; {verdict.reason}")
            p.records[tab.name] = replace(rec, journal=None, phase=Phase.NEEDS_ATTENTION, resume_at=None,
                                          message=f"{what.capitalize()} was interrupted; {verdict.reason}")
            p.wake[tab.name] = None
            return None
        p.records[tab.name] = replace(rec, journal=None, message=f"{what.capitalize()} was interrupted; {verdict.reason}")
        p.wake[tab.name] = settle
        return None
    if verdict.outcome == "done":
        if sent:
            p.event("Normal", "Resumed", f"Tab {tab.name}: {what} took effect before the controller restarted "
                    f"({verdict.reason})")
        p.records[tab.name] = replace(rec, journal=None, message=f"Resumed: {verdict.reason}" if sent else rec.message)
        p.wake[tab.name] = settle
        return None
    assert verdict.step is not None
    journal = replace(journal, recoveries=journal.recoveries + 1).at(verdict.step, p.now)
    p.records[tab.name] = replace(rec, journal=journal)
    # An armed continue whose instant is still ahead: the executor waits for it, then checks that the screen
    # is still the one judged here before its first key.
    armed = journal.not_before is not None and journal.not_before > p.now
    return (RunJournal(tab.name, tab.pane, journal_to_perform(journal, p.obs.box.continue_text), "recover",
                       verdict.reason, expect=screen_digest(tab.screen) if armed else ""), what, verdict.reason)


def journal_to_perform(journal: Journal, continue_text: str) -> Journal:
    """The journal as the executor performs it (it types `journal.text` and nothing else).

    Args:
        journal: a journal, possibly read from the status of an older controller.
        continue_text: the agent's continue text (`BoxFacts.continue_text`).
    Returns:
        `journal` itself when it carries its text; else (a journal written before journals carried their
        text: None or "") the same journal with `continue_text`, which is what that controller typed. Only
        the action's copy gets it: the record (and so status) keeps the journal as it was read, and
        `recovery_step` judges the screen by that.
    """
    return journal if journal.text else replace(journal, text=continue_text)


def held(p: Pass, tab: TabView, rec: TabRecord) -> None:
    """An armed continue typed but not entered (`Performed.held`: the screen moved between the typing and the
    instant). The journal stays, at its Enter step (written ahead), from the instant it was written: the next
    pass judges the screen (`recovery_step`): our text alone in the prompt gets its Enter; a line a human
    added is left intact and a human is asked; a human who typed since gets nothing."""
    journal = rec.journal
    if journal is None:  # pragma: no cover - a held result always answers a journaled action
        return
    p.count("RESUMES", "$ns", "$name", p.obs.box.agent, "screen_changed")
    p.records[tab.name] = replace(rec, journal=replace(journal, step=Step.ENTER), message=(
        f"Typed '{journal.text or p.obs.box.continue_text}' but did not press Enter: the screen changed before "
        "the resume instant (a human typed or the agent moved); judging the screen again"))
    p.wake[tab.name] = p.now


def _recovered(p: Pass, tab: TabView, action: RunJournal, what: str, reason: str, res: Performed) -> None:
    if res.held:
        held(p, tab, p.records[tab.name])
        return
    rec = replace(p.records[tab.name], journal=None)
    settle = p.now + timedelta(seconds=p.cfg.resume.settle_s)
    if res.screen_changed:
        # An armed continue completed after a restart, but the screen moved while it waited for its instant:
        # nothing was sent; the tab is limited again with its instant and the next pass plans it afresh.
        p.count("RESUMES", "$ns", "$name", p.obs.box.agent, "screen_changed")
        p.records[tab.name] = replace(
            rec, phase=Phase.RATE_LIMITED, sent_for=None, sent_at=None, attempts=max(0, rec.attempts - 1),
            resume_at=action.journal.not_before,
            message=f"{what.capitalize()} was not completed: the screen changed while it waited; planning again")
        p.wake[tab.name] = p.now
        return
    if action.journal.action == JournalAction.ANSWER_MENU:  # answered once per limit event
        p.records[tab.name] = replace(rec, menu_for=action.journal.for_key or rec.limit_key, menu_at=res.at)
        p.wake[tab.name] = p.now + timedelta(seconds=1)
        return
    p.count("RESUMES", "$ns", "$name", p.obs.box.agent, "ok" if res.ok else "no_effect")
    how = describe(res, action.journal.action)
    if res.ok:
        p.event("Normal", "Resumed", f"Tab {tab.name}: {how} after the usage limit reset "
                f"(completed after a controller restart: {reason})")
        p.records[tab.name] = replace(rec, phase=Phase.RESUMING, sent_for=action.journal.for_key or rec.sent_for,
                                      sent_at=res.at, message=f"Resumed: {how}")
        p.wake[tab.name] = settle
        return
    p.event("Warning", C.R_RESUME_FAILED, f"Tab {tab.name}: {how}")
    p.records[tab.name] = replace(rec, phase=Phase.NEEDS_ATTENTION, message=f"{how}; a human should look")
    p.wake[tab.name] = None
