"""Attacks on the armed continue (the continue prepared during the margin, its Enter pressed at the resume
instant, its journal written ahead with `notBefore`): what happens to an armed journal whose pod is replaced
while it waits, and to a `notBefore` no controller wrote (status edited, years away).

Unit cases run `decide` on the memory a restarted watcher rebuilds from status (`memory_from_status`); the
component case runs the real operator against the emulated world.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta

import pytest

from controller.domain.box import PodFacts, RunJournal, SendContinue, journal_from_status, memory_from_status, \
    record_to_status
from controller.domain.resume import MAX_ARMED_S, JournalAction, Phase, Step, TabRecord, start_journal
from agentbox_sim.world import TabSpec, World, eventually, fake_agent_argv
from harness.decide_cases import IDLE, observe, tab
from tests.test_resume_arming import ARMED, LINE, SCREEN, T, run_at, s

IDLE_SCREEN = "⏺ Done: the parser is refactored and the tests pass.\n╭────╮\n│ > │\n╰────╯"


def status_with(journal: dict, rec: TabRecord | None = None) -> dict:
    """A box status holding one tab `main`, resuming, with `journal` (camelCase, as in status.tabs[])."""
    rec = rec or TabRecord("main", Phase.RESUMING, limit_key="k", resets_at=T, window="five_hour",
                           detected_by=LINE.detected_by, attempts=1, sent_for="k", sent_at=s(10))
    entry = {**record_to_status(rec, "@main"), "journal": journal}
    return {"tabs": [entry], "subscription": "sub-a"}


def armed_journal_status(pod: str | None, not_before: datetime = s(10), started: datetime = s(2)) -> dict:
    j = start_journal(JournalAction.CONTINUE, started, "k", "continue", not_before=not_before)
    out = {"action": "Continue", "step": "Type", "startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
           "stepAt": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "forKey": j.for_key, "text": j.text,
           "notBefore": not_before.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if pod is not None:
        out["pod"] = pod
    return out


def in_pod(uid: str):
    """An observation of the idle tab `main` of a fresh agent, in the box pod `uid` (the pod object is not
    needed: `created_before` False leaves healing to the reconcile)."""
    return observe(tab(IDLE, screen=IDLE_SCREEN), pod_facts=PodFacts("box-a", None, uid, created_before=False))


# ---------------------------------------------------------------------------------------- the pod replaced
@pytest.mark.unit
def test_an_armed_journal_is_not_completed_in_a_replaced_pod():
    """The pod was deleted (or evicted, or recreated for a template change) while the continue was armed;
    the controller (restarted, or the same one after the pass failed on the vanished pod) finds the journal
    and a tab `main` again - in the new pod, a fresh agent at an empty prompt. Before: the journal was
    completed there (Type: "'continue' was not typed yet"), starting a turn in an agent that never hit a limit.
    """
    mem = memory_from_status(status_with(armed_journal_status("uid-old")), "sub-a")
    assert mem.records["main"].journal is not None
    d, _ = run_at(in_pod("uid-new"), mem, s(12), ARMED)
    assert not any(isinstance(a, (RunJournal, SendContinue)) for a in d.actions), d.actions
    rec = d.tab_records["main"]
    assert rec.journal is None and "replaced" in (rec.message or "")


@pytest.mark.unit
def test_an_armed_journal_in_its_own_pod_is_still_completed():
    """The guard of the case above: the same journal, the same pod: completed (from the screen's step)."""
    mem = memory_from_status(status_with(armed_journal_status("uid-old")), "sub-a")
    d, _ = run_at(in_pod("uid-old"), mem, s(12), ARMED)
    action = next(a for a in d.actions if isinstance(a, RunJournal))
    assert action.why == "recover" and action.journal.step == Step.TYPE and action.journal.pod == "uid-old"


@pytest.mark.unit
def test_the_journal_names_its_pod_in_status():
    mem = memory_from_status({"tabs": [], "subscription": "sub-a"}, "sub-a")
    obs = observe(tab(LINE, screen=SCREEN), pod_facts=PodFacts("box-a", None, "uid-1", created_before=False))
    mem = run_at(obs, mem, s(-30), ARMED)[0].memory
    _, steps = run_at(obs, mem, s(2), ARMED)
    ahead = next(st for st in steps if not st.complete and isinstance(st.actions[-1], SendContinue))
    journal = ahead.status.fields["tabs"][0]["journal"]  # type: ignore[union-attr]
    assert journal["pod"] == "uid-1" and journal["notBefore"] == "2026-03-02T12:00:10Z"
    assert journal_from_status(journal).pod == "uid-1"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------- forged notBefore
@pytest.mark.unit
@pytest.mark.parametrize("not_before,started", [
    (s(10) + timedelta(days=3 * 365), s(2)),                        # years away
    (s(2) + timedelta(seconds=MAX_ARMED_S + 1), s(2)),               # just beyond what is ever armed
])
def test_a_not_before_no_controller_arms_is_refused(not_before, started):
    """A status edited (or a clock gone wrong) puts `notBefore` years away: the recovered journal would make
    the executor wait for it (`_until`), holding the box's watcher - no pass, no other tab - that long."""
    mem = memory_from_status(status_with(armed_journal_status(None, not_before, started)), "sub-a")
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(4), ARMED)
    waiting = [a for a in d.actions if isinstance(a, RunJournal)]
    assert not waiting, f"a journal waiting until {waiting[0].journal.not_before}"
    assert d.tab_records["main"].journal is None


