"""Resumable actuation: the operator is killed at each named step of a multi-step action and restarted;
every tab gets exactly one `continue` (never zero, never two), judged by the screen after the restart.

The kill is injected where it would happen: the emulator's pods/exec sees the call of the named step and
cancels every task of the operator's event loop (as SIGKILL would: nothing after that await runs), then
either drops the call (the step never reached the box) or runs it first (the step happened, the reply is
lost). A new operator is then started on the same world; it finds the journal in status.tabs[].

Every scenario runs in both terminal modes: `poll` (one exec per tmux command) and `stream` (setting
`tmux_stream`: the keys travel as command lines of one live `tmux -C` exec stream per box). On the stream the
same kill point is defined on the command line of the step (`KubeEmulator.stream_faults`): "before" drops the
line (it never reached tmux), "after" lets tmux run it and kills the operator when tmux's `%end` for it comes,
before that reply reaches the operator (e.g. the `send-keys ... -l continue` line got its `%end`, the
operator wrote the Enter step ahead, and died before the Enter line).
"""

from __future__ import annotations

import asyncio
import math
import shlex
import time
from datetime import datetime

import pytest

from agentbox_sim.kube import ExecFault
from agentbox_sim.world import TabSpec, World, claude_login, codex_login, eventually, fake_agent_argv, utc_in
from tests.test_resume_scenarios import at, reset_epoch, submits, tab_status

pytestmark = pytest.mark.component


def typed(text: str):
    """Matches the tmux call typing `text` literally."""
    return lambda argv: "send-keys" in argv and "-l" in argv and text in argv


def enter(argv: list[str]) -> bool:
    """Matches a tmux call that only presses Enter (the continue's second call)."""
    return "send-keys" in argv and "Enter" in argv and "-l" not in argv


def ctrl_c(argv: list[str]) -> bool:
    return "send-keys" in argv and "C-c" in argv


def menu_digit(argv: list[str]) -> bool:
    return "send-keys" in argv and any(a.isdigit() and len(a) == 1 for a in argv) and "-l" not in argv


MODES = ["poll", "stream"]


def use_mode(world: World, mode: str) -> None:
    """Run the operator in terminal mode `mode` (poll: one exec per tmux command; stream: tmux_stream)."""
    world.settings = world.settings.model_copy(update={"tmux_stream": mode == "stream"})


def inject(world: World, mode: str, fault: ExecFault) -> ExecFault:
    """Install a kill point on the path the keys take in `mode`: the exec calls or the stream's lines."""
    (world.kube.stream_faults if mode == "stream" else world.kube.exec_faults).append(fault)
    return fault


