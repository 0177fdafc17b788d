"""The executor's armed continue against real tmux in an emulated pod, in both terminal modes (`poll`: one exec
per tmux command; `stream`: the live control-mode stream with its screen cache).

The tab runs a small program that prints a prompt, reads one line and logs when it received it
(`$EPOCHREALTIME`, taken by the program itself: the instant Enter reached it). The executor must deliver Enter
at `not_before`, never before; type the text only shortly before (send pause + the write budget), with the
Enter step written ahead in between; and send nothing to a tab whose screen changed since the decision.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import kubernetes.client
import pytest
import pytest_asyncio

from controller.domain.box import BoxDecision, BoxStatus, Memory, RunJournal, SendContinue, screen_digest
from controller.domain.resume import JournalAction, Phase, Step, TabRecord, start_journal
from controller.kube.aexec import AsyncExec
from controller.service.executor import Executor
from controller.settings import Settings
from controller.terminal import tmux
from controller.terminal.session import BoxTerminal
from controller.terminal.stream import BoxStream, StreamTerminal
from agentbox_sim.kube import KubeEmulator
from harness.kube_fixtures import running_pod

pytestmark = pytest.mark.component

PAUSE = 0.15
BUDGET = 0.3
LEAD = PAUSE + BUDGET
AGENT = (r"""printf '> '; IFS= read -r line; printf '%s %s\n' "$EPOCHREALTIME" "$line" >> "$0"; """
         r"""printf 'working\n'; exec sleep 100000""")
ADAPTER = SimpleNamespace(restart_argv=None, interrupt_keys=("C-c",), continue_text="continue")


@pytest.fixture
def crd_paths() -> list[Any]:
    return []


@pytest_asyncio.fixture
async def box(kube: KubeEmulator, k8s_client: kubernetes.client.ApiClient,
              tmp_path: pathlib.Path) -> AsyncIterator[tuple[AsyncExec, pathlib.Path]]:
    """A pod whose tmux session `agentbox` has one tab `main` running the line-reading program."""
    await running_pod(kube, "box")
    client = AsyncExec(k8s_client.configuration)
    log = tmp_path / "received.log"
    started = await client.run("default", "box", "box", ["tmux", "new-session", "-d", "-s", "agentbox", "-n", "main",
                                                         "-x", "100", "-y", "20", "bash", "-c", AGENT, str(log)])
    assert started.rc == 0
    try:
        yield client, log
    finally:
        await client.aclose()


def received(log: pathlib.Path) -> list[tuple[float, str]]:
    """(instant the program received the line, the line) of every line it received."""
    if not log.exists():
        return []
    return [(float(t.replace(",", ".")), text) for t, _, text in
            (line.partition(" ") for line in log.read_text().splitlines())]


class Recorder:
    """A terminal wrapper's call log: (wall-clock instant, argv) of every tmux command the executor ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, list[str]]] = []
        # (start, end) instants of capture_all calls (the stream may serve them from its cache)
        self.captures: list[tuple[float, float]] = []

    def keys(self) -> list[tuple[float, list[str]]]:
        return [(t, argv) for t, argv in self.calls if "send-keys" in argv]


def recording(base: type[BoxTerminal], rec: Recorder) -> type[BoxTerminal]:
    class Recording(base):  # type: ignore[misc, valid-type]
        async def run(self, argv: list[str], check: bool = True) -> Any:
            rec.calls.append((time.time(), list(argv)))
            return await super().run(argv, check)

        async def capture_all(self, tabs: list[tmux.Tab]) -> dict[str, str]:
            start = time.time()
            screens = await super().capture_all(tabs)
            rec.captures.append((start, time.time()))
            return screens
    return Recording


async def terminal(client: AsyncExec, mode: str, rec: Recorder) -> tuple[BoxTerminal, BoxStream | None]:
    async def exec_fn(argv: list[str]) -> Any:
        return await client.run("default", "box", "box", argv)

    if mode == "poll":
        return recording(BoxTerminal, rec)(exec_fn, PAUSE), None

    async def open_fn(argv: list[str]) -> Any:
        return await client.open("default", "box", "box", argv)
    stream = BoxStream(open_fn, exec_fn, min_wake_s=0.0)
    stream.start()
    term = recording(StreamTerminal, rec)(exec_fn, stream, PAUSE)  # type: ignore[call-arg]
    return term, stream


