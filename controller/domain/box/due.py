"""Due resumes: one usage read for every due tab (`usage_known` says what it may rely on), the journals
written ahead, then the keys (one batched continue per send instant, or concurrent restarts), and what each
outcome means for its tab.

May touch: tab records, wake instants, Events, metrics, and the blocking `ReadUsage` / `SendContinue` /
`RunJournal`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from controller import constants as C
from controller.domain.actions import Performed, ReadUsage, RunJournal, SendContinue, UsageRead
from controller.domain.box.observation import TabView
from controller.domain.box.passstate import Pass
from controller.domain.box.recover import held
from controller.domain.box.screens import describe, screen_digest
from controller.domain.resume import JournalAction, Phase, TabRecord, after_usage, usage_verdict
from controller.domain.types import Usage


def usage_known(read: UsageRead, provider: str) -> Usage | None:
    """The usage a resume may rely on from a `ReadUsage`'s raw result.

    Args:
        read: the result (the usage, the provider of the subscription's login).
        provider: the box's agent's provider (`BoxFacts.provider`).
    Returns:
        `read.usage` when the subscription's login is a login of `provider`; else None (unknown, never
        "exhausted": no usable login, or a login of another provider, whose usage says nothing of this
        agent's). The resume then goes by the screen's reset time.
    """
    return read.usage if read.login_provider == provider else None


def resume_due(p: Pass, due: list[TabView]) -> None:
    """Resume every due tab together: one usage read, one write-ahead of every journal, then the keys:
    agents that only need `continue` get it in one batched call per send instant; agents that restart are
    restarted concurrently.

    A read during the margin (`controller.domain.resume.prepare_at`) that finds the window reset **arms**
    the send: the journal is written ahead with `not_before` = the resume instant, the action carries it
    with the digest of the screen decided on (`expect`), and the executor presses Enter at that instant.
    A tab whose screen changed before the keys (`Performed.screen_changed`) got nothing: its record is the
    one before the read (the attempt is not counted) and the next pass plans it again from its new screen."""
    box = p.obs.box
    current = p.mem.current or box.subscription or ""
    max_age = p.obs.usage_max_age_s
    for tab in due:
        resets = p.records[tab.name].resets_at
        if resets is not None:
            max_age = min(max_age, max(0.0, (p.now - resets).total_seconds()))
    read: UsageRead = p.ask(ReadUsage(current, max_age, tuple(t.name for t in due), box.provider))
    now = read.at
    known = usage_known(read, box.provider)
    sending: list[tuple[TabView, TabRecord, datetime | None]] = []  # (tab, its record before, not_before)
    for tab in due:
        rec = p.records[tab.name]
        nxt = after_usage(rec, usage_verdict(known, rec.window, now), now, p.cfg.resume)
        p.records[tab.name] = nxt.record
        p.wake[tab.name] = nxt.wake_at
        if nxt.record.phase == Phase.RESUMING:
            if nxt.not_before is None:
                p.count("DEADLINE_LAG", value=max(0.0, (now - (rec.resume_at or now)).total_seconds()))
            sending.append((tab, rec, nxt.not_before))
        elif nxt.event == "ResetNotYet":
            p.event("Normal", "ResetNotYet", f"Tab {tab.name}: {nxt.record.message}")
    if not sending:
        return
    # Write-ahead: every tab is marked as being resumed for its limit event, with the journal of the action
    # at its first step (and the instant its Enter waits for), before any key is sent. A controller restarted
    # mid-way completes the journal from the step it reached (never twice, never zero, never before
    # `not_before`).
    for tab, _, not_before in sending:
        rec = p.records[tab.name]
        p.records[tab.name] = replace(rec, journal=replace(p.resume_journal(rec.sent_for), started_at=now,
                                                           step_at=now, not_before=not_before))
    journal_action = JournalAction.RESTART if box.restarts else JournalAction.CONTINUE
    results: list[Performed]
    if box.restarts:
        actions = [RunJournal(t.name, t.pane, p.records[t.name].journal, "resume",  # type: ignore[arg-type]
                              expect=screen_digest(t.screen) if nb is not None else "") for t, _, nb in sending]
        results = p.ask_all(list(actions))
    else:
        # One batched call per send instant (tabs of one box due at different instants are rare).
        instants = list(dict.fromkeys(nb for _, _, nb in sending))
        batches = [[t for t, _, nb in sending if nb == at] for at in instants]
        sends = [SendContinue(tuple((t.name, t.pane) for t in batch), box.continue_text, not_before=at,
                              expect=tuple(screen_digest(t.screen) for t in batch) if at is not None else ())
                 for at, batch in zip(instants, batches)]
        outcomes: list[tuple[Performed, ...]] = p.ask_all(list(sends))
        by_tab = {res.tab: res for outcome in outcomes for res in outcome}
        results = [by_tab[t.name] for t, _, _ in sending]
    for (tab, before, not_before), res in zip(sending, results):
        if res.screen_changed:
            # Nothing was typed: the screen moved since the decision (the agent resumed by itself, a human
            # typed, a menu opened). Back to the plan before the read; the next pass plans from the new screen.
            p.count("RESUMES", "$ns", "$name", box.agent, "screen_changed")
            p.records[tab.name] = replace(before, journal=None, message=(
                "The screen or the box changed before the armed continue was typed (the agent moved, a human "
                "typed, a menu opened, the box's spec or annotations changed); nothing was sent; planning again"))
            p.wake[tab.name] = p.now
            continue
        if res.held:
            held(p, tab, p.records[tab.name])
            continue
        if not_before is not None and res.entered_at is not None:
            p.count("DEADLINE_LAG", value=max(0.0, (res.entered_at - not_before).total_seconds()))
        p.count("RESUMES", "$ns", "$name", box.agent, "ok" if res.ok else "no_effect")
        rec = replace(p.records[tab.name], journal=None)
        how = describe(res, journal_action)
        if res.ok:
            # Said when the reset could not be confirmed (usage API down, refused, throttled): the tab was
            # resumed on the screen's reset time, late rather than never.
            unconfirmed = "" if known is not None else (
                " (the usage API could not be read; resumed on the screen's reset time; see the "
                "Subscription's UsageFetched condition)")
            p.event("Normal", "Resumed", f"Tab {tab.name}: {how} after the usage limit reset{unconfirmed}")
            p.records[tab.name] = replace(rec, message=f"Resumed: {how}")
        else:
            p.event("Warning", C.R_RESUME_FAILED, f"Tab {tab.name}: {how}")
            p.records[tab.name] = replace(rec, phase=Phase.NEEDS_ATTENTION, message=f"{how}; a human should look")
            p.wake[tab.name] = None
