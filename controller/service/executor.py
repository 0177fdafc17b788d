"""The executor of a box decision (`controller.domain.box`): maps each action to terminal, file and API
calls, write-ahead first. It decides nothing: which keys, which argv and which file come from the agent
adapter (`controller.agents.adapter.AgentAdapter`), what to do and in which order from the decision.

Journaled actions (`SendContinue`, `RunJournal`) have their tab journals written to status before their
first key and each further step written before it is performed; a controller killed at any step finds the
journal in status and completes it from the step it reached (`controller.domain.resume.recovery_step`).

This module performs a pass's decisions in order, each action once, and owns the write-ahead (the tab
journals flushed to status); the work of each action is one part's job: keys on the tabs and the armed
continue (:mod:`controller.service.tabsend`), the reads a decision waits on (:mod:`controller.service.boxreads`),
the box's login and a switch of subscription (:mod:`controller.service.boxlogin`). Itself it touches the box's
status (through `flush` and `write_fields`), Events, metrics, the box's annotations and pod, and a tab's
terminal for a notice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Awaitable, Callable, Mapping


from controller import constants as C
from controller import metrics
from controller.domain.box import (
    BLOCKING, JOURNALED, Act, BoxDecision, BoxStatus, CheckSession, ClearAnnotation, Count, CreatePod, DeletePod, Done,
    InstallLogin, PatchStatus, PodCreated, PostEvent, PressKey, PrintNotice, ReadStructured, ReadUsage, RemoveLogin,
    RunJournal, SendContinue, SwitchSubscription, record_to_status,
)
from controller.domain.resume import Step, TabRecord
from controller.service import boxfiles
from controller.service.boxlogin import BoxLogins
from controller.service.boxreads import BoxReads
from controller.service.tabsend import TabSender
from controller.terminal.session import BoxTerminal

log = logging.getLogger("agentbox.executor")

Flush = Callable[[BoxStatus], Awaitable[None]]
"""Writes a status snapshot now (a write-ahead point)."""
WriteFields = Callable[[dict[str, Any]], Awaitable[Any]]
"""Writes status fields now through the box's one status writer (the switch journal)."""


class ReplayMismatch(RuntimeError):
    """A replayed decision did not repeat the actions already performed (decide is not deterministic)."""


