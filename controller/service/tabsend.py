"""Keys on a box's tabs: pressing keys, typing a continue into several tabs at once, and performing a tab's
resume journal step by step (interrupt, relaunch, wait for the agent, type, Enter), each further step written
ahead through the executor (:class:`controller.service.executor.Executor`). It decides nothing: the keys, the
relaunch argv and the screen test come from the agent adapter, what to send and when from the decision.

An armed continue (`SendContinue.not_before`, a journal's `not_before`) waits: its text is typed at
`not_before` minus the send pause and the write budget (the Enter step's status write: at least
`settings.resume_write_budget_s`, more with the continues armed for the same instant in this process,
`controller.service.armed`), and
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

Touches: the box terminal only (tmux calls and captures through `controller.terminal.session.BoxTerminal`),
the runtime's clock, ``wakeups`` and ``box_changes`` (read; a wake-up seen while waiting is set again).
"""

from __future__ import annotations

import asyncio
import shlex
import time
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Mapping

from controller.domain.box import Performed, SendContinue, screen_digest
from controller.domain.resume import Journal, Step
from controller.terminal import tmux
from controller.terminal.session import BoxTerminal

Advance = Callable[[list[str], Step], Awaitable[None]]
"""Moves the journals of some tabs to a step and writes them ahead (`Executor._advance`)."""


