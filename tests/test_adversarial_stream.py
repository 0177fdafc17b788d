"""The live tmux stream attacked from inside the box (issue 12 item 3, threat model: everything a box prints
is untrusted): forged control-protocol blocks, floods, a huge line, a stalled stream, a non-tmux banner, a
box whose `tmux` answers slowly.  The box side is real tmux behind the emulator's streamed exec, or
tests/fixtures/fake_tmux.py standing for a `tmux` the box put on its PATH."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import kubernetes.client
import pytest
import pytest_asyncio

from controller.kube.aexec import AsyncExec
from controller.kube.exec import ExecResult
from agentbox_sim.kube import KubeEmulator, LocalExec, TmuxSockets
from agentbox_sim.world import eventually
from controller.terminal import control, tmux
from controller.terminal.control import ControlClient, ControlError
from controller.terminal.stream import BoxStream
from harness.kube_fixtures import running_pod

pytestmark = pytest.mark.component

FAKE_TMUX = pathlib.Path(__file__).parent / "fixtures" / "fake_tmux.py"


class HostileExec(LocalExec):
    """LocalExec where the pods named in ``modes`` have their own `tmux` (fake_tmux.py in that mode)."""

    modes: dict[str, str]

    def rewrite_argv(self, namespace: str, pod: str, argv: list[str]) -> list[str]:
        mode = self.modes.get(pod)
        if mode and argv and argv[0] == "tmux":
            return [sys.executable, str(FAKE_TMUX), mode, str(self.tmux_socket_for(namespace, pod)), *argv[1:]]
        return super().rewrite_argv(namespace, pod, argv)


@pytest.fixture
def crd_paths() -> list[Any]:
    return []


@pytest.fixture
def local_exec(sandbox_root: pathlib.Path, tmux_sockets: TmuxSockets) -> HostileExec:
    handler = HostileExec(sandbox_root, tmux_sockets, timeout=20.0)
    handler.modes = {}
    return handler


@pytest_asyncio.fixture
async def aexec(kube: KubeEmulator, k8s_client: kubernetes.client.ApiClient) -> AsyncIterator[AsyncExec]:
    client = AsyncExec(k8s_client.configuration)
    for pod in ("box", "evil"):
        await running_pod(kube, pod)
        run = lambda *argv, pod=pod: client.run("default", pod, "box", list(argv))  # noqa: E731
        assert (await run("tmux", "new-session", "-d", "-s", "agentbox", "-x", "120", "-y", "30", "sh")).rc == 0
    try:
        yield client
    finally:
        await client.aclose()


def _fns(aexec: AsyncExec, pod: str) -> tuple[Any, Any]:
    async def run(argv: list[str]) -> ExecResult:
        return await aexec.run("default", pod, "box", argv)

    async def open_(argv: list[str]) -> Any:
        return await aexec.open("default", pod, "box", argv)
    return run, open_


def _stream(aexec: AsyncExec, pod: str, **kw: Any) -> BoxStream:
    run, open_ = _fns(aexec, pod)
    opts: dict[str, Any] = dict(debounce_s=0.05, backoff_s=(0.05, 0.2), command_timeout_s=2.0)
    return BoxStream(open_, run, **{**opts, **kw})


async def _until(probe: Any, timeout: float = 10.0, what: str = "condition") -> None:
    """The harness's `eventually`, polling every 50 ms, 10 s unless told."""
    await eventually(probe, timeout, every=0.05, what=what)


