"""The executor of a box decision (`controller.domain.box`): maps each action to terminal, file and API
calls, write-ahead first. It decides nothing: which keys, which argv and which file come from the agent
adapter (`controller.agents.adapter.AgentAdapter`), what to do and in which order from the decision.

Journaled actions (`SendContinue`, `RunJournal`) have their tab journals written to status before their
first key and each further step written before it is performed; a controller killed at any step finds the
journal in status and completes it from the step it reached (`controller.domain.resume.recovery_step`).

An armed continue (`SendContinue.not_before`, a journal's `not_before`) waits: its text is typed at
`not_before` minus the send pause and `settings.resume_write_budget_s` (the Enter step's status write), and
Enter is pressed at `max(not_before, typed + send pause)`, never before `not_before`. A human's change of the
box while it waits to type (`Runtime.box_changes`: the box's spec or a resume annotation changed, its pod went,
the box was deleted) cancels it: nothing is typed and the next pass decides again; other wake-ups are kept for
the next pass. Right before the first key the screen is compared with the one the decision was made on
(`expect`, `screen_digest`): a tab whose screen differs gets nothing (`Performed.screen_changed`); right before
the armed Enter, with the screen right after our typing (taken before the Enter step's status write, so keys
typed during that write count): a tab whose screen moved since (a human typed after our text) gets no Enter
(`Performed.held`; its journal stays at Enter). The comparisons are the decision's
conditions, checked mechanically; on the live stream the screen comes from the stream's cache when tmux
reported no output since.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Mapping


from controller import constants as C
from controller import metrics
from controller.domain.box import (
    BLOCKING, JOURNALED, Act, BoxDecision, BoxStatus, CheckSession, ClearAnnotation, Count, CreatePod, DeletePod, Done,
    InstallLogin, PatchStatus, PodCreated, Performed, PostEvent, PressKey, PrintNotice, ReadStructured, ReadUsage,
    RemoveLogin, RunJournal, SendContinue, SessionSeen, StructuredRead, SwitchSubscription, UsageRead, record_to_status,
    screen_digest, switch_patches,
)
from controller.domain.resume import Journal, Step, TabRecord
from controller.kube.objects import make_box_secret
from controller.service import boxfiles
from controller.terminal import tmux
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
    """

    def __init__(self, rt: Any, namespace: str, name: str, uid: str | None, adapter: Any, term: BoxTerminal,
                 post_event: Callable[[str, str, str], None], flush: Flush,
                 screen_ready: Callable[[str], Awaitable[bool]], tabs: Mapping[str, Any],
                 body: Mapping[str, Any] | None, write_fields: WriteFields) -> None:
        self.rt, self.namespace, self.name, self.uid = rt, namespace, name, uid
        self.adapter, self.term, self.post_event, self.flush = adapter, term, post_event, flush
        self.screen_ready = screen_ready
        self.tabs = tabs
        self.body = body
        self.write_fields = write_fields
        self.done: list[Act] = []
        self.results: dict[Act, Any] = {}
        self.records: dict[str, TabRecord] = {}
        self.written: dict[str, TabRecord] = {}   # records whose journal was written ahead
        # status.switch as written ahead by a switch not finished yet (a pass that fails mid-switch keeps it:
        # the next pass completes it as a restarted controller would, the tabs it stopped included)
        self.switch_written: Mapping[str, Any] | None = None
        self._status: BoxStatus | None = None
        self._tab_ids: Mapping[str, str] = {}
        changes = getattr(rt, "box_changes", None)
        self._changes = changes.get((namespace, name), 0) if isinstance(changes, dict) else 0  # at the pass's start

    # ------------------------------------------------------------------ one decision
    async def run(self, decision: BoxDecision) -> None:
        """Perform the actions of `decision` not performed yet; the blocking ones at its end together,
        their journals written ahead first. Their results are in `results` for the next `decide`."""
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
            await self._press(action.pane, action.keys)
        elif isinstance(action, PrintNotice):
            try:
                await boxfiles.print_notice(self.term.exec_fn, self.adapter, action.pane, action.text)
            except boxfiles.BoxFileError:
                pass
        elif isinstance(action, RemoveLogin):
            try:
                await boxfiles.remove_login(self.term.exec_fn, self.adapter)
            except boxfiles.BoxFileError as exc:
                log.warning("Box %s/%s: %s", self.namespace, self.name, exc)
        elif isinstance(action, PatchStatus):
            await self._write(dict(action.fields))
        elif isinstance(action, ClearAnnotation):
            await self.rt.kube.patch_annotations(C.AGENTBOX_PLURAL, self.namespace, self.name, {action.key: None})
        else:  # pragma: no cover - every action type is handled above or in _blocking
            raise TypeError(f"unknown action {type(action).__name__}")

    async def _blocking(self, action: Act) -> Any:
        if isinstance(action, ReadUsage):
            return await self._usage(action)
        if isinstance(action, CheckSession):
            return await self._session()
        if isinstance(action, ReadStructured):
            return await self._structured(action)
        if isinstance(action, InstallLogin):
            return await self._install(action)
        if isinstance(action, SwitchSubscription):
            return await self._switch(action)
        if isinstance(action, SendContinue):
            return await self._continue_batch(action)
        if isinstance(action, RunJournal):
            return await self.perform(action.tab, action.pane, action.journal, action.expect)
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

    # ------------------------------------------------------------------ logins and usage
    async def _login(self, subscription: str) -> tuple[str, str, Any] | None:
        """(provider, login file text, parsed Login) of a subscription; None when unusable
        (:func:`controller.service.loginload.load_login_of`; simultaneous loads of one subscription by
        several boxes share one read started after each asked: `SharedLogins`)."""
        loaded = await self.rt.logins.load(self.rt.kube, self.namespace, subscription)
        if not loaded.usable:
            return None
        return loaded.provider, loaded.text or "", loaded.login

    async def _put_login(self, text: str) -> None:
        """Write a login into the box credentials Secret and the agent's live login file."""
        body = {"metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}
        await self.rt.kube.ensure_secret(make_box_secret(body, self.adapter.login_secret_key(), text))
        await boxfiles.write_login(self.term.exec_fn, self.adapter, text)

    async def _usage(self, action: ReadUsage) -> UsageRead:
        """The subscription's usage from `action.provider`'s API, no older than the action allows, and the
        provider of the login it was read with (`UsageRead`, raw: the decision says what counts,
        `controller.domain.box.usage_known`). A login of another provider is not sent to that API (the call
        cannot be made with it): usage None, its provider said. A failed read: usage None."""
        provider = action.provider
        login_provider: str | None = None
        usage: Any = None
        try:
            found = await self._login(action.subscription)
            login_provider = found[0] if found is not None else None
            if found is not None and login_provider == provider:
                usage = await self.rt.usage.get((self.namespace, action.subscription), provider, found[2],
                                                max_age_s=action.max_age_s, now=self.rt.clock)
                metrics.USAGE_READS.labels(provider, "ok").inc()
        except Exception as exc:  # noqa: BLE001 - a failed read is no usage (the decision: unknown)
            metrics.USAGE_READS.labels(provider, "error").inc()
            log.info("Box %s/%s: usage read failed (%s)", self.namespace, self.name, type(exc).__name__)
        return UsageRead(usage, self.rt.clock(), login_provider)

    async def _session(self) -> SessionSeen:
        """`tmux has-session` in the box container; unknown (None) when the exec itself failed."""
        try:
            result = await self.term.exec_fn(tmux.has_session_argv())
        except Exception as exc:  # noqa: BLE001 - exec transport errors: unknown, retried next scan
            log.warning("Box %s/%s: exec failed (%s)", self.namespace, self.name, type(exc).__name__)
            return SessionSeen(None)
        return SessionSeen(result.rc == 0)

    async def _structured(self, action: ReadStructured) -> StructuredRead:
        """The agent's structured usage files (`boxfiles.read_structured`); a failed exec is `failed`."""
        problems: list[str] = []
        try:
            usage, source = await boxfiles.read_structured(self.term.exec_fn, action.agent, action.now, problems)
        except Exception as exc:  # noqa: BLE001 - no structured data is a normal case
            log.debug("Box %s/%s: no structured usage (%s)", self.namespace, self.name, type(exc).__name__)
            return StructuredRead(None, failed=True)
        return StructuredRead(usage, source, tuple(problems))

    async def _install(self, action: InstallLogin) -> Done:
        """Install the subscription's login in the box (Secret and live file); not ok when it is unusable."""
        login = await self._login(action.subscription)
        if login is None:
            return Done(False)
        await self._put_login(login[1])
        return Done(True)

    async def _switch(self, action: SwitchSubscription) -> Done:
        """Move the box to `action.new`, journaled in status.switch (a controller killed mid-switch finds it
        and completes it). Nothing changes when the new login is unusable."""
        login = await self._login(action.new)
        if login is None:
            return Done(False)
        started, installing, finished = switch_patches(action)
        await self._write(started)
        self.switch_written = started["switch"]
        for _, pane in action.stop:
            await self._press(pane, self.adapter.interrupt_keys)
        await self._write(installing)
        self.switch_written = installing["switch"]
        await self._put_login(login[1])
        await self._write(finished)
        self.switch_written = None
        return Done(True)

    # ------------------------------------------------------------------ keys
    async def _press(self, pane: str, keys: tuple[str, ...]) -> None:
        """Press keys in order, with the send pause between two."""
        for i, key in enumerate(keys):
            if i:
                await asyncio.sleep(self.rt.settings.send_pause_s)
            await self.term.press(pane, key)

    async def _until(self, at: datetime | None) -> None:
        """Sleep until the instant `at` (UTC, by the runtime's clock); at once when it passed or is None.
        The loop's monotonic timer and the wall clock may disagree by a hair: checked again (a few times at
        most), so an armed Enter is never pressed before its instant by the runtime's clock."""
        if at is None:
            return
        for _ in range(3):
            left = (at - self.rt.clock()).total_seconds()
            if left <= 0:
                return
            await asyncio.sleep(left + 0.0005)

    async def _armed_wait(self, at: datetime | None) -> bool:
        """Wait until `at` (UTC) as `_until`, unless a human changes the box meanwhile (`Runtime.box_changes`
        moved since this executor's pass began: its spec or a resume annotation changed, its pod went, the box
        was deleted): then return True at once, and the armed send types nothing (the decision it performs is
        stale; the next pass, which the change's wake-up starts at once, decides again). Other wake-ups (a
        screen or the stream on the live stream, a Subscription) do not cancel it; they are kept for the next
        pass. `at` None (nothing to wait for): False at once."""
        if at is None:
            return False
        wakeups, changes = getattr(self.rt, "wakeups", None), getattr(self.rt, "box_changes", None)
        key = (self.namespace, self.name)
        wake = wakeups.get(key) if isinstance(wakeups, dict) else None
        if wake is None or not isinstance(changes, dict):
            await self._until(at)
            return False
        woken = False
        try:
            for _ in range(1000):  # each round ends at `at` or at a wake-up (bounded: never a busy loop)
                if changes.get(key, 0) != self._changes:
                    return True
                left = (at - self.rt.clock()).total_seconds()
                if left <= 0:
                    return False
                if wake.is_set():
                    woken = True
                    wake.clear()
                waiter = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait({waiter}, timeout=left + 0.0005)
                finally:
                    waiter.cancel()
            await self._until(at)
            return changes.get(key, 0) != self._changes
        finally:
            if woken or wake.is_set():
                wake.set()  # kept for the next pass

    def _type_at(self, not_before: datetime | None) -> datetime | None:
        """When an armed continue's text is typed: `not_before` minus the send pause and the budget of the
        Enter step's status write, so that Enter can be pressed at `not_before`."""
        if not_before is None:
            return None
        lead = self.term.send_pause_s + self.rt.settings.resume_write_budget_s
        return not_before - timedelta(seconds=lead)

    async def _continue_batch(self, action: SendContinue) -> tuple[Performed, ...]:
        """Type the text into several panes in one tmux call, write the journals' Enter step ahead, pause,
        press Enter in all of them in a second call, then wait until each pane changed.

        Armed (`action.not_before`): typed at `_type_at`, Enter at `max(not_before, typed + pause)`. With
        `action.expect`, a tab whose screen right before the typing is not the expected one gets nothing; when
        a human changes the box while the send waits to type (`_armed_wait`), no tab gets anything; a tab whose
        screen moved between the typing and the armed Enter gets no Enter (`Performed.held`)."""
        term, text = self.term, action.text
        names = [name for name, _ in action.tabs]
        panes = dict(action.tabs)
        changed: set[str] = set()
        if await self._armed_wait(self._type_at(action.not_before)):
            changed = set(names)  # the box changed while the send waited: nothing is typed
        elif action.expect:
            screens = await term.capture_all([self.tabs[name] for name in names])
            changed = {name for name, want in zip(names, action.expect)
                       if screen_digest(screens.get(self.tabs[name].id, "")) != want}
        sending = [name for name in names if name not in changed]
        moved: set[str] = set()
        held: set[str] = set()  # tab ids typed into but not entered (the armed Enter's guard)
        entered_at: datetime | None = None
        if sending:
            tabs = [self.tabs[name] for name in sending]
            typing: list[str] = ["tmux"]
            for i, name in enumerate(sending):
                typing += ([";"] if i else []) + tmux.send_text_argv(panes[name], text)[1:]
            await term.run(typing)
            typed = time.monotonic()
            # Armed: the screen the Enter is guarded by is the one right after our typing, taken before the Enter
            # step's write (which may take most of the write budget): keys a human types during that write come
            # after our text and must hold the Enter too. Unarmed: the write overlaps the send pause.
            armed = action.not_before is not None
            if not armed:
                await self._advance(sending, Step.ENTER)
            await asyncio.sleep(max(0.0, term.send_pause_s - (time.monotonic() - typed)))
            before = await term.capture_all(tabs)
            if armed:
                await self._advance(sending, Step.ENTER)
            await self._until(action.not_before)
            if armed:
                # Armed: the text waited in the prompt; Enter only where the screen is still the one after our
                # typing (a human who typed after it keeps their line: it is not submitted with ours).
                again = await term.capture_all(tabs)
                held = {t.id for t in tabs if again.get(t.id) != before.get(t.id)}
                moved.update(held)  # never waited for: reported held below
            enter: list[str] = ["tmux"]
            for name in sending:
                if self.tabs[name].id not in held:
                    enter += ([";"] if len(enter) > 1 else []) + tmux.send_key_argv(panes[name], "Enter")[1:]
            if len(enter) > 1:
                await term.run(enter)
            entered_at = self.rt.clock()

            async def all_moved() -> bool:
                after = await term.capture_all([t for t in tabs if t.id not in moved])
                moved.update(tid for tid, screen in after.items() if screen != before.get(tid))
                return len(moved) == len(tabs)

            await term.wait_until(all_moved, self.rt.settings.verify_timeout_s)
        at = self.rt.clock()
        return tuple(Performed(name, False, at, None, text=text, screen_changed=True) if name in changed
                     else Performed(name, False, at, Step.ENTER, text=text, held=True)
                     if self.tabs[name].id in held
                     else Performed(name, self.tabs[name].id in moved, at, Step.ENTER, text=text,
                                    entered_at=entered_at)
                     for name in names)

    async def perform(self, tab: str, pane: str, journal: Journal, expect: str = "") -> Performed:
        """Perform `journal`'s steps from its current one (already written), each further step written to
        status before its keys are sent. Returns the raw outcome (`Performed`: moved on or not, the step it
        stopped or ended at, what was run and typed; `controller.domain.box.describe` words it).

        An armed journal (`journal.not_before`) types its text at `_type_at` and presses Enter at
        `max(not_before, typed + pause)`, never before `not_before`; the steps before them (a restart) run at
        once. `expect`: the digest of the screen the decision was made on, compared right before the first
        key (after waiting for the first step's instant); a different screen, or a wake-up of the box's watcher
        during that wait (`_armed_wait`), sends nothing (`Performed.screen_changed`).

        Raises whatever the exec or the status write raises; the journal then stays in status and the next
        pass (or a restarted controller) completes it from the step it reached.
        """
        term, s = self.term, self.rt.settings
        argv = tuple(self.adapter.restart_argv or ())
        keys = tuple(self.adapter.interrupt_keys)
        text = journal.text or ""  # the decision fills it (`controller.domain.box.journal_to_perform`)
        not_before = journal.not_before
        entered_at: datetime | None = None

        def outcome(ok: bool, step: Step | None, restarted: bool) -> Performed:
            return Performed(tab, ok, self.rt.clock(), step, restarted, text, argv, keys, entered_at=entered_at)

        async def at_shell() -> bool:
            return (await term.foreground(pane)).lstrip("-") in tmux.SHELLS

        async def agent_ready() -> bool:
            return not await at_shell() and await self.screen_ready(pane)

        steps = journal.remaining()
        if expect:
            # The first key's instant: an armed text (or its Enter, the text typed before a restart) is checked
            # when the text would be typed; a restart's first key runs at once.
            if await self._armed_wait(self._type_at(not_before) if steps and steps[0] in (Step.TYPE, Step.ENTER)
                                      else None):
                return Performed(tab, False, self.rt.clock(), None, False, text, argv, keys, screen_changed=True)
            # The screen as the decision saw it (`capture_all`, the stream's cache when nothing was printed);
            # a tab the pass did not read is never comparable: nothing is sent.
            view = self.tabs.get(tab)
            screen = (await term.capture_all([view])).get(view.id) if view is not None else None
            if screen is None or screen_digest(screen) != expect:
                return Performed(tab, False, self.rt.clock(), None, False, text, argv, keys, screen_changed=True)
        restarted = False
        typed_screen: str | None = None  # armed: the screen right after our typing, before the Enter step's write
        for i, step in enumerate(steps):
            if i:
                await self._advance([tab], step)
            if step == Step.INTERRUPT:
                # An agent already gone (the shell in the foreground, no agent input box on the screen: stopped by
                # a switch, or it exited) gets no Ctrl-C: at the shell the keys wipe its line, and bash may handle
                # their SIGINT after reading the relaunch typed behind them (the relaunch was discarded, the agent
                # left dead at the shell).
                if not await at_shell() or await self.screen_ready(pane):
                    await self._press(pane, keys)
                if not await term.wait_until(at_shell, s.restart_timeout_s):
                    return outcome(False, step, restarted)
            elif step == Step.RELAUNCH:
                # One tmux call (text, then Enter): a shell takes no paste, and the step is then all or nothing.
                await term.run(tmux.send_text_argv(pane, shlex.join(argv))
                               + [";"] + tmux.send_key_argv(pane, "Enter")[1:])
                restarted = True
            elif step == Step.AWAIT_AGENT:
                restarted = True
                if not await term.wait_until(agent_ready, s.restart_timeout_s):
                    return outcome(False, step, restarted)
            elif step == Step.TYPE:
                await self._until(self._type_at(not_before))
                await term.run(tmux.send_text_argv(pane, text))
                await asyncio.sleep(s.send_pause_s)
                if not_before is not None:
                    # Taken before the Enter step is written: keys a human types during that write hold the Enter.
                    typed_screen = await term.capture(pane)
            elif step in (Step.ENTER, Step.PRESS):
                before = typed_screen if typed_screen is not None else await term.capture(pane)
                if step == Step.ENTER and not_before is not None and \
                        (typed_screen is not None or not_before > self.rt.clock()):
                    await self._until(not_before)
                    # Armed: Enter only if the screen is still the one after our typing (a human's keys typed
                    # after ours are never submitted with them), also when the Enter step's write ran past the
                    # instant; else the journal stays at Enter, written ahead.
                    if await term.capture(pane) != before:
                        return Performed(tab, False, self.rt.clock(), step, restarted, text, argv, keys, held=True)
                await term.press(pane, "Enter" if step == Step.ENTER else text)
                if step == Step.ENTER:
                    entered_at = self.rt.clock()
                return outcome(await term.wait_changed(pane, before, s.verify_timeout_s), step, restarted)
        return outcome(True, None, restarted)


def _journal_tabs(action: Act) -> list[str]:
    if isinstance(action, SendContinue):
        return [tab for tab, _ in action.tabs]
    if isinstance(action, RunJournal):
        return [action.tab]
    return []