async def streaming(world: World, mode: str, box: str = "box-a") -> None:
    """In stream mode, wait until the box's live tmux stream is attached (the keys then travel on it)."""
    if mode != "stream":
        return

    def attached() -> bool:
        conds = ((world.box(box) or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "TerminalStream" and c["status"] == "True" for c in conds)
    await eventually(attached, 15, what="the live tmux stream attached")


def start_agent(world: World, pod: str, argv: list[str], tab: str = "main") -> None:
    """Type `argv` at the shell of a tab started bare (`TabSpec(tab, [])`), as a human starting the agent."""
    world.tmux(pod, "send-keys", "-t", f"=agentbox:{tab}", "-l", shlex.join(argv))
    world.tmux(pod, "send-keys", "-t", f"=agentbox:{tab}", "Enter")


async def claude_box(world: World, reset_in: float, *agent_args: str, terminal: str | None = None) -> float:
    """Box `box-a` on `claude-a`, its tab running the scripted Claude Code limited until `reset_in` s from now.

    `terminal` given: the tab starts as a bare shell and the agent once the box is watched in that mode (stream:
    its live stream attached), so that what its first screen asks for (a menu's answer) travels on that path
    and meets a kill point installed there. The watcher's first pass starts the stream and meanwhile reads the
    tabs over the exec: an agent that shows its limit at that pass would be answered over the exec."""
    reset = reset_epoch(reset_in)
    world.provider.add_login("tok-a", "acct-a")
    world.provider.set_windows("acct-a", five_hour=(100.0, at(reset)), weekly=(40.0, utc_in(86400)))
    await world.add_secret("claude-login", "credentials.json", claude_login("tok-a"))
    await world.add_subscription("claude-a", "anthropic", "claude-login", "credentials.json")
    await world.add_box("box-a", "claude-code", "claude-a")
    argv = fake_agent_argv("claude-code", reset, *agent_args)
    if terminal is None:
        await world.run_pod("box-a", [TabSpec("main", argv)])
        return reset
    await world.run_pod("box-a", [TabSpec("main", [])])
    await streaming(world, terminal)
    start_agent(world, "box-a", argv)
    return reset


async def codex_box(world: World, reset_in: float) -> float:
    reset = reset_epoch(reset_in)
    world.provider.add_login("tok-x", "acct-x")
    world.provider.set_windows("acct-x", five_hour=(100.0, at(reset)), weekly=(10.0, utc_in(86400)))
    await world.add_secret("codex-login", "auth.json", codex_login("tok-x", "acct-x"))
    await world.add_subscription("codex-a", "openai", "codex-login", "auth.json")
    await world.add_box("box-a", "codex", "codex-a")
    await world.run_pod("box-a", [TabSpec("main", ["codex"])], shims={"codex": fake_agent_argv("codex", reset)})
    return reset


async def kill_and_restart(world: World, fault: ExecFault, within: float) -> float:
    """Wait for the fault to fire (the operator is being killed), join the dead operator, start a new one.
    Returns the instant the new operator was ready."""
    await eventually(lambda: fault.hits, within, what="the kill point")
    await world.kill_operator()
    journal = tab_status(world, "box-a", "main").get("journal")
    assert journal, "the killed operator left its journal in status"
    world.start_operator()
    return time.time()


CLAUDE_POINTS = {
    # name: (match, when, mode, skip)
    "after-write-ahead-before-type": (typed("continue"), "before", "drop", 0),
    "after-type-before-enter": (enter, "before", "drop", 0),
    "right-after-enter": (enter, "after", "pass", 0),
}


@pytest.mark.parametrize("terminal", MODES)
@pytest.mark.parametrize("point", sorted(CLAUDE_POINTS))
async def test_claude_continue_killed_at_each_step_is_sent_exactly_once(world: World, point: str, terminal: str):
    match, when, mode, skip = CLAUDE_POINTS[point]
    use_mode(world, terminal)
    fault = inject(world, terminal, ExecFault(mode=mode, pod="box-a", match=match, when=when, skip=skip,
                                              on_match=world.kill_operator_now))
    world.start_operator()
    await claude_box(world, 6.0)
    await streaming(world, terminal)
    await kill_and_restart(world, fault, 40)
    await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue after the restart")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"], "exactly one continue"
    reasons = [e["reason"] for e in world.events("box-a")]
    assert "PromptNotEmpty" not in reasons, "our own continue is never taken for a human's draft"
    assert "Resumed" in reasons
    assert "journal" not in tab_status(world, "box-a", "main"), "the journal is closed"


CODEX_POINTS = {
    "between-the-two-ctrl-c": (ctrl_c, "before", "drop", 1),
    "after-ctrl-c-before-relaunch": (typed("codex resume --last"), "before", "drop", 0),
    "after-relaunch-before-continue": (typed("continue"), "before", "drop", 0),
    "after-continue-typed-before-enter": (enter, "before", "drop", 0),
    "right-after-enter": (enter, "after", "pass", 0),
}


@pytest.mark.parametrize("terminal", MODES)
@pytest.mark.parametrize("point", sorted(CODEX_POINTS))
async def test_codex_restart_killed_at_each_step_is_completed_exactly_once(world: World, point: str, terminal: str):
    match, when, mode, skip = CODEX_POINTS[point]
    use_mode(world, terminal)
    fault = inject(world, terminal, ExecFault(mode=mode, pod="box-a", match=match, when=when, skip=skip,
                                              on_match=world.kill_operator_now))
    sent: list[list[str]] = []  # every Ctrl-C either controller sent, on either path (the spy takes no call)
    spy = ExecFault(mode="pass", match=lambda argv: bool(ctrl_c(argv) and sent.append(argv)), times=None)
    world.kube.exec_faults.insert(0, spy)
    world.kube.stream_faults.insert(0, spy)
    world.start_operator()
    await codex_box(world, 6.0)
    await streaming(world, terminal)
    await kill_and_restart(world, fault, 40)
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="continue after the restart")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"], "exactly one continue"
    starts = [e["argv"] for e in world.agent_log("box-a", "main") if e["event"] == "start"]
    assert starts == [[], ["resume", "--last"]], "relaunched exactly once with `codex resume --last`"
    assert "PromptNotEmpty" not in [e["reason"] for e in world.events("box-a")]
    # Exactly the two Ctrl-C that stop Codex reached the box (a dropped one never did). Killed between them, the
    # restarted controller presses one: a second would reach the shell Codex exited to, where its SIGINT can
    # make bash discard the relaunch typed right behind it (the agent left dead; seen over 8 test workers).
    reached = len(sent) - (1 if match is ctrl_c and mode == "drop" else 0)
    assert reached == 2, f"{reached} Ctrl-C reached the box: {sent}"