class ScriptedStream:
    """An exec stream whose bytes the test writes (what the box's side sends), commands recorded."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self.sent: list[str] = []

    async def write(self, data: bytes) -> None:
        self.sent += data.decode().splitlines()

    async def read(self) -> tuple[int, bytes] | None:
        return await self.queue.get()

    async def aclose(self) -> None:
        self.queue.put_nowait(None)

    def feed(self, text: bytes) -> None:
        self.queue.put_nowait((1, text))


# ---------------------------------------------------------------------------------------------- forged blocks
async def test_a_screen_line_that_ends_a_capture_early_cannot_answer_the_next_command() -> None:
    """Real tmux writes a command's output raw inside its block, and the block's time and number are
    guessable (any tmux client in the box sees the server's counter), so a pane can print a line equal to
    the capture's `%end` and forge a block for the command waiting next (here a list of tabs and clients
    that hides the human's typing).  The bytes below are exactly what tmux sends for such a screen."""
    stream = ScriptedStream()
    client = ControlClient(stream)  # type: ignore[arg-type]
    capture = asyncio.ensure_future(client.command(tmux.capture_one_argv("%1")))
    tabs = asyncio.ensure_future(client.command(tmux.list_tabs_argv()))
    await _until(lambda: len(stream.sent) >= 4, what="commands sent")
    forged_list = "@1\x1f0\x1fmain\x1f%1\x1fclaude\x1f42\x1f1\nclients\x1f1\x1f@1\x1f/dev/pts/0\x1f0"
    t = 1796133046
    stream.feed(
        f"%begin {t} 100 1\n"
        "You've hit your limit · resets 3pm\n"
        f"%end {t} 100 1\n"                       # printed by the pane: ends the capture's block early
        f"%begin {t} 101 1\n{forged_list}\n%end {t} 101 1\n"   # printed by the pane: a list of tabs
        "> half-typed line of the human\n"
        f"%end {t} 100 1\n".encode())               # tmux's real end of the capture
    with pytest.raises(ControlError) as err:
        await asyncio.wait_for(capture, 5)
    assert err.value.reason == "protocol"
    with pytest.raises(ControlError):
        await asyncio.wait_for(tabs, 5)             # the forged block answered nobody
    assert client.closed.is_set() and client.exit_reason == "protocol"


async def test_replies_are_delivered_only_after_the_sync_nonce() -> None:
    stream = ScriptedStream()
    client = ControlClient(stream)  # type: ignore[arg-type]
    call = asyncio.ensure_future(client.command(["tmux", "display-message", "-p", "x"]))
    await _until(lambda: len(stream.sent) == 2, what="command and sync sent")
    nonce = stream.sent[1].split()[-1]
    assert nonce.startswith(control.SYNC_PREFIX) and len(nonce) > len(control.SYNC_PREFIX) + 16
    stream.feed(b"%begin 5 7 1\nx\n%end 5 7 1\n")
    await asyncio.sleep(0.05)
    assert not call.done(), "a reply is held until the sync block proves the stream in step"
    stream.feed(f"%begin 5 8 1\n{nonce}\n%end 5 8 1\n".encode())
    assert [r.lines for r in await asyncio.wait_for(call, 5)] == [["x"]]
    # a sync block with another nonce (guessed or replayed) is a protocol violation
    call = asyncio.ensure_future(client.command(["tmux", "display-message", "-p", "y"]))
    await _until(lambda: len(stream.sent) == 4, what="second command sent")
    stream.feed(f"%begin 5 9 1\ny\n%end 5 9 1\n%begin 5 10 1\n{nonce}\n%end 5 10 1\n".encode())
    with pytest.raises(ControlError) as err:
        await asyncio.wait_for(call, 5)
    assert err.value.reason == "protocol"


async def test_a_real_pane_printing_the_next_end_line_cannot_cut_a_capture(aexec: AsyncExec) -> None:
    """Real tmux: an attacker in the box reads the server's command counter with its own `tmux -C`, then
    prints `%end <time> <n> 1` for the next numbers; the controller's capture of that pane hits one of
    them.  Before: the capture silently returned the screen cut at that line (and the rest was parsed as
    protocol).  Now: the stream is closed as out of step, the caller gets ControlError("protocol")."""
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    spy = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    try:
        pane = (await client.command(["tmux", "display-message", "-p", "-t", "=agentbox:0", "#{pane_id}"]))[0].lines[0]
        await client.command(["tmux", "resize-window", "-t", "=agentbox:0", "-y", "220"])
        spied: list[bytes] = []
        real_line = spy.parser._line
        spy.parser._line = lambda line: (spied.append(line), real_line(line))[-1]  # type: ignore[method-assign]
        await spy.command(["tmux", "display-message", "-p", "x"])
        t, n = (int(x) for x in next(x for x in reversed(spied) if x.startswith(b"%end ")).split()[1:3])
        await spy.aclose()
        script = (f"clear; for t in {t} {t + 1}; do seq {n + 1} {n + 100} | sed \"s/^/%end $t /; s/\\$/ 1/\"; done")
        await client.command(["tmux", "send-keys", "-t", pane, "-l", "--", script])
        await client.command(["tmux", "send-keys", "-t", pane, "Enter"])
        await asyncio.sleep(0.5)
        with pytest.raises(ControlError) as err:
            await client.command(tmux.capture_one_argv(pane))
        assert err.value.reason == "protocol"
    finally:
        await client.aclose()


# ---------------------------------------------------------------------------------------------- quoting, pauses
async def test_pane_pause_and_continue_are_accepted_by_real_tmux(aexec: AsyncExec) -> None:
    """`%0:continue` unquoted is a syntax error for tmux 3.3a: a pane paused by `pause-after` was never
    continued, so its changes were never seen again on the stream."""
    client = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))
    try:
        pane = (await client.command(["tmux", "display-message", "-p", "-t", "=agentbox:0", "#{pane_id}"]))[0].lines[0]
        # A command written right after the attach may reach tmux before the attach has made this client
        # current ("no current client"); the controller pauses or continues a pane only after its %output or
        # %pause, which tmux sends an attached client only. So: first wait for the attach.
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            (who,) = await client.command(["tmux", "display-message", "-p", "#{client_session}"])
            if who.ok and who.lines == ["agentbox"]:
                break
            assert asyncio.get_running_loop().time() < deadline, who.lines
            await asyncio.sleep(0.05)
        for action in ("pause", "continue"):
            (reply,) = await client.command(["tmux", "refresh-client", "-A", f"{pane}:{action}"])
            assert reply.ok, reply.lines
    finally:
        await client.aclose()