class Executor:
    """Performs the actions of one pass's decisions, in order, each once.

    Args:
        rt: runtime (kube, usage cache, settings, clock).
        namespace, name, uid: the box.
        adapter: the box's agent adapter (keys, restart argv, login file, provider).
        term: the box terminal.
        post_event: posts an Event on the box.
        flush: writes a status snapshot (write-ahead).
        screen_ready: `async (pane) -> bool`: the agent's input box is on the pane's screen (the adapter's
            detector); used to verify a relaunch.
        tabs: tab name -> the terminal's tab (captures of several tabs in one call).
        body: the AgentBox object (the pod builder of `CreatePod`).
        write_fields: writes status fields through the box's status writer (status.switch, the switch journal).
    Attributes:
        results: each blocking action performed -> its raw result (for the next `decide`).
        written: tab name -> its record as last written ahead (a pass that fails mid-way keeps them).
        sender, reads, logins: the parts (:class:`TabSender`, :class:`BoxReads`, :class:`BoxLogins`).
    """

    def __init__(self, rt: Any, namespace: str, name: str, uid: str | None, adapter: Any, term: BoxTerminal,
                 post_event: Callable[[str, str, str], None], flush: Flush,
                 screen_ready: Callable[[str], Awaitable[bool]], tabs: Mapping[str, Any],
                 body: Mapping[str, Any] | None, write_fields: WriteFields) -> None:
        self.rt, self.namespace, self.name, self.uid = rt, namespace, name, uid
        self.adapter, self.term, self.post_event, self.flush = adapter, term, post_event, flush
        self.body = body
        self.write_fields = write_fields
        self.done: list[Act] = []
        self.results: dict[Act, Any] = {}
        self.records: dict[str, TabRecord] = {}
        self.written: dict[str, TabRecord] = {}   # records whose journal was written ahead
        self._status: BoxStatus | None = None
        self._tab_ids: Mapping[str, str] = {}
        self.sender = TabSender(rt, namespace, name, adapter, term, screen_ready, tabs, self._advance)
        self.reads = BoxReads(rt, namespace, name, term)
        self.logins = BoxLogins(rt, namespace, name, uid, adapter, term, self._write, self.sender.press)

    @property
    def switch_written(self) -> Mapping[str, Any] | None:
        """status.switch as written ahead by a switch not finished yet (a pass that fails mid-switch keeps it:
        the next pass completes it as a restarted controller would, the tabs it stopped included)."""
        return self.logins.switch_written

    # ------------------------------------------------------------------ one decision
    async def run(self, decision: BoxDecision) -> None:
        """Perform the actions of `decision` not performed yet; the blocking ones at its end together,
        their journals written ahead first. Their results are in `results` for the next `decide`.

        Raises:
            ReplayMismatch: `decision` does not begin with the actions already performed.
            whatever an action's exec, API call or status write raises (what was written ahead stays).
        """
        done = len(self.done)
        if tuple(decision.actions[:done]) != tuple(self.done):
            raise ReplayMismatch(f"box {self.namespace}/{self.name}: the decision changed its performed actions")
        new = list(decision.actions[done:])
        self.records = dict(decision.memory.records)
        self._tab_ids = decision.memory.tab_ids
        self._status = decision.status
        waiting = [a for a in new if isinstance(a, BLOCKING) and a not in self.results]
        for action in new:
            if action in waiting:
                continue
            await self._one(action)
            self.done.append(action)
        if not waiting:
            return
        if any(isinstance(a, JOURNALED) for a in waiting) and decision.status is not None:
            for action in waiting:
                for tab in _journal_tabs(action):
                    self.written[tab] = self.records[tab]
            await self.flush(decision.status)
        results = await asyncio.gather(*(self._blocking(a) for a in waiting))
        for action, result in zip(waiting, results):
            self.results[action] = result
            self.done.append(action)

    async def _one(self, action: Act) -> None:
        if isinstance(action, PostEvent):
            self.post_event(action.type, action.reason, action.message)
        elif isinstance(action, Count):
            labels = [self.namespace if v == "$ns" else self.name if v == "$name" else v for v in action.labels]
            metric = getattr(metrics, action.metric)
            metric = metric.labels(*labels) if labels else metric
            if action.value is None:
                metric.inc()
            else:
                metric.observe(action.value)
        elif isinstance(action, PressKey):
            await self.sender.press(action.pane, action.keys)
        elif isinstance(action, PrintNotice):
            try:
                await boxfiles.print_notice(self.term.exec_fn, self.adapter, action.pane, action.text)
            except boxfiles.BoxFileError:
                pass
        elif isinstance(action, RemoveLogin):
            await self.logins.remove()
        elif isinstance(action, PatchStatus):
            await self._write(dict(action.fields))
        elif isinstance(action, ClearAnnotation):
            await self.rt.kube.patch_annotations(C.AGENTBOX_PLURAL, self.namespace, self.name, {action.key: None})
        else:  # pragma: no cover - every action type is handled above or in _blocking
            raise TypeError(f"unknown action {type(action).__name__}")

    async def _blocking(self, action: Act) -> Any:
        if isinstance(action, ReadUsage):
            return await self.reads.usage(action)
        if isinstance(action, CheckSession):
            return await self.reads.session()
        if isinstance(action, ReadStructured):
            return await self.reads.structured(action)
        if isinstance(action, InstallLogin):
            return await self.logins.install(action)
        if isinstance(action, SwitchSubscription):
            return await self.logins.switch(action)
        if isinstance(action, SendContinue):
            return await self.sender.continue_batch(action)
        if isinstance(action, RunJournal):
            return await self.sender.perform(action.tab, action.pane, action.journal, action.expect)
        if isinstance(action, DeletePod):
            return Done(bool(await self.rt.kube.delete_pod(self.namespace, action.name, action.uid)))
        if isinstance(action, CreatePod):
            from controller.service.boxes import reconcile_box

            outcome = await reconcile_box(dict(self.body or {}), self.rt)
            return PodCreated(tuple(outcome.events), outcome.retry_after)
        raise TypeError(f"unknown action {type(action).__name__}")  # pragma: no cover

    # ------------------------------------------------------------------ write-ahead
    async def _advance(self, names: list[str], step: Step) -> None:
        """Move the journals of `names` to `step` and write them ahead of performing it."""
        now = self.rt.clock()
        for name in names:
            rec = self.records.get(name)
            if rec is not None and rec.journal is not None:
                self.records[name] = self.written[name] = replace(rec, journal=rec.journal.at(step, now))
        if self._status is not None:
            tabs = [record_to_status(r, self._tab_ids.get(r.name)) for r in self.records.values()]
            await self.flush(replace(self._status, fields={**self._status.fields, "tabs": tabs}))

    async def _write(self, fields: dict[str, Any]) -> None:
        """Write status fields now through the box's one status writer."""
        await self.write_fields(fields)


def _journal_tabs(action: Act) -> list[str]:
    if isinstance(action, SendContinue):
        return [tab for tab, _ in action.tabs]
    if isinstance(action, RunJournal):
        return [action.tab]
    return []