@pytest.mark.parametrize("terminal", MODES)
@pytest.mark.parametrize("when", ["before", "after"])
async def test_menu_answer_killed_is_answered_once_then_resumed_once(world: World, when: str, terminal: str):
    use_mode(world, terminal)
    fault = inject(world, terminal, ExecFault(mode="drop" if when == "before" else "pass", pod="box-a",
                                              match=menu_digit, when=when, on_match=world.kill_operator_now))
    world.start_operator()
    # The menu opens as the agent starts, once the stream is attached (not at a fixed instant the stream may miss).
    await claude_box(world, 10.0, "--menu", "--menu-upgrade-first", terminal=terminal)
    await kill_and_restart(world, fault, 30)
    await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue after the restart")
    await asyncio.sleep(world.settings.settle_s + 2)
    menu = [e for e in world.agent_log("box-a", "main") if e["event"] == "menu"]
    assert [m["choice"] for m in menu] == ["stop"], "the menu was answered once, with 'Stop and wait'"
    assert submits(world, "box-a", "main") == ["continue"]


@pytest.mark.parametrize("terminal", MODES)
async def test_a_human_draft_after_a_kill_is_left_intact(world: World, terminal: str):
    """Killed before our `continue` was typed; meanwhile a human typed a line: the restarted controller
    sends nothing and asks a human (the draft is theirs, not ours)."""
    use_mode(world, terminal)
    fault = inject(world, terminal, ExecFault(mode="drop", pod="box-a", match=typed("continue"),
                                              on_match=world.kill_operator_now))
    world.start_operator()
    await claude_box(world, 5.0)
    await streaming(world, terminal)
    await eventually(lambda: fault.hits, 40, what="the kill point")
    await world.kill_operator()
    world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "-l", "fix the parser and")
    world.start_operator()
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "NeedsAttention", 20)
    await asyncio.sleep(2)
    assert "fix the parser and" in world.screen("box-a", "main")
    assert submits(world, "box-a", "main") == []
    assert "journal" not in tab_status(world, "box-a", "main")


async def test_restarted_after_the_deadline_acts_in_its_first_pass(world: World):
    """The controller is down across the reset; the restarted one finds the due deadline in status and
    sends the continue in its very first pass (no scan interval first). Polling: the passes are counted by
    their exec calls (the live stream makes none)."""
    use_mode(world, "poll")
    world.start_operator()
    reset = await claude_box(world, 6.0)
    await eventually(lambda: tab_status(world, "box-a", "main").get("resumeAt"), 20, what="resumeAt in status")
    await world.stop_operator()
    await eventually(lambda: time.time() > reset + world.settings.resume_margin_s + 2, 30, what="the deadline passed")
    assert submits(world, "box-a", "main") == []
    first = len(world.kube.exec_journal)
    world.start_operator()
    await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue after the restart")
    calls = [r.argv for r in world.kube.exec_journal[first:]]
    typed_at = next(i for i, argv in enumerate(calls) if typed("continue")(list(argv)))
    scans = [argv for argv in calls[:typed_at] if "list-windows" in argv]
    assert len(scans) == 1, f"the continue was typed in the first pass, not after {len(scans)} scans"
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"]