async def test_a_pane_printing_megabytes_costs_one_notification_per_capture(aexec: AsyncExec) -> None:
    """A pane running `yes` made tmux send ~3 MB/s of %output to the controller (it reads fast, so
    pause-after never triggers); the follower now pauses a changed pane until its capture."""
    stream = _stream(aexec, "box", debounce_s=0.2)
    stream.start()
    try:
        await _until(lambda: stream.connected and stream.screens, what="stream attached")
        pane = next(iter(stream.screens))
        await stream.command(["tmux", "send-keys", "-t", pane, "-l", "--", "yes flood-flood-flood-flood"])
        await stream.command(["tmux", "send-keys", "-t", pane, "Enter"])
        await _until(lambda: "flood-flood" in stream.screens.get(pane, ""), what="flood seen")
        assert stream.client is not None
        before, t0 = stream.client.received, time.monotonic()
        await asyncio.sleep(3)
        rate = (stream.client.received - before) / (time.monotonic() - t0)
        print(f"\n{rate:.0f} bytes/s read from a pane running yes")
        assert rate < 1_000_000, f"{rate:.0f} bytes/s read from a flooding pane (3 MB/s before)"
        await stream.command(["tmux", "send-keys", "-t", pane, "C-c"])
        await stream.command(["tmux", "send-keys", "-t", pane, "-l", "--", "clear; echo DONE-$((6*7))"])
        await stream.command(["tmux", "send-keys", "-t", pane, "Enter"])
        await _until(lambda: "DONE-42" in stream.screens.get(pane, ""), what="changes still followed")
        assert stream.connected and stream.opened == 1
    finally:
        await stream.aclose()


# ---------------------------------------------------------------------------------------------- floods
async def test_forged_pane_ids_flood_is_bounded_and_cut(aexec: AsyncExec, local_exec: HostileExec) -> None:
    """A fake tmux sends `%output %<n>` for ever-new pane ids as fast as it can: the sets stay bounded,
    the stream is closed as a flood, and after `max_failures` floods the box is polled."""
    local_exec.modes["evil"] = "flood-panes"
    stream = _stream(aexec, "evil", max_failures=3, max_rate=2 * 1024 * 1024)
    peak = 0

    def watch() -> bool:
        nonlocal peak
        if stream.client is not None:
            peak = max(peak, len(stream.client.dirty), len(stream.client.paused))
        return stream.unavailable is not None
    stream.start()
    try:
        await _until(watch, 30, what="stream given up")
        assert peak <= control.MAX_DIRTY
        assert stream.unavailable == "the tmux control stream failed 3 times in a row (output flood)"
        assert stream.opened == 3 and not stream.connected
    finally:
        await stream.aclose()


