"""Recovery of an unfinished journaled action, judged by the screen (pure domain, table-tested)."""

from datetime import datetime, timedelta, timezone

import pytest

from controller.domain.resume import JournalAction, Step, recovery_step, start_journal, MAX_RECOVERIES
from controller.domain.types import Detection, LimitKind, TabState
from controller.service.tabs import journal_from_status, journal_to_status

pytestmark = pytest.mark.unit

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)
LIMITED = Detection(TabState.RATE_LIMITED, LimitKind.USAGE, T0, "five_hour", prompt_text="", evidence="limit")


def det(state=TabState.RATE_LIMITED, prompt: str | None = "", menu=False) -> Detection:
    return Detection(state, LimitKind.USAGE if state == TabState.RATE_LIMITED else None, T0, prompt_text=prompt,
                     limit_menu=menu, menu_choice=2 if menu else None)


def journal(action: JournalAction, step: Step, text: str = "continue"):
    return start_journal(action, T0, "k1", text).at(step, T0)


C, R, M = JournalAction.CONTINUE, JournalAction.RESTART, JournalAction.ANSWER_MENU

CASES = [
    # (action, step written, screen, at shell) -> (next step, outcome)
    (C, Step.TYPE, det(prompt=""), False, Step.TYPE, "resume"),               # killed before typing
    (C, Step.TYPE, det(prompt="continue"), False, Step.ENTER, "resume"),      # typed, Enter step not written yet
    (C, Step.ENTER, det(prompt="continue"), False, Step.ENTER, "resume"),     # our own text waits for its Enter
    (C, Step.ENTER, det(TabState.IDLE, prompt=""), False, None, "done"),      # Enter went through
    (C, Step.ENTER, det(TabState.WORKING, prompt=None), False, None, "done"),  # the agent works again
    (C, Step.TYPE, det(prompt="fix the parser"), False, None, "abandon"),     # a human's draft: theirs
    (C, Step.ENTER, det(prompt="continue and fix"), False, None, "abandon"),  # not exactly ours
    (R, Step.INTERRUPT, det(prompt=""), False, Step.INTERRUPT, "resume"),     # agent still up
    (R, Step.INTERRUPT, det(TabState.UNKNOWN, prompt=None), True, Step.RELAUNCH, "resume"),
    (R, Step.RELAUNCH, det(TabState.UNKNOWN, prompt=None), True, Step.RELAUNCH, "resume"),  # at the shell
    (R, Step.RELAUNCH, det(prompt=""), False, Step.AWAIT_AGENT, "resume"),    # relaunched already
    (R, Step.AWAIT_AGENT, det(prompt=""), False, Step.AWAIT_AGENT, "resume"),
    (R, Step.TYPE, det(prompt=""), False, Step.TYPE, "resume"),
    (R, Step.TYPE, det(TabState.UNKNOWN, prompt=None), True, Step.RELAUNCH, "resume"),  # agent died again
    (R, Step.ENTER, det(prompt="continue"), False, Step.ENTER, "resume"),
    (R, Step.ENTER, det(TabState.WORKING, prompt=None), False, None, "done"),
    (M, Step.PRESS, det(menu=True, prompt=None), False, Step.PRESS, "resume"),
    (M, Step.PRESS, det(prompt=""), False, None, "done"),
]


@pytest.mark.parametrize("action,step,screen,shell,want_step,want", CASES)
def test_recovery_is_judged_by_the_screen(action, step, screen, shell, want_step, want):
    got = recovery_step(journal(action, step, "2" if action == M else "continue"), screen, shell, None)
    assert (got.step, got.outcome) == (want_step, want), got.reason


def test_a_human_who_typed_after_the_step_owns_the_tab():
    j = journal(C, Step.ENTER)
    got = recovery_step(j, det(prompt="continue"), False, T0 + timedelta(seconds=5))
    assert got.outcome == "abandon" and got.step is None
    assert recovery_step(j, det(prompt="continue"), False, T0 - timedelta(seconds=5)).step == Step.ENTER


def test_a_journal_interrupted_too_often_goes_to_a_human():
    from dataclasses import replace

    got = recovery_step(replace(journal(C, Step.TYPE), recoveries=MAX_RECOVERIES), det(), False, None)
    assert got.outcome == "abandon" and got.attention


def test_journal_round_trips_through_status_and_bad_ones_send_nothing():
    j = journal(R, Step.RELAUNCH)
    assert journal_from_status(journal_to_status(j)) == j
    assert journal_from_status({"action": "Launch", "step": "Type", "startedAt": "2026-07-01T12:00:00Z"}) is None
    assert journal_from_status({"action": "Continue", "step": "Type"}) is None
    assert journal_from_status("Continue") is None
