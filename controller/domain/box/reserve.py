"""The reserve: stop the box when its subscription is Reserved, stop the agents started since (once each),
and at the lift restore the login and resume the tabs it stopped; the stop line (`stop_line`).

May touch: `Pass.mem` (reserved, reserve_pending), tab records (stopped_by_reserve, journals), keys,
notices, `RemoveLogin`, Events, metrics, and the blocking `InstallLogin` / `RunJournal`.
"""

from __future__ import annotations

from dataclasses import replace

from controller import constants as C
from controller.domain.actions import Done, InstallLogin, Performed, PressKey, PrintNotice, RemoveLogin, RunJournal
from controller.domain.box.observation import Reserve
from controller.domain.box.passstate import Pass
from controller.domain.box.screens import describe
from controller.domain.rotation import Candidate
from controller.domain.types import Detection, TabState


def apply_reserve(p: Pass, dets: dict[str, Detection]) -> None:
    """The reserve: stop the box when its subscription is Reserved (unless rotation moved it away),
    stop agents started since at most once, restore the login and resume the stopped tabs at the lift."""
    current = p.mem.current or p.obs.box.subscription or ""
    cur = next((c for c in p.obs.subscriptions or () if c.name == current), None)
    if cur is not None and cur.state == "Reserved" and not p.mem.reserved:
        _reserve_stop(p, dets, cur)
    elif cur is not None and cur.state == "Reserved" and p.mem.reserve_pending:
        _reserve_late_starters(p, dets)
    elif p.mem.reserved and (cur is None or cur.state != "Reserved"):
        _reserve_restore(p, dets)


def _reserve_stop(p: Pass, dets: dict[str, Detection], cur: Candidate) -> None:
    """Esc to the agents, remove the box's login file, print the stop line in each tab."""
    line, until = _stop_parts(p, cur)
    tabs = p.obs.tabs or ()
    p.mem = replace(p.mem, reserve_pending=frozenset(t.name for t in tabs if t.at_shell))
    for tab in tabs:
        if not tab.at_shell:
            p.actions.append(PressKey(tab.name, tab.pane, p.obs.box.stop_keys))
        # Esc went to a running agent: it counts as stopped by the reserve (resumed at the lift) unless
        # its screen showed it idle or waiting on a human. An agent that had not painted a recognisable
        # screen yet (a box started on a reserved subscription) is Unknown, not idle.
        busy = not tab.at_shell and dets[tab.name].state in (TabState.WORKING, TabState.RATE_LIMITED,
                                                             TabState.UNKNOWN)
        p.records[tab.name] = replace(p.rec(tab.name), stopped_by_reserve=busy)
    p.actions.append(RemoveLogin())
    for tab in tabs:
        p.actions.append(PrintNotice(tab.name, tab.pane, f"agentbox: {line}{until}"))
    p.mem = replace(p.mem, reserved=f"{line}{until}")
    p.count("RESERVE_STOPS", "$ns", cur.name, "five_hour" if "5-hour" in line else "weekly")
    p.event("Warning", "ReserveReached", f"{line} on {cur.name}{until}")


def _stop_parts(p: Pass, cur: Candidate) -> tuple[str, str]:
    """(stop line, " (reserved until ...)" or "") of a reserved subscription."""
    reserve = p.obs.reserves.get(cur.name, Reserve())
    five, week = reserve.five_hour, reserve.weekly
    if five and cur.five_hour is not None and cur.five_hour >= 100 - five:
        line = f"Stopping to keep {_pct(five)}% of your 5-hour limit"
    elif week:
        line = f"Stopping to keep {_pct(week)}% of your weekly limit"
    else:
        line = "Stopping to keep the reserve of your limits"
    return line, f" (reserved until {cur.until:%Y-%m-%d %H:%M} UTC)" if cur.until else ""


def stop_line(p: Pass, cur: Candidate) -> str:
    """The Reserved condition's message for a reserved subscription (`Memory.reserved`)."""
    line, until = _stop_parts(p, cur)
    return f"{line}{until}"


def _pct(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _reserve_late_starters(p: Pass, dets: dict[str, Detection]) -> None:
    """An agent started in a tab that was at its shell when the reserve stopped the box gets the same Esc
    once and is resumed at the lift like the others. Tabs already stopped are never pressed again."""
    for tab in p.obs.tabs or ():
        if tab.name not in p.mem.reserve_pending or tab.at_shell:
            continue
        if dets[tab.name].state != TabState.WORKING:
            # Not painted yet (Unknown right after it left the shell), idle or waiting on a human: a key sent
            # now would be lost before the agent reads its input; it is stopped once it is seen working.
            continue
        p.mem = replace(p.mem, reserve_pending=p.mem.reserve_pending - {tab.name})
        p.actions.append(PressKey(tab.name, tab.pane, p.obs.box.stop_keys))
        p.records[tab.name] = replace(p.rec(tab.name), stopped_by_reserve=True)


def _reserve_restore(p: Pass, dets: dict[str, Detection]) -> None:
    """The reserve lifted (or the box moved): restore the login and resume the stopped tabs."""
    current = p.mem.current or p.obs.box.subscription or ""
    done: Done = p.ask(InstallLogin(current, "restore"))
    if not done.ok:
        return
    p.mem = replace(p.mem, reserved=None, reserve_pending=frozenset())
    p.event("Normal", "ReserveLifted", f"Reserve lifted on {p.mem.current}; login restored")
    resumes: list[RunJournal] = []
    for tab in p.obs.tabs or ():
        rec = p.rec(tab.name)
        if not rec.stopped_by_reserve:
            continue
        p.records[tab.name] = replace(rec, stopped_by_reserve=False)
        view = replace(tab, detection=dets[tab.name])
        if not p.obs.box.resume_after_reset or not p.safe(view):
            continue
        if dets[tab.name].state in (TabState.IDLE, TabState.RATE_LIMITED, TabState.UNKNOWN):
            resumes.append(RunJournal(tab.name, tab.pane, p.resume_journal(None), "restore"))
    if not resumes:
        return
    for action in resumes:
        p.records[action.tab] = replace(p.records[action.tab], journal=action.journal)
    results: list[Performed] = p.ask_all(list(resumes))
    for action, res in zip(resumes, results):
        p.records[action.tab] = replace(p.records[action.tab], journal=None)
        p.event("Normal" if res.ok else "Warning", "Resumed" if res.ok else C.R_RESUME_FAILED,
                f"Tab {action.tab}: {describe(res, action.journal.action)} after the reserve lifted")