@pytest.mark.parametrize("terminal", MODES)
@pytest.mark.parametrize("point", ["before-first-ctrl-c", "after-first-ctrl-c", "after-second-ctrl-c"])
async def test_codex_switch_killed_midway_is_completed_once(world: World, point: str, terminal: str):
    """Rotation moves a limited Codex box to another subscription (Ctrl-C twice, new auth.json, relaunch,
    continue). Killed mid-switch, the restarted controller finds status.switch and completes it: the new
    login in place, the agent relaunched once, one continue on the new account."""
    from tests.test_rotation_scenarios import codex_subscription, sub_state

    skip, when, mode = {"before-first-ctrl-c": (0, "before", "drop"), "after-first-ctrl-c": (0, "after", "pass"),
                        "after-second-ctrl-c": (1, "after", "pass")}[point]
    use_mode(world, terminal)
    fault = inject(world, terminal, ExecFault(mode=mode, pod="box", match=ctrl_c, when=when, skip=skip,
                                              on_match=world.kill_operator_now))
    sent: list[list[str]] = []  # every Ctrl-C either controller sent, on either path (the spy takes no call)
    spy = ExecFault(mode="pass", match=lambda argv: bool(ctrl_c(argv) and sent.append(argv)), times=None)
    world.kube.exec_faults.insert(0, spy)
    world.kube.stream_faults.insert(0, spy)
    world.start_operator()
    # Both subscriptions look available: the switch is triggered by the limit line itself, once the tab shows it.
    for name, five in (("a", 10.0), ("b", 10.0)):
        await codex_subscription(world, name, five)
    await sub_state(world, "a", "Available")
    await sub_state(world, "b", "Available")
    await world.add_box("box", "codex", "a", whenAgentStops={"rotation": {"enabled": True}})
    await world.run_pod("box", [TabSpec("main", [])], shims={"codex": fake_agent_argv(
        "codex", time.time() + 3600, "--limited-token", "tok-a")})
    # The kill point sits on the path the keys take in `terminal`. The watcher's first pass starts the stream and
    # meanwhile reads the tabs over the exec: an agent limited at that pass would be stopped over the exec (the
    # stream's kill point never reached). So the agent starts (and prints its limit) once the stream is attached.
    await streaming(world, terminal, box="box")
    start_agent(world, "box", ["codex"])
    try:
        await eventually(lambda: fault.hits, 40, what="the kill point")
    except TimeoutError:
        print("EVENTS", [(e["reason"], e["message"]) for e in world.events("box")])
        print("EXEC", [r.argv for r in world.kube.exec_journal][-15:])
        raise
    await world.kill_operator()
    assert ((world.box("box") or {}).get("status") or {}).get("switch", {}).get("to") == "b"
    world.start_operator()
    await eventually(lambda: submits(world, "box", "main"), 40, what="continue on the new account")
    await moved_once_to_b(world)
    # Exactly the two that stop Codex reached the box (a dropped one never did): none into the shell it exited to,
    # where their SIGINT can make bash discard the relaunch typed right behind them.
    reached = len(sent) - (1 if mode == "drop" else 0)
    assert reached == 2, f"{reached} Ctrl-C reached the box: {sent}"


@pytest.mark.parametrize("point", ["typed-continue", "enter"])
async def test_stream_cut_after_a_key_reached_tmux_sends_it_once(world: World, point: str):
    """The live tmux stream is cut (the controller lives on) after tmux ran a key command and before its
    `%end` came back: the controller does not know whether the keys arrived, so it must not send them again
    over the one-shot exec; the journal is completed from the screen instead (exactly one `continue`)."""
    use_mode(world, "stream")
    match = typed("continue") if point == "typed-continue" else enter
    fault = inject(world, "stream", ExecFault(mode="cut", pod="box-a", match=match, when="after"))
    world.start_operator()
    await claude_box(world, 6.0)
    await streaming(world, "stream")
    await eventually(lambda: fault.hits, 30, what="the cut")
    await eventually(lambda: submits(world, "box-a", "main"), 30, what="continue after the cut")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"], "exactly one continue"
    assert "journal" not in tab_status(world, "box-a", "main")


async def moved_once_to_b(world: World) -> None:
    """After the settle time: the Codex box `box` was moved to Subscription b once: one `continue`, on b's
    token; the agent relaunched once (`codex resume --last`); status on b with no switch left."""
    await asyncio.sleep(world.settings.settle_s + 2)
    log = world.agent_log("box", "main")
    subs = [e for e in log if e["event"] == "submit"]
    assert [e["text"] for e in subs] == ["continue"] and subs[0]["token"] == "tok-b"
    assert [e.get("argv") for e in log if e["event"] == "start"] == [[], ["resume", "--last"]]
    status = (world.box("box") or {}).get("status") or {}
    assert status.get("subscription") == "b" and "switch" not in status


