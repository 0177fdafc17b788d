"""The working state of one `decide` call (`Pass`) and how a rule stops at a blocking action (`Blocked`).

Each rule module takes the `Pass`: it may append actions (Events and metrics through `event`/`count`, blocking
actions through `ask`/`ask_all`), replace `Pass.mem`, and set tab records, seen screens and wake instants.
Only `decision.decide` creates one.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from controller.domain.actions import Act, Count, PostEvent
from controller.domain.box.model import DecideConfig, Memory
from controller.domain.box.observation import Observation, TabView
from controller.domain.resume import Journal, JournalAction, TabRecord, start_journal
from controller.domain.types import TabState


class Blocked(Exception):
    """A blocking action has no result yet: the decision stops here."""


class Pass:
    """The working state of one `decide` call (not exported from the package: `decide` is the interface)."""

    def __init__(self, obs: Observation, mem: Memory, now: datetime, cfg: DecideConfig) -> None:
        self.obs, self.now, self.cfg = obs, now, cfg
        self.actions: list[Act] = []
        self.records: dict[str, TabRecord] = dict(mem.records)
        self.seen: dict[str, tuple[str, datetime]] = dict(mem.seen)
        self.mem = mem
        self.wake: dict[str, datetime | None] = {}
        self.period_s: float | None = None  # set by a rule that bounds the next pass (the heal retry)
        self.tabs_decided = False  # the tabs were read and decided on this pass
        self.observe_tabs = False

    # ---------------------------------------------------------------- helpers
    def event(self, type_: str, reason: str, message: str) -> None:
        self.actions.append(PostEvent(type_, reason, message))

    def count(self, metric: str, *labels: str, value: float | None = None) -> None:
        self.actions.append(Count(metric, tuple(labels), value))

    def ask(self, action: Act) -> Any:
        """Emit a blocking action; its result when it was performed, else stop the decision here."""
        self.actions.append(action)
        if action in self.obs.results:
            return self.obs.results[action]
        raise Blocked

    def ask_all(self, actions: list[Act]) -> list[Any]:
        """Emit several blocking actions performed together; their results, or stop after all of them."""
        self.actions.extend(actions)
        if all(a in self.obs.results for a in actions):
            return [self.obs.results[a] for a in actions]
        raise Blocked

    def note(self, key: str) -> bool:
        """True the first time `key` is noted (one Event per episode)."""
        if key in self.mem.noted:
            return False
        self.mem = replace(self.mem, noted=self.mem.noted | {key})
        return True

    def unnote(self, key: str) -> None:
        self.mem = replace(self.mem, noted=self.mem.noted - {key})

    def rec(self, name: str) -> TabRecord:
        return self.records.get(name) or TabRecord(name)

    def ignore(self, source: str, reason: str, messages: list[str] | tuple[str, ...]) -> None:
        """Record the invalid inputs of one source for InputIgnored; a Warning for each new message."""
        ignored = dict(self.mem.ignored)
        before = ignored.get(source, (reason, ()))[1]
        for msg in messages:
            if msg not in before:
                self.event("Warning", reason, msg)
        if messages:
            ignored[source] = (reason, tuple(dict.fromkeys(messages)))
        else:
            ignored.pop(source, None)
        self.mem = replace(self.mem, ignored=ignored)

    def safe(self, tab: TabView) -> bool:
        """The rules of resume: no recent human typing, no prompt or menu, no half-typed line."""
        last = tab.last_input_at
        if last and (self.now - last).total_seconds() < self.cfg.resume.human_idle_s:
            return False
        det = tab.detection
        return not (det.state == TabState.AWAITING_INPUT or det.prompt_text)

    @property
    def pod_uid(self) -> str | None:
        """The uid of the box pod this pass observed (None: not known)."""
        facts = self.obs.pod_facts
        return facts.uid if facts is not None and facts.uid else None

    def resume_journal(self, for_key: str | None) -> Journal:
        box = self.obs.box
        action = JournalAction.RESTART if box.restarts else JournalAction.CONTINUE
        return start_journal(action, self.now, for_key, box.continue_text, pod=self.pod_uid)