@pytest.mark.unit
def test_a_forged_started_at_does_not_carry_a_far_not_before():
    """`startedAt` forged as far away as `notBefore`: still refused (judged against the pass's instant)."""
    far = s(10) + timedelta(days=400)
    mem = memory_from_status(status_with(armed_journal_status(None, far, far - timedelta(seconds=8))), "sub-a")
    assert mem.records["main"].journal is not None  # readable; its instant is judged when it is recovered
    d, _ = run_at(observe(tab(LINE, screen=SCREEN)), mem, s(4), ARMED)
    assert not any(isinstance(a, RunJournal) for a in d.actions)
    rec = d.tab_records["main"]
    assert rec.journal is None and rec.phase == Phase.NEEDS_ATTENTION


@pytest.mark.unit
@pytest.mark.parametrize("raw", ["soon", 12345, "9999-12-31T23:59:59-12:00", "", None])
def test_an_unreadable_not_before_is_never_waited_for(raw):
    journal = armed_journal_status(None)
    journal["notBefore"] = raw
    parsed = journal_from_status(journal)
    if raw is None:  # absent: an unarmed journal
        assert parsed is not None and parsed.not_before is None
    else:
        assert parsed is None


@pytest.mark.unit
def test_a_legit_armed_instant_is_accepted():
    """Bound check: the longest arm the settings allow (prepare 60 s) plus the rounding is within the bound."""
    j = journal_from_status(armed_journal_status(None, s(2) + timedelta(seconds=61), s(2)))
    assert j is not None and j.not_before == s(63)


# ---------------------------------------------------------------------------------------- in the world
def _tab(world: World) -> dict:
    for t in ((world.box("box-a") or {}).get("status") or {}).get("tabs") or []:
        if t["name"] == "main":
            return t
    return {}


def _recoveries(result: str) -> float:
    """agentbox_journal_recoveries_total of the armed continue at its Type step with `result` (the operator runs
    in this process: one registry)."""
    from controller import metrics

    return metrics.REGISTRY.get_sample_value("agentbox_journal_recoveries_total",
                                             {"action": "Continue", "step": "Type", "result": result}) or 0.0


def _uid(world: World) -> str | None:
    return ((world.kube.get("v1/pods", world.namespace, "box-a") or {}).get("metadata") or {}).get("uid")