def armed_journal(world: World) -> dict | None:
    """The tab's journal while its continue is armed (written ahead with its instant, `notBefore`)."""
    journal = tab_status(world, "box-a", "main").get("journal") or {}
    return journal if journal.get("notBefore") else None


async def armed_box(world: World, make_box=None, terminal: str | None = None) -> tuple[float, dict, float]:
    """The shipped timing (margin 10 s, prepare 8 s), the operator started, box `box-a` (`make_box`, default
    `claude_box`) limited until a reset about 8 s away, and its continue armed. The screen prints the reset to the
    minute; a reset 3 s or more into its minute is learnt exactly from the usage API at the first read
    (ResetNotYet), so the armed instant is exactly the reset + the margin. Returns (reset, the armed journal,
    its `notBefore` as a Unix time)."""
    world.settings = world.settings.model_copy(update={"resume_margin_s": 10.0, "resume_prepare_s": 8.0})
    world.start_operator()
    lead = 8.0
    if math.ceil(time.time() + lead) % 60 < 3:
        lead += 3
    reset = await (make_box or claude_box)(world, lead)
    if terminal is not None:
        await streaming(world, terminal)
    journal = await eventually(lambda: armed_journal(world), 40, what="the continue armed")
    return reset, journal, datetime.fromisoformat(journal["notBefore"].replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("terminal", MODES)
@pytest.mark.parametrize("how", ["kill", "stop"])
async def test_controller_stopped_while_a_continue_is_armed_sends_it_once_not_before_its_instant(
        world: World, how: str, terminal: str):
    """The shipped timing (margin 10 s, prepare 8 s): the usage is re-read 2 s after the reset and the continue
    armed for reset + 10 s (its journal in status with `notBefore`, nothing typed yet). The controller is killed
    (as SIGKILL) or stopped (kopf's graceful stop cancels the waiting pass) while armed and started again: the
    tab gets exactly one `continue`, never before the armed instant, completed from the journal."""
    use_mode(world, terminal)
    reset, journal, not_before = await armed_box(world, terminal=terminal)
    assert not_before == reset + 10, "armed for the reset + margin"
    assert time.time() < not_before - 3, "armed well before its instant"
    assert journal["step"] == "Type" and submits(world, "box-a", "main") == []
    assert "continue" not in world.screen("box-a", "main"), "nothing typed while armed"
    if how == "kill":
        await world.kill_operator()
    else:
        await world.stop_operator()
    assert submits(world, "box-a", "main") == []
    restarted = time.time()
    world.start_operator()
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="continue after the restart")
    submit_at = next(e["t"] for e in world.agent_log("box-a", "main") if e["event"] == "submit")
    assert submit_at >= not_before, f"Enter {not_before - submit_at:.2f} s before the armed instant"
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    await asyncio.sleep(world.settings.settle_s + 2)
    assert submits(world, "box-a", "main") == ["continue"], "exactly one continue"
    assert "journal" not in tab_status(world, "box-a", "main"), "the journal is closed"
    reasons = [e["reason"] for e in world.events("box-a")]
    assert "PromptNotEmpty" not in reasons
    if how == "kill":
        # Restarted well before the instant (measured: ~7.7 s): the new controller completed the armed journal
        # itself, waiting for its instant (measured: Enter 3-13 ms after it; loosely bounded for a loaded machine).
        assert restarted < not_before - 2
        assert submit_at < not_before + 3, "completed at its instant, not late"
        assert any(e["reason"] == "Resumed" and "after a controller restart" in e["message"]
                   for e in world.events("box-a"))


@pytest.mark.parametrize("terminal", MODES)
async def test_a_human_typing_while_the_continue_is_armed_gets_nothing_typed_over(world: World, terminal: str):
    """Armed for reset + 10 s; a human types a line into the tab before that instant: the screen is not the one
    the send was decided on, so nothing is typed; the tab is planned again from its new screen (a half-typed
    line: left to its author, NeedsAttention), and no `continue` ever comes."""
    use_mode(world, terminal)
    world.settings = world.settings.model_copy(update={"resume_margin_s": 10.0, "resume_prepare_s": 8.0})
    world.start_operator()
    await claude_box(world, 8.0)
    await streaming(world, terminal)
    journal = await eventually(lambda: armed_journal(world), 40, what="the continue armed")
    not_before = datetime.fromisoformat(journal["notBefore"].replace("Z", "+00:00")).timestamp()
    assert time.time() < not_before - 3
    world.tmux("box-a", "send-keys", "-t", "=agentbox:main", "-l", "fix the parser and")
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "NeedsAttention", 30,
                     what="the draft left to its author")
    await eventually(lambda: time.time() > not_before + 2, 20, what="the armed instant passed")
    assert submits(world, "box-a", "main") == [], "nothing was sent"
    screen = world.screen("box-a", "main")
    assert "fix the parser and" in screen and "continue" not in screen
    assert "journal" not in tab_status(world, "box-a", "main")
    assert "PromptNotEmpty" in [e["reason"] for e in world.events("box-a")]


