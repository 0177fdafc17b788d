"""Each tab's plan for one pass: unfinished journals first (`recover`), then `plan_tab`, the stall check,
the annotations and the Event worth announcing; limit menus answered (journaled); the due tabs handed to
`due.resume_due` together; the records of closed tabs dropped (`forget_closed_tabs`).

May touch: tab records, seen screens, wake instants, Events, metrics, and the blocking `RunJournal` (menus).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Mapping

from controller.conditions import rfc3339
from controller.domain.actions import Performed, RunJournal
from controller.domain.box.annotations import apply_annotations
from controller.domain.box.due import resume_due
from controller.domain.box.observation import TabView
from controller.domain.box.passstate import Pass
from controller.domain.box.recover import recover_journals
from controller.domain.box.screens import screen_digest
from controller.domain.resume import Action as PlanAction, JournalAction, TabPlan, plan_tab, stall_plan, start_journal
from controller.domain.signals import last_lines
from controller.domain.types import Detection, TabState


def plan_tabs(p: Pass, dets: dict[str, Detection], annotations: Mapping[str, str], resume_on: bool) -> None:
    """Journals left unfinished first, then each tab's plan; menus answered; due tabs resumed together."""
    tabs = p.obs.tabs or ()
    cfg = p.cfg.resume
    done = recover_journals(p, dets)
    menus: list[tuple[TabView, RunJournal, TabPlan]] = []
    due: list[TabView] = []
    plans: dict[str, TabPlan] = {}
    for tab in tabs:
        if tab.name in done:
            continue
        det = dets[tab.name]
        plan = plan_tab(p.rec(tab.name), det, tab.last_input_at, p.now, cfg, resume_on)
        digest = screen_digest(tab.screen)
        seen = p.seen.get(tab.name)
        if seen is None or seen[0] != digest:
            seen = p.seen[tab.name] = (digest, p.now)
        stalled = stall_plan(plan.record, det, seen[1], p.now, p.obs.stall_s, last_lines(tab.screen))
        stall_at: datetime | None = None
        if stalled is not None:
            plan = stalled
        elif det.state in (TabState.WORKING, TabState.UNKNOWN):
            # On the live stream an unchanged screen wakes nothing: the stall instant is a deadline.
            stall_at = seen[1] + timedelta(seconds=p.obs.stall_s)
        plan = apply_annotations(p, plan, det, annotations)
        _announce(p, tab.name, det, plan)
        plans[tab.name] = plan
        p.records[tab.name] = plan.record
        p.wake[tab.name] = min((w for w in (plan.wake_at, stall_at) if w is not None), default=None)
        if plan.action == PlanAction.ANSWER_MENU and plan.menu_choice is not None:
            journal = start_journal(JournalAction.ANSWER_MENU, p.now, plan.record.limit_key, str(plan.menu_choice),
                                    pod=p.pod_uid)
            p.records[tab.name] = replace(plan.record, journal=journal)
            menus.append((tab, RunJournal(tab.name, tab.pane, journal, "menu"), plan))
        elif plan.action == PlanAction.CHECK_USAGE:
            due.append(tab)
    if menus:
        results: list[Performed] = p.ask_all([a for _, a, _ in menus])
        for (tab, answer, plan), res in zip(menus, results):
            choice = answer.journal.text
            p.event("Normal", "AnsweredLimitMenu",
                    f"Tab {tab.name}: chose option {choice} 'Stop and wait for limit to reset'"
                    + ("" if res.ok else " (screen did not change)"))
            # Once per limit event: the next passes wait for the menu to close (domain.resume._schedule).
            p.records[tab.name] = replace(plan.record, journal=None, menu_for=plan.record.limit_key, menu_at=res.at)
            p.wake[tab.name] = p.now + timedelta(seconds=1)
    if due:
        resume_due(p, due)


def _announce(p: Pass, tab: str, det: Detection, plan: TabPlan) -> None:
    """The Event (and metric) of a plan that entered a state worth announcing."""
    rec = plan.record
    if plan.event == "LimitDetected":
        p.count("DETECTIONS", "$ns", p.obs.box.agent, (det.detected_by or "").split(":")[0],
                det.kind.value if det.kind else "")
        when = f"resets {rfc3339(det.resets_at)}" if det.resets_at else "no reset time on screen"
        nxt = rec.message or "the reset has passed; checking the subscription's usage now"
        p.event("Normal", "LimitDetected", f"Tab {tab}: usage limit ({when}); {nxt}")
    elif plan.event in ("ResumeNotTakingEffect", "PromptNotEmpty", "OutOfCredits", "NeedsAttention", "Stalled",
                        "LimitMenuStillOpen"):
        p.event("Warning", plan.event, f"Tab {tab}: {rec.message}")
    elif plan.event == "LimitCameBack":
        p.event("Normal", "LimitCameBack", f"Tab {tab}: {rec.message}")


def forget_closed_tabs(p: Pass) -> None:
    """Drop the records, seen screens and window ids of the tabs that were not observed this pass (closed)."""
    live = {t.name for t in p.obs.tabs or ()}
    p.records = {k: v for k, v in p.records.items() if k in live}
    p.seen = {k: v for k, v in p.seen.items() if k in live}
    p.mem = replace(p.mem, tab_ids={k: v for k, v in p.mem.tab_ids.items() if k in live})