@pytest.mark.component
async def test_pod_replaced_while_the_controller_is_down_gets_no_continue_in_its_new_agent(world: World):
    """Shipped timing (margin 10 s, prepare 8 s). The continue is armed (journal in status, nothing typed); the
    controller dies; meanwhile the pod is deleted and a new one (same name, same owner, another uid) runs a
    fresh agent, idle at an empty prompt. The restarted controller finds the armed journal and a tab `main`
    again. Before: it completed the journal there ("'continue' was not typed yet"), typing `continue` into an
    agent that never hit a limit. The journal names its pod: abandoned in another pod."""
    from tests.test_resume_faults import armed_box
    from tests.test_resume_scenarios import submits

    reset, journal, _ = await armed_box(world)
    first = _uid(world)
    assert journal.get("pod") == first, journal
    await world.kill_operator()
    old = world.kube.get("v1/pods", world.namespace, "box-a")
    await world.kube.delete_object("v1/pods", world.namespace, "box-a")
    meta = {k: v for k, v in old["metadata"].items()
            if k not in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")}
    await world.create(f"/api/v1/namespaces/{world.namespace}/pods",
                       {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": old["spec"]})
    assert _uid(world) not in (None, first)
    await world.run_pod("box-a", [TabSpec("main", fake_agent_argv("claude-code", reset, "--start-working",
                                                                  "--work-seconds", "0"))])
    await eventually(lambda: "Done:" in world.screen("box-a", "main"), 15, what="the new agent idle")
    abandoned = _recoveries("abandon")
    world.start_operator()
    # The restarted controller judged the old journal in the new pod: it leaves status (abandoned, or
    # completed by typing - the defect).
    await eventually(lambda: _tab(world) and "journal" not in _tab(world), 60, what="the old journal closed")
    assert submits(world, "box-a", "main") == [], "a continue typed into the new pod's fresh agent"
    assert _recoveries("abandon") == abandoned + 1, "the journal was abandoned (its message is the next pass's)"


@pytest.mark.component
@pytest.mark.parametrize("change", ["cancel-resume", "resumeAfterReset-false"])
async def test_a_change_of_mind_while_armed_sends_nothing(world: World, change: str):
    """Shipped timing (margin 10 s, prepare 8 s): the continue is armed at reset + 2 s for reset + 10 s. A human
    then sets `cancel-resume` (or turns `resumeAfterReset` off) at once. Before: the watcher's pass sat in the
    executor's wait and typed the continue at its instant anyway - the request, made 8 s before any key, was
    read only at the pass after. The wake-up the change makes (box-event / the reconcile) now cancels the armed
    send before its first key; the next pass reads the change."""
    from controller import constants as C
    from tests.test_resume_faults import armed_box
    from tests.test_resume_scenarios import submits

    _, journal, not_before = await armed_box(world)
    assert time.time() < not_before - 3, "armed well before its instant"
    if change == "cancel-resume":
        await world.patch(world.box_path("box-a"), {"metadata": {"annotations": {C.ANNOTATION_CANCEL_RESUME: "true"}}})
    else:
        await world.patch(world.box_path("box-a"), {"spec": {"whenAgentStops": {"resumeAfterReset": False}}})
    # The armed journal is closed without a key (the send cancelled), long before its instant.
    await eventually(lambda: "journal" not in _tab(world), 10, what="the armed send cancelled")
    assert time.time() < not_before, "cancelled while it waited, not after its instant"
    # Nothing is typed at the instant or after it (absence: looked at until well past the instant).
    await eventually(lambda: time.time() > not_before + world.settings.verify_timeout_s, 30,
                     what="the armed instant long past")
    assert submits(world, "box-a", "main") == [], "the continue was sent after the change of mind"
    assert "continue" not in world.screen("box-a", "main")
    if change == "cancel-resume":
        assert "cancelled by annotation" in (_tab(world).get("message") or ""), _tab(world)