async def until(probe, timeout: float = 10.0, what: str = "condition") -> None:
    async with asyncio.timeout(timeout):
        while not await probe():
            await asyncio.sleep(0.05)


async def setup(client: AsyncExec, mode: str) -> tuple[BoxTerminal, BoxStream | None, Recorder, tmux.Tab, str]:
    """The terminal, the tab `main` and its screen once the program shows its prompt (on the stream: once the
    stream follows the pane and serves its screen from the cache)."""
    rec = Recorder()
    term, stream = await terminal(client, mode, rec)
    tabs: list[tmux.Tab] = []

    async def ready() -> bool:
        nonlocal tabs
        if stream is not None and not stream.connected:
            return False
        tabs = (await term.tabs())[0]
        if not tabs or "> " not in (await term.capture_all(tabs)).get(tabs[0].id, ""):
            return False
        return stream is None or stream.fresh(tabs[0].pane_id)
    await until(ready, what="the prompt")
    main = tabs[0]
    screen = (await term.capture_all([main]))[main.id]
    rec.calls.clear()
    return term, stream, rec, main, screen


def executor(term: BoxTerminal, main: tmux.Tab, flushes: list[tuple[float, Any]]) -> Executor:
    rt = SimpleNamespace(settings=Settings(send_pause_s=PAUSE, resume_write_budget_s=BUDGET, verify_timeout_s=4.0,
                                           metrics_port=0), clock=lambda: datetime.now(timezone.utc))

    async def flush(status: BoxStatus) -> None:
        flushes.append((time.time(), status.fields.get("tabs")))

    async def ready(pane: str) -> bool:
        return True

    async def write_fields(fields: dict[str, Any]) -> None:
        return None

    return Executor(rt, "default", "box", "uid", ADAPTER, term, lambda *a: None, flush, ready, {"main": main}, None,
                    write_fields)


def decision(action: Any, journal: Any) -> BoxDecision:
    records = {"main": TabRecord("main", Phase.RESUMING, journal=journal)}
    return BoxDecision((action,), Memory(records=records, tab_ids={"main": "@0"}), BoxStatus({"tabs": []}, ()),
                       complete=False)


def enter_steps(flushes: list[tuple[float, Any]]) -> list[float]:
    """Instants of the status writes that wrote the journal's Enter step ahead."""
    return [t for t, tabs in flushes for tab in tabs or [] if (tab.get("journal") or {}).get("step") == "Enter"]


def armed_send(main: tmux.Tab, screen: str, in_s: float) -> tuple[datetime, Any, SendContinue]:
    """A continue armed `in_s` seconds from now for the tab `main` decided on `screen`: (not_before, its journal
    written ahead, the action)."""
    not_before = datetime.now(timezone.utc) + timedelta(seconds=in_s)
    journal = start_journal(JournalAction.CONTINUE, datetime.now(timezone.utc), "k", "continue", not_before=not_before)
    return not_before, journal, SendContinue((("main", main.pane_id),), "continue", not_before=not_before,
                                             expect=(screen_digest(screen),))


MODES = ["poll", "stream"]