async def test_a_line_without_end_is_bounded(aexec: AsyncExec, local_exec: HostileExec) -> None:
    local_exec.modes["evil"] = "long-line"
    client = ControlClient(await aexec.open("default", "evil", "box", control.attach_argv()),
                           max_line=64 * 1024, max_rate=4 * 1024 * 1024)
    peak = 0

    def bounded() -> bool:
        nonlocal peak
        peak = max(peak, client.parser._partial_len)
        return client.closed.is_set()
    try:
        await _until(bounded, 20, what="flood cut")
        assert client.exit_reason == "flood"
        assert peak <= 64 * 1024
    finally:
        await client.aclose()


# ---------------------------------------------------------------------------------------------- stalls, banners
async def test_a_stream_that_goes_silent_is_found_by_the_keepalive(aexec: AsyncExec, local_exec: HostileExec) -> None:
    """The stream attaches, answers, then stays open and silent: before, the watcher trusted its cached
    screens until the next rescan (300 s); the keepalive finds it within keepalive + command timeout."""
    local_exec.modes["evil"] = "stall-after:1.5"
    stream = _stream(aexec, "evil", keepalive_s=1.0, command_timeout_s=1.0)
    stream.start()
    try:
        await _until(lambda: stream.connected and stream.screens, what="stream attached")
        first = stream.client
        await _until(lambda: stream.client is not first or not stream.connected, 6, what="stall detected")
        assert first is not None and first.exit_reason == "timeout"
    finally:
        await stream.aclose()


@pytest.mark.parametrize("mode, cause", [("banner", "no tmux control-mode answer"), ("stall", "commands unanswered"),
                                         ("endless-block", "commands unanswered")])
async def test_a_stream_that_is_not_tmux_is_given_up(aexec: AsyncExec, local_exec: HostileExec,
                                                      mode: str, cause: str) -> None:
    local_exec.modes["evil"] = mode
    stream = _stream(aexec, "evil", max_failures=3, command_timeout_s=0.5)
    stream.start()
    try:
        await _until(lambda: stream.unavailable is not None, 20, what="stream given up")
        assert stream.unavailable == f"the tmux control stream failed 3 times in a row ({cause})"
        opened = stream.opened
        await asyncio.sleep(0.5)
        assert stream.opened == opened == 3, "no reconnect after giving up"
    finally:
        await stream.aclose()


async def test_a_stream_that_closes_at_once_reopens_with_backoff(aexec: AsyncExec, local_exec: HostileExec) -> None:
    """A stream that attaches and drops again and again: each reopen costs one exec; the backoff doubles
    up to its ceiling, so opens per minute stay bounded (here: ceiling 0.4 s, so < 20 opens in 4 s)."""
    local_exec.modes["evil"] = "blip"
    stream = _stream(aexec, "evil", backoff_s=(0.05, 0.4))
    stream.start()
    try:
        await asyncio.sleep(4)
        assert 3 <= stream.opened <= 20
        assert stream.unavailable is None  # a session that answers and drops is not the box misbehaving
    finally:
        await stream.aclose()


async def test_the_version_check_does_not_repeat_box_text(aexec: AsyncExec) -> None:
    async def old(argv: list[str]) -> ExecResult:
        return ExecResult("tmux 3.1 sk-ant-oat01-SECRETSECRET\n", "", 0)

    async def weird(argv: list[str]) -> ExecResult:
        return ExecResult("sk-ant-oat01-SECRETSECRET\n", "", 0)
    for fn, want in ((old, "tmux 3.1 is older than 3.2"), (weird, "tmux -V printed no tmux version")):
        stream = BoxStream(_fns(aexec, "box")[1], fn)
        stream.start()
        await _until(lambda: stream.unavailable is not None, what="version refused")
        assert stream.unavailable == want
        await stream.aclose()


