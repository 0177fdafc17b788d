"""The live tmux stream: control mode over a streamed exec (emulator -> real tmux), matched replies,
change notifications, the human's last input and window sizes untouched, reconnect, and the fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kubernetes.client
import pytest
import pytest_asyncio

from controller.kube.aexec import AsyncExec
from controller.kube.exec import ExecResult
from agentbox_sim.kube import KubeEmulator
from controller.terminal import control, tmux
from controller.terminal.control import ControlClient, ControlError
from controller.terminal.stream import BoxStream, StreamTerminal
from harness.kube_fixtures import running_pod



@pytest.fixture
def crd_paths() -> list[Any]:
    return []


@pytest_asyncio.fixture
async def aexec(kube: KubeEmulator, k8s_client: kubernetes.client.ApiClient) -> AsyncIterator[AsyncExec]:
    await running_pod(kube, "box")
    client = AsyncExec(k8s_client.configuration)
    run = lambda *argv: client.run("default", "box", "box", list(argv))  # noqa: E731
    assert (await run("tmux", "new-session", "-d", "-s", "agentbox", "-x", "120", "-y", "30", "sh")).rc == 0
    assert (await run("tmux", "new-window", "-d", "-t", "agentbox", "sh")).rc == 0
    try:
        yield client
    finally:
        await client.aclose()


def _exec_fn(aexec: AsyncExec):
    async def run(argv: list[str], stdin: str | None = None) -> ExecResult:
        return await aexec.run("default", "box", "box", argv, stdin=stdin)
    return run


def _open_fn(aexec: AsyncExec):
    async def open_(argv: list[str]) -> Any:
        return await aexec.open("default", "box", "box", argv)
    return open_


async def _until(probe, timeout: float = 20.0) -> None:
    """Poll `probe` every 50 ms until it is true; TimeoutError after `timeout` s (generous: under CI's workers
    on 2 cores a notification waited more than 5 s for this process's loop, which also runs the emulated
    API server and kubelet)."""
    async with asyncio.timeout(timeout):
        while not await probe():
            await asyncio.sleep(0.05)


async def test_replies_are_matched_to_their_callers(aexec: AsyncExec) -> None:
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    try:
        replies = await asyncio.gather(*(client.command(["tmux", "display-message", "-p", f"caller-{i}"])
                                         for i in range(20)))
        assert [r[0].lines for r in replies] == [[f"caller-{i}"] for i in range(20)]
        failed, fine = await client.command(["tmux", "has-session", "-t", "=nope", ";", "display-message", "-p", "x"])
        assert not failed.ok and "nope" in failed.lines[0] and fine.ok and fine.lines == ["x"]
        # a screen line imitating the protocol ends nothing: only the block's own time and number do
        pane = (await client.command(["tmux", "display-message", "-p", "-t", "=agentbox:0", "#{pane_id}"]))[0].lines[0]
        await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", "echo '%end 1 2 1'; echo '%begin 3 4 1'"])
        await client.command(["tmux", "send-keys", "-t", pane, "Enter"])

        async def printed() -> bool:
            screen = (await client.command(tmux.capture_one_argv(pane)))[0].lines
            return screen.count("%end 1 2 1") == 1
        await _until(printed)
        after = await client.command(["tmux", "display-message", "-p", "still-in-step"])
        assert after[0].lines == ["still-in-step"]
        # text tmux's parser could reinterpret (quotes, $VAR, ~, #{...}, ;, backslash) arrives literally
        tricky = "it's $HOME; #{pane_id} ~ \"q\" \\ end"
        await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", tricky])

        async def typed() -> bool:
            return tricky in "\n".join((await client.command(tmux.capture_one_argv(pane)))[0].lines)
        await _until(typed)
        await client.command(["tmux", "send-keys", "-t", pane, "C-u"])
        with pytest.raises(ControlError) as exc:
            await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", "two\nlines"])
        assert exc.value.reason == "unquotable"
    finally:
        await client.aclose()


async def test_changes_are_reported_per_pane_and_tab(aexec: AsyncExec) -> None:
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    try:
        tabs, _ = tmux.parse_tabs((await aexec.run("default", "box", "box", tmux.list_tabs_argv())).stdout)
        client.take_dirty()
        await client.command(["tmux", "send-keys", "-t", tabs[1].pane_id, "-l", "--", "echo busy"])
        await _until(lambda: asyncio.sleep(0, tabs[1].pane_id in client.dirty))
        dirty, tabs_changed = client.take_dirty()
        assert dirty == {tabs[1].pane_id} and not tabs_changed
        await aexec.run("default", "box", "box", ["tmux", "new-window", "-d", "-t", "agentbox", "sh"])
        await _until(lambda: asyncio.sleep(0, client.tabs_changed))
        await aexec.run("default", "box", "box", ["tmux", "kill-server"])
        await asyncio.wait_for(client.closed.wait(), 5)
        assert client.exit_reason is not None and client.exit_reason.startswith("exit")
        with pytest.raises(ControlError):
            await client.command(["tmux", "display-message", "-p", "x"])
    finally:
        await client.aclose()


async def test_the_control_client_is_not_a_human_and_sizes_nothing(aexec: AsyncExec) -> None:
    run = lambda *argv: aexec.run("default", "box", "box", list(argv))  # noqa: E731
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    try:
        for _ in range(3):
            await client.command(["tmux", "display-message", "-p", "x"])
        out = (await run(*tmux.list_tabs_argv())).stdout
        assert "\x1f1" in out  # the control client is listed ...
        tabs, inputs = tmux.parse_tabs(out)
        assert inputs == {}  # ... and is not a human typing
        size = await run("tmux", "list-windows", "-t", "=agentbox", "-F", "#{window_width}x#{window_height}")
        assert size.stdout.split() == ["120x30", "120x30"]
    finally:
        await client.aclose()


async def test_box_stream_wakes_on_meaningful_changes_and_reconnects(kube: KubeEmulator, aexec: AsyncExec) -> None:
    woke: list[int] = []
    box = BoxStream(_open_fn(aexec), _exec_fn(aexec), debounce_s=0.05, backoff_s=(0.05, 0.2),
                    classify=lambda pane, screen: "READY" in screen, on_change=lambda: woke.append(1))
    box.start()
    term = StreamTerminal(_exec_fn(aexec), box, send_pause_s=0.05)
    try:
        await _until(lambda: asyncio.sleep(0, box.connected and len(box.screens) == 2))
        tabs, _ = await term.tabs()
        execs = len(kube.exec_journal)
        before = len(woke)
        await term.type_line(tabs[0].pane_id, "echo no-key-change")
        await term.type_line(tabs[0].pane_id, "echo REA''DY")

        async def ready() -> bool:
            return "READY" in (await term.capture_all(tabs))[tabs[0].id].replace("REA''DY", "")
        await _until(ready)
        # at most min_wake_s after the last wake (a live read of a freshly changed pane may see it first)
        await _until(lambda: asyncio.sleep(0, len(woke) > before))
        assert len(kube.exec_journal) == execs  # typing, listing and capturing went over the stream
        # the stream drops (the client is detached): it comes back by itself
        await aexec.run("default", "box", "box", ["tmux", "detach-client", "-s", "=agentbox"])
        await _until(lambda: asyncio.sleep(0, box.opened >= 2 and box.connected))
        assert (await term.tabs())[0][0].id == tabs[0].id
    finally:
        await box.aclose()


async def test_a_capture_of_a_pane_with_no_output_since_is_the_cache_and_a_changed_one_is_read(
        aexec: AsyncExec) -> None:
    """The send steps' captures (the Enter guard, the wait for a change after a key) cost no round trip while
    tmux reported nothing printed; a pane with output since its cached capture is captured over the stream."""
    box = BoxStream(_open_fn(aexec), _exec_fn(aexec), debounce_s=0.05, backoff_s=(0.05, 0.2))
    box.start()
    term = StreamTerminal(_exec_fn(aexec), box, send_pause_s=0.05)
    try:
        await _until(lambda: asyncio.sleep(0, box.connected and len(box.screens) == 2))
        tabs, _ = await term.tabs()
        pane = tabs[0].pane_id
        await term.type_line(pane, "echo settled-$((6*7))")
        await _until(lambda: asyncio.sleep(0, "settled-42" in box.screens.get(pane, "") and box.fresh(pane)))
        assert box.client is not None
        sent: list[list[str]] = []
        command = box.client.command

        async def spy(argv: list[str], timeout: float = 10.0) -> Any:
            sent.append(argv)
            return await command(argv, timeout)
        box.client.command = spy  # type: ignore[method-assign]
        live = (await aexec.run("default", "box", "box", tmux.capture_one_argv(pane))).stdout.rstrip("\n")
        assert await term.capture(pane) == live and sent == []  # the cache, equal to a capture now
        box.client.dirty.add(pane)  # tmux printed something since (its %output came)
        await aexec.run("default", "box", "box", tmux.send_text_argv(pane, "typed-after"))
        assert "typed-after" in await term.capture(pane)
        assert tmux.capture_one_argv(pane) in sent  # read over the stream (the follower may capture it too)
    finally:
        await box.aclose()


async def test_no_control_mode_means_polling_and_says_why() -> None:
    for rc, out, reason in ((127, "", "no tmux"), (0, "tmux 3.1c\n", "older than 3.2")):
        async def exec_fn(argv: list[str], stdin: str | None = None, rc=rc, out=out) -> ExecResult:
            return ExecResult(out, "", rc)

        async def open_fn(argv: list[str]) -> Any:
            raise AssertionError("no stream may be opened")
        changes: list[int] = []
        box = BoxStream(open_fn, exec_fn, on_change=lambda: changes.append(1))
        box.start()
        await asyncio.wait_for(box._task, 5)  # type: ignore[arg-type]
        assert box.unavailable is not None and reason in box.unavailable and changes == [1]
        assert not box.connected
    assert control.supported("tmux 3.3a") and control.supported("tmux next-3.6")
    assert not control.supported("tmux 2.9")


async def test_flow_control_pause_marks_the_pane_and_it_is_continued(aexec: AsyncExec) -> None:
    """pause-after: the client attaches with the flag (tmux then pauses a pane whose output waited for it
    over N seconds instead of buffering without bound); a %pause marks the pane changed and paused, and
    after its capture the client continues it, so its output flows again. The pause is asked of tmux
    directly (``refresh-client -A %N:pause``, what pause-after does by itself) so the test does not
    depend on how fast the machine drains a flood."""
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv(pause_after_s=1)))
    try:
        state = await aexec.run("default", "box", "box", ["tmux", "list-clients", "-t", "=agentbox", "-F",
                                                          "#{client_control_mode} #{client_flags}"])
        assert "pause-after=1" in state.stdout and "ignore-size" in state.stdout, state.stdout
        tabs, _ = tmux.parse_tabs((await client.command(tmux.list_tabs_argv()))[0].lines[0] + "\n")
        pane = tabs[0].pane_id
        await client.command(["tmux", "refresh-client", "-A", f"{pane}:pause"])
        await _until(lambda: asyncio.sleep(0, pane in client.paused))
        assert pane in client.dirty
        client.take_dirty()
        await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", "echo paused-output"])
        await client.command(["tmux", "send-keys", "-t", pane, "Enter"])
        await client.command(["tmux", "display-message", "-p", "x"])  # replies come after any %output before
        assert pane not in client.dirty  # paused: tmux sends nothing for it
        await client.resume_panes({pane})
        assert pane not in client.paused
        await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", "echo flowing"])
        await client.command(["tmux", "send-keys", "-t", pane, "Enter"])
        await _until(lambda: asyncio.sleep(0, pane in client.dirty))  # continued: its output flows again
    finally:
        await client.aclose()


async def test_an_attached_human_is_not_disturbed(aexec: AsyncExec, tmux_sockets: Any) -> None:
    """A human attached with a real terminal (a client of the box's tmux running in another tmux's pane,
    90x20): the control client leaves the window sizes, the window the human looks at and the human's
    last-input time alone, and the human's typing is still told from the controller's commands."""
    import os
    import subprocess

    from agentbox_sim.kube import _tmux_env

    box_sock = tmux_sockets("default", "box")
    term_sock = tmux_sockets("default", "human-terminal")
    env = _tmux_env(os.environ)

    def terminal(*argv: str) -> None:
        subprocess.run(["tmux", "-S", str(term_sock), *argv], capture_output=True, env=env, timeout=10, check=True)
    run = lambda *argv: aexec.run("default", "box", "box", list(argv))  # noqa: E731

    async def human() -> dict[str, str]:
        out = (await run("tmux", "list-clients", "-t", "=agentbox", "-F",
                         "#{client_control_mode} #{window_id} #{client_width}x#{client_height} "
                         "#{client_activity}")).stdout
        rows = [line.split() for line in out.splitlines() if line.startswith("0 ")]
        return {"window": rows[0][1], "size": rows[0][2], "activity": rows[0][3]} if rows else {}

    async def sizes() -> list[str]:
        return (await run("tmux", "list-windows", "-t", "=agentbox", "-F", "#{window_width}x#{window_height}")).stdout.split()

    async def inputs() -> dict[str, Any]:
        return tmux.parse_tabs((await run(*tmux.list_tabs_argv())).stdout)[1]

    terminal("new-session", "-d", "-s", "t", "-x", "90", "-y", "20", f"tmux -S {box_sock} attach -t =agentbox")
    try:
        await _until(human, 10)
        tabs, _ = tmux.parse_tabs((await run(*tmux.list_tabs_argv())).stdout)
        await run("tmux", "select-window", "-t", tabs[1].id)  # the human looks at the second tab

        async def settled() -> bool:
            return (await human()).get("window") == tabs[1].id and (await sizes())[1] == "90x19"
        await _until(settled, 10)  # the human's terminal sizes the window they look at
        before, seen = await human(), await sizes()

        client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            # commands for over two seconds (activity is kept in whole seconds): captures, listings, keys
            while loop.time() - started < 2.2:
                await client.command(tmux.capture_argv(tabs))
                await client.command(tmux.list_tabs_argv())
                await client.command(tmux.send_key_argv(tabs[0].pane_id, "Enter"))
            assert await human() == before  # same window, same size, no input counted for the human
            assert await sizes() == seen
            assert tabs[0].id not in await inputs()  # the controller's keys are not a human's input
            terminal("send-keys", "-t", "t:", "-l", "x")  # the human types

            async def typed() -> bool:
                return tabs[1].id in await inputs()
            await _until(typed, 10)
        finally:
            await client.aclose()
    finally:
        subprocess.run(["tmux", "-S", str(term_sock), "kill-server"], capture_output=True, env=env, timeout=10)


class _NotTmux:
    """A stream whose other end prints something that is not tmux, then ends."""

    def __init__(self) -> None:
        self.sent = False

    async def write(self, data: bytes) -> None:
        pass

    async def read(self) -> tuple[int, bytes] | None:
        if self.sent:
            return None
        self.sent = True
        return 1, b"this is not tmux\n"

    async def aclose(self) -> None:
        pass


async def test_a_stream_given_up_is_tried_again_later(aexec: AsyncExec) -> None:
    """A box whose stream failed max_failures times is polled (unavailable says why), and tried again
    retry_unusable_s later: a box whose streams failed because the controller or the API server was
    overloaded (commands unanswered in time) gets its stream back instead of being polled for good."""
    bad = {"left": 2}

    async def open_fn(argv: list[str]) -> Any:
        if bad["left"]:
            bad["left"] -= 1
            return _NotTmux()
        return await aexec.open("default", "box", "box", argv)
    box = BoxStream(open_fn, _exec_fn(aexec), debounce_s=0.05, backoff_s=(0.05, 0.1), max_failures=2,
                    retry_unusable_s=0.5)
    box.start()
    try:
        await _until(lambda: asyncio.sleep(0, box.unavailable is not None))
        assert "failed 2 times" in box.unavailable and not box.connected
        await _until(lambda: asyncio.sleep(0, box.connected and len(box.screens) == 2), 10)
        assert box.opened == 3
    finally:
        await box.aclose()


async def test_paused_panes_are_continued_and_captured_in_one_round_trip(aexec: AsyncExec) -> None:
    """What the stream does per change after its debounce (`BoxStream._follow`): the paused panes are continued
    and every changed pane captured in ONE command round trip (one sync block), not one per pane plus one to
    continue (at a reset a thousand boxes' panes change together). A pane too large for `max_block` gets
    None and the others still their screen."""
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    try:
        tabs, _ = tmux.parse_tabs("".join(line + "\n" for line in
                                          (await client.command(tmux.list_tabs_argv()))[0].lines))
        first, second = tabs[0].pane_id, tabs[1].pane_id
        await client.command(["tmux", "refresh-client", "-A", f"{first}:pause"])
        await _until(lambda: asyncio.sleep(0, first in client.paused))
        for pane, word in ((first, "one-trip-a"), (second, "one-trip-b")):
            await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", f"echo {word}"])
            await client.command(["tmux", "send-keys", "-t", pane, "Enter"])
        await asyncio.sleep(0.3)
        blocks = client.blocks
        screens = await client.resume_and_capture({first, second})
        assert client.blocks - blocks == 4, "continue + two captures + the sync block: one round trip"
        assert first not in client.paused
        assert "one-trip-a" in "\n".join(screens[first].lines) and "one-trip-b" in "\n".join(screens[second].lines)
        await client.command(["tmux", "send-keys", "-t", first, "-l", "--", "echo flowing"])
        await client.command(["tmux", "send-keys", "-t", first, "Enter"])
        await _until(lambda: asyncio.sleep(0, first in client.dirty))  # continued: its output flows again

        await client.command(["tmux", "send-keys", "-t", second, "-l", "--", "seq 1 200"])
        await client.command(["tmux", "send-keys", "-t", second, "Enter"])
        await asyncio.sleep(0.3)
        client.max_block = 80  # the second pane's screen (30 lines of numbers) is over it, the first's not
        screens = await client.resume_and_capture({first, second})
        assert screens[second] is None and screens[first] is not None and screens[first].ok
        assert not client.closed.is_set(), "a large screen is not a broken stream"
    finally:
        await client.aclose()