class TabSender:
    """Sends keys to one box's tabs for one pass, as its decisions say.

    Args:
        rt: runtime (settings, clock; ``wakeups`` and ``box_changes`` when the daemons run).
        namespace, name: the box.
        adapter: the box's agent adapter (interrupt keys, restart argv).
        term: the box terminal.
        screen_ready: `async (pane) -> bool`: the agent's input box is on the pane's screen.
        tabs: tab name -> the terminal's tab (captures of several tabs in one call).
        advance: writes journals ahead of a step (the executor's write-ahead).
    The box's change count (`Runtime.box_changes`) is taken when it is built: a change after that cancels
    an armed send still waiting to type.
    """

    def __init__(self, rt: Any, namespace: str, name: str, adapter: Any, term: BoxTerminal,
                 screen_ready: Callable[[str], Awaitable[bool]], tabs: Mapping[str, Any], advance: Advance) -> None:
        self.rt, self.namespace, self.name = rt, namespace, name
        self.adapter, self.term, self.screen_ready, self.tabs = adapter, term, screen_ready, tabs
        self.advance = advance
        changes = getattr(rt, "box_changes", None)
        self._changes = changes.get((namespace, name), 0) if isinstance(changes, dict) else 0  # at the pass's start

    async def press(self, pane: str, keys: tuple[str, ...],
                    gone: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Press keys in order, with the send pause between two. With `gone` (the agent's shell is in the
        foreground), press no more once it is: a restarted controller completing an Interrupt step left half
        done (Codex had one Ctrl-C of two before the crash) stops Codex with the first key, and a second would
        reach its shell, whose SIGINT can discard the relaunch typed 0.2 s later (the agent left dead at the
        shell; field-pitfalls section 7)."""
        for i, key in enumerate(keys):
            if i:
                await asyncio.sleep(self.rt.settings.send_pause_s)
                if gone is not None and await gone():
                    return
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

    async def _armed_wait(self, not_before: datetime | None) -> bool:
        """Wait until the text of a continue armed for `not_before` (UTC) is to be typed (`type_at`, again each
        time the write budget of that instant moves: more continues were armed for it), unless a human changes
        the box meanwhile (`Runtime.box_changes` moved since this executor's pass began: its spec or a resume
        annotation changed, its pod went, the box was deleted): then return True at once, and the armed send
        types nothing (the decision it performs is stale; the next pass, which the change's wake-up starts at
        once, decides again). Other wake-ups (a screen or the stream on the live stream, a Subscription) do not
        cancel it; they are kept for the next pass. `not_before` None (nothing to wait for): False at once."""
        if not_before is None:
            return False
        wakeups, changes = getattr(self.rt, "wakeups", None), getattr(self.rt, "box_changes", None)
        armed = self._armed()
        key = (self.namespace, self.name)
        wake = wakeups.get(key) if isinstance(wakeups, dict) else None
        if wake is None or not isinstance(changes, dict):
            await self._until(self.type_at(not_before))
            return False
        woken = False
        try:
            for _ in range(1000):  # each round ends at the instant, a wake-up or a budget move (never busy)
                if changes.get(key, 0) != self._changes:
                    return True
                left = (self.type_at(not_before) - self.rt.clock()).total_seconds()  # type: ignore[operator]
                if left <= 0:
                    return False
                if wake.is_set():
                    woken = True
                    wake.clear()
                waiters = {asyncio.ensure_future(wake.wait())}
                if armed is not None:
                    waiters.add(asyncio.ensure_future(armed.moved(not_before).wait()))
                try:
                    await asyncio.wait(waiters, timeout=left + 0.0005, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
            await self._until(self.type_at(not_before))
            return changes.get(key, 0) != self._changes
        finally:
            if woken or wake.is_set():
                wake.set()  # kept for the next pass

    def _armed(self) -> Any:
        """The runtime's armed instants (`controller.service.armed.ArmedInstants`), None without one."""
        return getattr(self.rt, "armed", None)

    def arm(self, not_before: datetime | None) -> None:
        """Count one more continue armed for `not_before` in this process (its write budget grows with them)."""
        armed = self._armed()
        if armed is not None and not_before is not None:
            armed.join(not_before, self.rt.clock())

    def type_at(self, not_before: datetime | None) -> datetime | None:
        """When an armed continue's text is typed: `not_before` minus the send pause and the write budget of
        that instant (the Enter step's status write; it grows with the continues armed for the same instant,
        `controller.service.armed`), so that Enter can be pressed at `not_before`."""
        if not_before is None:
            return None
        armed = self._armed()
        budget = armed.budget_s(not_before) if armed is not None else self.rt.settings.resume_write_budget_s
        return not_before - timedelta(seconds=self.term.send_pause_s + budget)

    async def continue_batch(self, action: SendContinue) -> tuple[Performed, ...]:
        """Type the text into several panes in one tmux call, write the journals' Enter step ahead, pause,
        press Enter in all of them in a second call, then wait until each pane changed.

        Armed (`action.not_before`): typed at `type_at`, Enter at `max(not_before, typed + pause)`. With
        `action.expect`, a tab whose screen right before the typing is not the expected one gets nothing; when
        a human changes the box while the send waits to type (`_armed_wait`), no tab gets anything; a tab whose
        screen moved between the typing and the armed Enter gets no Enter (`Performed.held`)."""
        term, text = self.term, action.text
        names = [name for name, _ in action.tabs]
        panes = dict(action.tabs)
        changed: set[str] = set()
        self.arm(action.not_before)
        if await self._armed_wait(action.not_before):
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
                await self.advance(sending, Step.ENTER)
            await asyncio.sleep(max(0.0, term.send_pause_s - (time.monotonic() - typed)))
            before = await term.capture_all(tabs)
            if armed:
                await self.advance(sending, Step.ENTER)
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

        An armed journal (`journal.not_before`) types its text at `type_at` and presses Enter at
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
        if Step.TYPE in steps:
            self.arm(not_before)  # its Enter step is written between the typing and the Enter
        if expect:
            # The first key's instant: an armed text (or its Enter, the text typed before a restart) is checked
            # when the text would be typed; a restart's first key runs at once.
            if await self._armed_wait(not_before if steps and steps[0] in (Step.TYPE, Step.ENTER) else None):
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
                await self.advance([tab], step)
            if step == Step.INTERRUPT:
                # An agent already gone (the shell in the foreground, no agent input box on the screen: stopped by
                # a switch, or it exited) gets no Ctrl-C: at the shell the keys wipe its line, and bash may handle
                # their SIGINT after reading the relaunch typed behind them (the relaunch was discarded, the agent
                # left dead at the shell).
                if not await at_shell() or await self.screen_ready(pane):
                    await self.press(pane, keys, gone=at_shell)
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
                await self._until(self.type_at(not_before))
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