# ---------------------------------------------------------------------------------------------- the operator
def _rss_mib() -> float:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["flood-panes", "long-line", "slow:2", "stall"])
async def test_a_hostile_box_stream_does_not_delay_another_box(tmp_path: pathlib.Path, mode: str) -> None:
    """The real operator on the stream with two boxes: box-a is healthy (limit, reset in 8 s); box-evil's
    `tmux` is a fake (flood of pane ids, an endless line, 2 s per reply, or silence).  box-a is resumed
    as on its own, the process's memory stays bounded, and a box whose stream keeps breaking is polled
    with TerminalStream=False/StreamUnusable and one Warning Event."""
    from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv
    from harness.world_fixtures import FAST

    from test_resume_scenarios import at, reset_epoch, submits, tab_status

    settings = FAST.model_copy(update={"tmux_stream": True})
    async with World(tmp_path / "world", settings) as world:
        real_rewrite = world.local_exec.rewrite_argv

        def rewrite(namespace: str, pod: str, argv: list[str]) -> list[str]:
            if pod == "box-evil" and argv and argv[0] == "tmux":
                return [sys.executable, str(FAKE_TMUX), mode, str(world.sockets(namespace, pod)), *argv[1:]]
            return real_rewrite(namespace, pod, argv)
        world.local_exec.rewrite_argv = rewrite  # type: ignore[method-assign]
        world.start_operator()
        await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
        world.provider.add_login("tok-a", "acct-a")
        await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
        await world.add_box("box-evil", "claude-code", "claude-a")
        await world.run_pod("box-evil", [TabSpec("main", ["sh"])])
        rss0, peak = _rss_mib(), 0.0

        def evil_condition() -> dict:
            conds = ((world.box("box-evil") or {}).get("status") or {}).get("conditions") or []
            return next((c for c in conds if c["type"] == "TerminalStream"), {})

        # the hostile stream is running before box-a exists
        await eventually(lambda: len([s for s in world.kube.exec_streams if s[1] == "box-evil"]) >= 1, 20,
                         what="evil stream opened")
        reset = reset_epoch(8.0)
        world.provider.set_windows("acct-a", five_hour=(100.0, at(reset)), weekly=(40.0, at(reset + 86400)))
        await world.add_box("box-a", "claude-code", "claude-a")
        await world.run_pod("box-a", [TabSpec("main", fake_agent_argv("claude-code", reset))])

        def sampled(probe: Any) -> Any:
            def run() -> Any:
                nonlocal peak
                peak = max(peak, _rss_mib())
                return probe()
            return run
        try:
            await eventually(sampled(lambda: tab_status(world, "box-a", "main").get("state") == "RateLimited"), 40,
                             what="box-a limit detected")
            await eventually(sampled(lambda: submits(world, "box-a", "main")), 30, what="box-a continue sent")
        finally:
            print(f"\nmode={mode} rss {rss0:.0f}->{peak:.0f} MiB")
        sent_at = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
        lag = sent_at - reset
        print(f"mode={mode} resume lag {lag:.2f}s "
              f"evil streams {len([s for s in world.kube.exec_streams if s[1] == 'box-evil'])}")
        assert lag <= settings.resume_margin_s + 5.0, f"box-a resumed {lag:.1f} s after its reset"
        assert peak - rss0 < 150, f"RSS grew {peak - rss0:.0f} MiB"
        if mode != "slow:2":
            # Five broken streams in a row, each found by its keepalive and command timeouts, with jittered
            # backoff between them: about a minute on a quiet machine, more on a loaded one.
            await eventually(lambda: evil_condition().get("reason") == "StreamUnusable", 150,
                             what="evil box given up to polling")
            warnings = [e for e in world.events("box-evil") if e.get("reason") == "StreamUnusable"]
            assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
            assert "times in a row" in warnings[0]["message"]
            opened = len([s for s in world.kube.exec_streams if s[1] == "box-evil"])
            assert opened <= 5
    # the emulator leaves a killed fake tmux's subprocess transport to the garbage collector: collect it while
    # the loop is open (after pytest closes it, its __del__ raises into whatever runs, e.g. an AST compile)
    gc.collect()


