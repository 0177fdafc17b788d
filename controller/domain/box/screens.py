"""What a decision reads of a tab's screen and how it words what it did there: `screen_key` (what wakes
the live stream), `screen_digest` (stalls, armed sends), `agent_ready`, `describe` (a journaled action's outcome).

Pure functions of one detection, screen or outcome; touch no pass state.
"""

from __future__ import annotations

import hashlib
from typing import Any

from controller.domain.actions import Performed
from controller.domain.resume import JournalAction, Step, limit_key
from controller.domain.types import Detection, TabState


def screen_key(det: Detection) -> tuple[Any, ...]:
    """Everything a decision reads from one tab's detection: its state and kind, the limit event, and what
    changes a plan without changing them (a native wait cancelled with Esc, a menu opening, a line typed
    into the prompt). The live stream wakes the watcher when a pane's key changes."""
    return (det.state, det.kind, limit_key(det) if det.state == TabState.RATE_LIMITED else None,
            det.auto_continue, det.limit_menu, det.menu_choice, bool(det.prompt_text))


def screen_digest(screen: str) -> str:
    """A short digest of a tab's screen (16 hex chars of SHA-256): the stall check compares it between
    passes, and an armed send (`SendContinue.expect`, `RunJournal.expect`) compares the screen right before
    its first key with the one the decision was made on (the executor calls this same function)."""
    return hashlib.sha256(screen.encode(errors="replace")).hexdigest()[:16]


def agent_ready(det: Detection) -> bool:
    """The agent's input box is on the screen (a relaunched agent is back)."""
    return det.prompt_text is not None


def describe(res: Performed, action: JournalAction) -> str:
    """What a journaled action did, in words (Events, tab messages): from its raw outcome `res` and the
    journal's `action` (a restart-and-continue says what it ran even when the relaunch happened before a
    controller restart)."""
    if res.step is None:
        return "nothing left to send"
    if res.step == Step.INTERRUPT:
        return f"pressed {'+'.join(res.keys)} but the agent did not exit"
    if res.step in (Step.AWAIT_AGENT, Step.RELAUNCH):
        return f"ran '{' '.join(res.argv)}' but the agent's prompt did not come back"
    if res.step == Step.PRESS:
        return f"pressed {res.text}"
    how = (f"restarted with '{' '.join(res.argv)}' and sent '{res.text}'"
           if res.restarted or action == JournalAction.RESTART else f"sent '{res.text}'")
    return how if res.ok else f"{how} but the screen did not change"