@pytest.mark.parametrize("terminal", MODES)
async def test_codex_restart_armed_runs_during_the_margin_and_enters_at_the_instant(world: World, terminal: str):
    """Codex armed (margin 10 s, prepare 8 s): the restart (Ctrl-C twice, `codex resume --last`, await the agent)
    runs during the margin once the usage read confirmed the reset; only the Enter waits for `notBefore`."""
    use_mode(world, terminal)
    reset, journal, not_before = await armed_box(world, codex_box, terminal)
    assert not_before == reset + 10 and journal["action"] == "RestartAndContinue"
    await eventually(lambda: submits(world, "box-a", "main"), 40, what="continue")
    log = world.agent_log("box-a", "main")
    exit_at = next(e["t"] for e in log if e["event"] == "exit")
    submit_at = next(e["t"] for e in log if e["event"] == "submit")
    assert reset <= exit_at < not_before, "restarted after the reset, during the margin"
    assert not_before <= submit_at < not_before + 3, "Enter at the armed instant"
    await eventually(lambda: tab_status(world, "box-a", "main").get("state") == "Working", 15, what="Working")
    assert submits(world, "box-a", "main") == ["continue"]
    assert [e["argv"] for e in log if e["event"] == "start"] == [[], ["resume", "--last"]]


def login_write(argv: list[str]) -> bool:
    """Matches the exec writing the agent's live login file (`AgentAdapter.login_write_argv`)."""
    from controller.agents.adapter import _LOGIN_WRITE

    return argv[:3] == ["sh", "-c", _LOGIN_WRITE]


async def test_codex_switch_whose_login_write_failed_after_the_stop_still_resumes_the_stopped_tab(world: World):
    """spec.subscription moves a limited Codex box (rotation off): the switch stops the agent (Ctrl-C twice:
    Codex refuses another account's login in flight), then the new login's write into the box fails once (an
    exec error: a sick kubelet, a box that made its file unwritable for a moment). The pass fails with
    status.switch written; the same controller's next pass must still finish the switch for the tab it stopped
    (it now sits at the shell): relaunched on the new login, one continue. It must not take the tab at the shell
    for one that was never limited and leave the agent dead there."""
    fault = ExecFault(mode="refuse", pod="box", match=login_write, times=1)
    world.start_operator()
    for name in ("a", "b"):
        world.provider.add_login(f"tok-{name}", f"acct-{name}")
        world.provider.set_windows(f"acct-{name}", five_hour=(100.0 if name == "a" else 10.0, utc_in(3600)),
                                   weekly=(5.0, utc_in(86400)))
        await world.add_secret(f"login-{name}", "auth.json", codex_login(f"tok-{name}", f"acct-{name}"))
        await world.add_subscription(name, "openai", f"login-{name}", "auth.json")
    await world.add_box("box", "codex", "a", whenAgentStops={"resumeAfterReset": True})
    await world.run_pod("box", [TabSpec("main", ["codex"])], shims={"codex": fake_agent_argv(
        "codex", time.time() + 3600, "--limited-token", "tok-a")})
    await eventually(lambda: tab_status(world, "box", "main").get("state") == "RateLimited", 30,
                     what="limited on a")
    world.kube.exec_faults.append(fault)
    await world.patch(world.box_path("box"), {"spec": {"subscription": "b"}})
    await eventually(lambda: fault.hits, 20, what="the failed login write")
    try:
        await eventually(lambda: submits(world, "box", "main"), 40, what="continue on b after the failed write")
    except TimeoutError:
        print("STATUS", (world.box("box") or {}).get("status"))
        print("EVENTS", [(e["reason"], e["message"]) for e in world.events("box")])
        print("LOG", world.agent_log("box", "main"))
        raise
    await moved_once_to_b(world)