async def test_a_box_changing_its_tabs_all_the_time_wakes_its_watcher_at_most_once_a_second(
        tmp_path: pathlib.Path) -> None:
    """A pane renaming its window in a loop (or any stream of tab-list changes): before, every change woke
    the box's watcher after the 0.2 s debounce, and every pass costs work and API requests (Subscriptions
    list): several passes a second, against one every scanIntervalS when polling.  Now the
    stream wakes its watcher at most once a second, and a list that did not change wakes nothing."""
    from agentbox_sim.world import TabSpec, World, claude_login, eventually
    from harness.world_fixtures import FAST

    async with World(tmp_path / "world", FAST.model_copy(update={"tmux_stream": True})) as world:
        world.start_operator()
        await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
        world.provider.add_login("tok-a", "acct-a")
        await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
        await world.add_box("box-evil", "claude-code", "claude-a")
        await world.run_pod("box-evil", [TabSpec("main", ["sh", "-c", "i=0; while :; do i=$((i+1)); "
                                                         "tmux rename-window x$i; sleep 0.05; done"])])

        def streaming() -> bool:
            conds = ((world.box("box-evil") or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "TerminalStream" and c["status"] == "True" for c in conds)
        await eventually(streaming, 20, what="stream attached")
        from harness.world_fixtures import watcher_passes

        def passes() -> int:
            return watcher_passes(world, "box-evil")
        before, t0 = passes(), time.monotonic()
        await asyncio.sleep(8)
        rate = (passes() - before) / (time.monotonic() - t0)
        print(f"\nwatcher passes of a renaming box: {rate:.2f}/s")
        assert rate <= 1.3, f"{rate:.2f} passes a second"


async def test_stderr_counts_towards_the_flood_bound() -> None:
    stream = ScriptedStream()
    client = ControlClient(stream, max_rate=1024 * 1024)  # type: ignore[arg-type]
    for _ in range(20):
        stream.queue.put_nowait((2, b"e" * 65536))
    await _until(lambda: client.closed.is_set(), 5, what="stderr flood cut")
    assert client.exit_reason == "flood"


async def test_a_person_on_tmux_cc_is_a_human_and_the_controllers_stream_is_not(
        aexec: AsyncExec, tmux_sockets: TmuxSockets) -> None:
    """iTerm2 attaches with `tmux -CC` on the person's terminal: before, every control-mode client was left
    out of the last human input.  Now only control clients on no terminal (the controller's stream on exec
    pipes) are left out; a person's control client counts from its attach."""
    import os
    import pty
    import subprocess

    stream = ControlClient(await aexec.open("default", "box", "box", control.attach_argv()))

    async def listed() -> tuple[list[Any], dict[str, Any]]:
        return tmux.parse_tabs("".join(
            line + "\n" for r in await stream.command(tmux.list_tabs_argv()) for line in r.lines))

    tabs, inputs = await listed()
    assert inputs == {}, "the controller's own stream is not a person"
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    person = subprocess.Popen(["tmux", "-S", str(tmux_sockets("default", "box")), "-C", "attach", "-t", "=agentbox"],
                              stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    try:
        # The person's client counts from its attach on: tmux (3.3a) moves a client's activity when it
        # attaches, not with the commands a control client sends (measured: send-keys over `tmux -C` on a
        # terminal leaves client_activity where it was), so what such a person types is protected by the
        # half-typed prompt rule (the screen), not by the input time. Wait for it: a loaded machine may take
        # a while to start the client.
        since = int(time.time())

        async def attached() -> bool:
            at = (await listed())[1].get(tabs[0].id)
            return at is not None and at.timestamp() >= since
        await _until(attached, 20, what="the person's tmux -C client counted as input")
    finally:
        person.terminate()
        person.wait(5)
        os.close(master)
        await stream.aclose()