@pytest.mark.parametrize("mode", MODES)
async def test_armed_continue_enter_lands_at_not_before(box, mode: str):
    client, log = box
    term, stream, rec, main, screen = await setup(client, mode)
    try:
        not_before, journal, action = armed_send(main, screen, 2)
        nb = not_before.timestamp()
        flushes: list[tuple[float, Any]] = []
        ex = executor(term, main, flushes)
        await ex.run(decision(action, journal))
        (res,) = ex.results[action]
        assert res.ok and not res.screen_changed and res.entered_at is not None and res.entered_at >= not_before
        got = received(log)
        assert [text for _, text in got] == ["continue"], "one line, the continue text"
        assert nb <= got[0][0] < nb + 0.5, f"Enter reached the tab {got[0][0] - nb:+.3f} s from not_before"
        (typed_at, _), (enter_at, _) = rec.keys()
        assert typed_at >= nb - LEAD - 0.02, "the text is typed shortly before not_before, not at arming"
        assert flushes[0][0] < typed_at, "the journal was written ahead of the first key"
        assert any(typed_at < t < enter_at for t in enter_steps(flushes)), "the Enter step was written ahead"
    finally:
        if stream is not None:
            await stream.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_screen_changed_since_the_decision_gets_nothing(box, mode: str):
    client, log = box
    term, stream, rec, main, screen = await setup(client, mode)
    try:
        not_before, journal, action = armed_send(main, screen, 1)
        # A human types after the decision (outside the executor's terminal).
        assert (await client.run("default", "box", "box", tmux.send_text_argv(main.pane_id, "hello"))).rc == 0

        async def shown() -> bool:
            out = await client.run("default", "box", "box", tmux.capture_one_argv(main.pane_id))
            return "hello" in out.stdout
        await until(shown, what="the human's text")
        flushes: list[tuple[float, Any]] = []
        ex = executor(term, main, flushes)
        await ex.run(decision(action, journal))
        (res,) = ex.results[action]
        assert res.screen_changed and not res.ok and res.entered_at is None
        assert rec.keys() == [], "nothing was typed or pressed"
        assert enter_steps(flushes) == []
        assert received(log) == []
        out = await client.run("default", "box", "box", tmux.capture_one_argv(main.pane_id))
        assert "hello" in out.stdout and "continue" not in out.stdout
    finally:
        if stream is not None:
            await stream.aclose()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("step", [Step.TYPE, Step.ENTER])
async def test_armed_journal_completed_by_perform_waits_for_not_before(box, mode: str, step: Step):
    """A journal completed by `RunJournal` (a restarted controller's recovery, a restart-and-continue): from
    `Type`, or from `Enter` with our text already typed before the crash; Enter at not_before, once."""
    client, log = box
    if step == Step.ENTER:  # typed by the controller that was killed before its Enter
        assert (await client.run("default", "box", "box", ["tmux", "send-keys", "-t", "=agentbox:main", "-l",
                                                            "continue"])).rc == 0
    term, stream, rec, main, screen = await setup(client, mode)
    try:
        if step == Step.ENTER:
            async def echoed() -> bool:
                return "continue" in (await term.capture_all([main]))[main.id]
            await until(echoed, what="our text in the prompt")
            screen = (await term.capture_all([main]))[main.id]
        not_before = datetime.now(timezone.utc) + timedelta(seconds=2)
        nb = not_before.timestamp()
        journal = start_journal(JournalAction.CONTINUE, datetime.now(timezone.utc), "k", "continue",
                                not_before=not_before).at(step, datetime.now(timezone.utc))
        action = RunJournal("main", main.pane_id, journal, "recover", expect=screen_digest(screen))
        flushes: list[tuple[float, Any]] = []
        ex = executor(term, main, flushes)
        await ex.run(decision(action, journal))
        res = ex.results[action]
        assert res.ok and res.step == Step.ENTER and res.entered_at is not None and res.entered_at >= not_before
        got = received(log)
        assert [text for _, text in got] == ["continue"]
        assert nb <= got[0][0] < nb + 0.5, f"Enter reached the tab {got[0][0] - nb:+.3f} s from not_before"
        if step == Step.TYPE:
            typed_at = rec.keys()[0][0]
            assert typed_at >= nb - LEAD - 0.02
        else:
            assert [argv for _, argv in rec.keys()] == [tmux.send_key_argv(main.pane_id, "Enter")], "only Enter"
    finally:
        if stream is not None:
            await stream.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_a_human_typing_after_our_text_holds_the_armed_enter(box, mode: str):
    """The armed text waits in the prompt for its instant (send pause + write budget). A human who types after it
    keeps their line: Enter is not pressed (nothing is submitted, ours and theirs stay in the prompt), and the
    result says so (`held`: the journal stays at its Enter step for the next pass to judge)."""
    client, log = box
    term, stream, rec, main, screen = await setup(client, mode)
    try:
        not_before, journal, action = armed_send(main, screen, 3)
        flushes: list[tuple[float, Any]] = []
        ex = executor(term, main, flushes)
        ex.rt.settings = ex.rt.settings.model_copy(update={"resume_write_budget_s": 1.5})

        async def human() -> None:
            # Once our text is typed and the executor took the screen after it (its first capture after the
            # typing, returned: a capture still on its way could see the human's keys too, on a loaded machine
            # one exec can overtake another), a human types into the same prompt.
            async def typed_and_taken() -> bool:
                keys = rec.keys()
                return bool(keys) and any(start > keys[0][0] for start, _ in rec.captures)
            await until(typed_and_taken, what="our text typed and the screen after it taken")
            assert (await client.run("default", "box", "box", tmux.send_text_argv(main.pane_id, " please"))).rc == 0
        task = asyncio.ensure_future(human())
        await ex.run(decision(action, journal))
        await task
        (res,) = ex.results[action]
        assert res.held and not res.ok and res.entered_at is None and res.step == Step.ENTER
        assert [argv for _, argv in rec.keys()] == [tmux.send_text_argv(main.pane_id, "continue")], "no Enter"
        assert received(log) == [], "nothing was submitted"
        out = await client.run("default", "box", "box", tmux.capture_one_argv(main.pane_id))
        assert "continue please" in out.stdout, "both lines stay in the prompt for the human"
    finally:
        if stream is not None:
            await stream.aclose()


def test_type_instant_leaves_the_pause_and_the_write_budget_before_not_before():
    ex = Executor(SimpleNamespace(settings=Settings(resume_write_budget_s=0.5, metrics_port=0)), "n", "b", None,
                  ADAPTER, BoxTerminal(None, 0.3), lambda *a: None, None, None, {}, None, None)  # type: ignore[arg-type]
    at = datetime(2026, 3, 2, 12, 0, 10, tzinfo=timezone.utc)
    assert ex.sender.type_at(at) == at - timedelta(seconds=0.8)
    assert ex.sender.type_at(None) is None
    assert replace(start_journal(JournalAction.CONTINUE, at, None, None), not_before=at).not_before == at


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["batch", "journal"])
@pytest.mark.parametrize("late", [False, True])
async def test_a_human_typing_while_the_enter_step_is_written_holds_the_armed_enter(box, mode: str, how: str,
                                                                                   late: bool):
    """Between our typing and the armed Enter, the Enter step is written to status (write-ahead). That write may
    take most of the write budget (seconds on a loaded API server), or more (`late`: it ends after the instant).
    A human who types during it typed after our text: their keys must not be submitted with ours. The screen
    Enter is guarded by is the one right after our typing, not the one after the write (that one already shows
    the human's keys, and Enter submitted 'continue please'); the guard holds when the write ran past the
    instant too (a journal's Enter was pressed unguarded then)."""
    client, log = box
    term, stream, rec, main, screen = await setup(client, mode)
    try:
        not_before, journal, action = armed_send(main, screen, 3)
        if how == "journal":  # a journal completed from its Type step (a recovery, a restart-and-continue)
            action = RunJournal("main", main.pane_id, journal.at(Step.TYPE, datetime.now(timezone.utc)), "recover",
                                expect=screen_digest(screen))
        flushes: list[tuple[float, Any]] = []
        ex = executor(term, main, flushes)
        ex.rt.settings = ex.rt.settings.model_copy(update={"resume_write_budget_s": 1.5})
        plain = ex.flush

        async def slow_write(status: BoxStatus) -> None:
            await plain(status)
            if any((tab.get("journal") or {}).get("step") == "Enter" for tab in status.fields.get("tabs") or []):
                # The write of the Enter step is in flight: a human types into the prompt, after our text.
                assert (await client.run("default", "box", "box",
                                         tmux.send_text_argv(main.pane_id, " please"))).rc == 0

                async def shown() -> bool:
                    out = await client.run("default", "box", "box", tmux.capture_one_argv(main.pane_id))
                    return "continue please" in out.stdout
                await until(shown, what="the human's keys after our text")
                if late:  # the write ends after the armed instant
                    await asyncio.sleep(max(0.0, (not_before - datetime.now(timezone.utc)).total_seconds()) + 0.2)
        ex.flush = slow_write
        await ex.run(decision(action, journal))
        res = ex.results[action]
        res = res[0] if isinstance(res, tuple) else res
        assert received(log) == [], "nothing was submitted: the human's keys are not sent with ours"
        assert res.held and not res.ok and res.entered_at is None and res.step == Step.ENTER
        out = await client.run("default", "box", "box", tmux.capture_one_argv(main.pane_id))
        assert "continue please" in out.stdout, "both stay in the prompt for the human"
    finally:
        if stream is not None:
            await stream.aclose()
