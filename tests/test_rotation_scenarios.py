"""Rotation and the reserve end to end: the real operator, pod exec into tmux, scripted agents that
read their live login file, the provider usage emulator."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta

import pytest

from agentbox_sim.world import TabSpec, World, claude_login, codex_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component



async def event_message(world: World, box: str, reason: str) -> str:
    """The message of the box's first Event with `reason`, once it is stored (Events are posted after the
    status write that a test may have seen first)."""
    return await eventually(lambda: next((e["message"] for e in world.events(box) if e["reason"] == reason), None),
                            10, what=f"a {reason} Event")

def submits(world: World, box: str, tab: str = "main") -> list[dict]:
    return [e for e in world.agent_log(box, tab) if e["event"] == "submit"]


def status(world: World, box: str) -> dict:
    return (world.box(box) or {}).get("status") or {}


def reasons(world: World, box: str) -> list[str]:
    return [e["reason"] for e in world.events(box)]


async def subscription(world: World, name: str, five: float, reset_in: float, weekly: float = 10.0, **spec) -> None:
    token = f"tok-{name}"
    world.provider.add_login(token, f"acct-{name}")
    world.provider.set_windows(f"acct-{name}", five_hour=(five, utc_in(reset_in)), weekly=(weekly, utc_in(86400 * 3)))
    await world.add_secret(f"login-{name}", "credentials.json", claude_login(token))
    await world.add_subscription(name, "anthropic", f"login-{name}", "credentials.json", **spec)


async def codex_subscription(world: World, name: str, five: float, reset_in: float = 3600) -> None:
    """An OpenAI Subscription `name` on its own account (`tok-<name>`, `acct-<name>`): `five` percent of the
    5-hour window used, resetting in `reset_in` seconds; 5 % of the weekly one."""
    world.provider.add_login(f"tok-{name}", f"acct-{name}")
    world.provider.set_windows(f"acct-{name}", five_hour=(five, utc_in(reset_in)), weekly=(5.0, utc_in(86400)))
    await world.add_secret(f"login-{name}", "auth.json", codex_login(f"tok-{name}", f"acct-{name}"))
    await world.add_subscription(name, "openai", f"login-{name}", "auth.json")


async def sub_state(world: World, name: str, state: str, timeout: float = 15) -> None:
    await eventually(lambda: (world.kube.get("subscriptions", "default", name) or {}).get("status", {}).get("state")
                     == state, timeout, what=f"{name} {state}: {world.kube.get('subscriptions', 'default', name)}")


async def limited_box(world: World, sub: str, rotation: dict | None, reset_in: float = 3600, **agent) -> None:
    wa = {"resumeAfterReset": True}
    if rotation is not None:
        wa["rotation"] = rotation
    await world.add_box("box", "claude-code", sub, whenAgentStops=wa)
    args = ["--limited-token", f"tok-{sub}"]
    if agent.get("working"):
        args.append("--start-working")
    await world.run_pod("box", [TabSpec("main", fake_agent_argv("claude-code", time.time() + reset_in, *args))])


async def test_limit_line_switches_to_the_subscription_with_most_headroom(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)
    await subscription(world, "b", 60.0, 7200)
    await subscription(world, "c", 20.0, 7200)
    for name in ("b", "c"):
        await sub_state(world, name, "Available")
    await limited_box(world, "a", {"enabled": True, "group": "All"})
    await eventually(lambda: "Switched" in reasons(world, "box"), 20, what="switch")
    ev = next(e for e in world.events("box") if e["reason"] == "Switched")
    assert ev["message"].startswith("Switched from a to c:")
    await eventually(lambda: submits(world, "box"), 15, what="continue after the switch")
    assert [e["text"] for e in submits(world, "box")] == ["continue"]
    assert submits(world, "box")[0]["token"] == "tok-c", "the agent read the new login from its live file"
    assert "tok-c" in world.box_secret("box")["credentials.json"]
    await eventually(lambda: status(world, "box").get("subscription") == "c", 10)
    await eventually(lambda: status(world, "box").get("nextSubscription") == "b", 10)
    await eventually(lambda: any(e["event"] == "working" for e in world.agent_log("box", "main")), 10)


async def test_no_flip_flop_when_the_old_subscription_resets(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 8)     # a resets in 8 s and will then have the most headroom
    await subscription(world, "b", 50.0, 7200)
    await sub_state(world, "b", "Available")
    await limited_box(world, "a", {"enabled": True, "group": "All"})
    await eventually(lambda: status(world, "box").get("subscription") == "b", 20, what="switch to b")
    await sub_state(world, "a", "Available", timeout=30)
    await asyncio.sleep(5)
    assert status(world, "box").get("subscription") == "b", "sticky: a's reset does not pull the box back"
    assert reasons(world, "box").count("Switched") == 1


async def test_enabling_rotation_on_an_exhausted_account_switches_at_once(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)
    await subscription(world, "b", 10.0, 7200)
    await limited_box(world, "a", None)
    await sub_state(world, "a", "Exhausted")
    await eventually(lambda: any(t.get("state") == "RateLimited" for t in status(world, "box").get("tabs", [])), 15)
    await asyncio.sleep(2)
    assert "Switched" not in reasons(world, "box"), "no rotation configured: the box waits"
    await world.patch(world.box_path("box"), {"spec": {"whenAgentStops": {"rotation": {"enabled": True}}}})
    started = time.time()
    await eventually(lambda: status(world, "box").get("subscription") == "b", 15, what="switch after enabling")
    assert time.time() - started < 10, "event-driven, not at the 2-minute sweep"
    await eventually(lambda: submits(world, "box"), 15)


async def test_whole_group_exhausted_waits_then_moves_to_the_first_that_resets(world: World):
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)
    await subscription(world, "b", 100.0, 10)   # b resets first
    await sub_state(world, "b", "Exhausted")
    await limited_box(world, "a", {"enabled": True, "group": "Selected", "subscriptions": ["a", "b"]})
    await eventually(lambda: "RotationGroupExhausted" in reasons(world, "box"), 20, what="group exhausted")
    assert status(world, "box").get("subscription") == "a"
    assert submits(world, "box") == []
    await eventually(lambda: status(world, "box").get("subscription") == "b", 30, what="moved to b after its reset")
    await eventually(lambda: submits(world, "box"), 15)
    assert submits(world, "box")[0]["token"] == "tok-b"


async def test_reserve_stops_the_box_and_restores_it_after_the_reset(world: World):
    world.start_operator()
    await subscription(world, "a", 85.0, 12, reserve={"fiveHourPercent": 20})
    await limited_box(world, "a", None, working=True)
    await sub_state(world, "a", "Reserved")
    await eventually(lambda: any(e["event"] == "interrupted" for e in world.agent_log("box", "main")), 15,
                     what="Esc to the agent")
    await eventually(lambda: world.login_file("box") is None, 10, what="login file removed")
    await eventually(lambda: "Stopping to keep 20% of your 5-hour limit" in world.screen("box", "main"), 10)
    await eventually(lambda: status(world, "box").get("state") == "Reserved", 10)
    sub = world.kube.get("subscriptions", "default", "a")["status"]
    assert sub["reservedUntil"] and "Boxes stop at 80% of the 5-hour limit" in sub["threshold"]
    # The window resets (the provider rolls it at its reset instant): login restored, tab resumed.
    await sub_state(world, "a", "Available", timeout=30)
    await eventually(lambda: world.login_file("box") is not None, 15, what="login restored")
    await eventually(lambda: submits(world, "box"), 15, what="continue after the reserve lifted")
    assert submits(world, "box")[0]["token"] == "tok-a"
    assert "ReserveLifted" in reasons(world, "box")


async def test_agent_started_after_the_reserve_stop_is_stopped_too_and_resumed(world: World, tmp_path):
    """A tab at its shell when the reserve stops the box (the box started on a reserved subscription)
    whose agent starts afterwards gets the same Esc once and is resumed at the lift."""
    world.start_operator()
    await subscription(world, "a", 85.0, 20, reserve={"fiveHourPercent": 20})
    await sub_state(world, "a", "Reserved")
    await world.add_box("box", "claude-code", "a", whenAgentStops={"resumeAfterReset": True})
    go = tmp_path / "GO"
    argv = fake_agent_argv("claude-code", time.time() + 3600, "--limited-token", "tok-a", "--start-working")
    await world.run_pod("box", [TabSpec("main", ["sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.2; done; exec "$@"',
                                                 "sh", *argv])])
    await eventually(lambda: status(world, "box").get("state") == "Reserved", 15, what="box Reserved")
    go.touch()                                          # the agent starts after the stop
    await eventually(lambda: any(e["event"] == "interrupted" for e in world.agent_log("box", "main")), 15,
                     what="Esc to the agent that started later")
    await sub_state(world, "a", "Available", timeout=30)
    await eventually(lambda: submits(world, "box"), 15, what="continue after the reserve lifted")
    assert submits(world, "box")[0]["token"] == "tok-a"
    assert sum(e["event"] == "interrupted" for e in world.agent_log("box", "main")) == 1, "Esc once"


async def test_reserve_with_rotation_switches_instead_of_stopping(world: World):
    world.start_operator()
    await subscription(world, "a", 85.0, 3600, reserve={"fiveHourPercent": 20})
    await subscription(world, "b", 5.0, 3600)
    await sub_state(world, "b", "Available")
    await limited_box(world, "a", {"enabled": True}, working=True)
    await eventually(lambda: status(world, "box").get("subscription") == "b", 20, what="switch to b")
    assert "reserve reached" in await event_message(world, "box", "Switched")
    assert "tok-b" in (world.login_file("box") or "")
    assert "ReserveReached" not in reasons(world, "box")


async def test_deleted_subscription_moves_the_box(world: World):
    world.start_operator()
    await subscription(world, "a", 30.0, 3600)
    await subscription(world, "b", 10.0, 3600)
    await sub_state(world, "b", "Available")
    await limited_box(world, "a", {"enabled": True}, working=True)
    await eventually(lambda: status(world, "box").get("nextSubscription") == "b", 15)
    await world.delete(world.sub_path("a"))
    started = time.time()
    await eventually(lambda: status(world, "box").get("subscription") == "b", 15, what="moved off the deleted one")
    assert time.time() - started < 10
    assert "subscription deleted" in await event_message(world, "box", "Switched")
    assert "tok-b" in world.box_secret("box")["credentials.json"]


async def test_deleted_subscription_without_rotation_asks_a_human(world: World):
    world.start_operator()
    await subscription(world, "a", 30.0, 3600)
    await limited_box(world, "a", None, working=True)
    await eventually(lambda: status(world, "box").get("tabs"), 15)
    await world.delete(world.sub_path("a"))
    await eventually(lambda: any(c["type"] == "NeedsAttention" and c["status"] == "True"
                                 and c["reason"] == "SubscriptionNotFound"
                                 for c in status(world, "box").get("conditions", [])), 15)
    await eventually(lambda: any(e["reason"] == "SubscriptionNotFound" and e["type"] == "Warning"
                                 for e in world.events("box")), 10)


@pytest.mark.parametrize("group, problem", [
    (["a"], "must hold at least one subscription besides 'a'"),
    (["b", "c"], "must list spec.subscription ('a')"),
    (["a", "x"], "Subscription 'x' is for openai, not anthropic"),
    (["a", "nope"], "Subscription 'nope' not found"),
])
async def test_selected_group_must_hold_the_current_and_another_of_the_provider(world: World, group, problem):
    world.start_operator()
    await subscription(world, "a", 30.0, 3600)
    await subscription(world, "b", 30.0, 3600)
    world.provider.add_login("tok-x", "acct-x")
    await world.add_secret("login-x", "auth.json", codex_login("tok-x", "acct-x"))
    await world.add_subscription("x", "openai", "login-x", "auth.json")
    await world.add_box("box", "claude-code", "a",
                        whenAgentStops={"rotation": {"enabled": True, "group": "Selected", "subscriptions": group}})
    await eventually(lambda: any(c["type"] == "Ready" and c["reason"] == "InvalidSpec"
                                 for c in status(world, "box").get("conditions", [])), 15)
    cond = next(c for c in status(world, "box")["conditions"] if c["type"] == "Ready")
    assert cond["status"] == "False"
    assert cond["message"].startswith("spec.whenAgentStops.rotation.subscriptions:") and problem in cond["message"]
    await eventually(lambda: any(e["type"] == "Warning" and problem in e["message"] for e in world.events("box")), 10)
    assert world.kube.get("v1/pods", "default", "box") is None, "nothing else is created"


async def test_disconnected_subscription_moves_the_box(world: World):
    world.start_operator()
    await subscription(world, "a", 30.0, 3600)
    await subscription(world, "b", 10.0, 3600)
    await sub_state(world, "b", "Available")
    await limited_box(world, "a", {"enabled": True}, working=True)
    await eventually(lambda: status(world, "box").get("nextSubscription") == "b", 15)
    world.provider.revoke("tok-a")                      # the provider now answers 401 for a's login
    await sub_state(world, "a", "Disconnected", timeout=40)
    await eventually(lambda: status(world, "box").get("subscription") == "b", 15, what="moved off the disconnected one")
    # The Switched Event is posted after the status patch that moved the box: poll for it.
    await eventually(lambda: any(e["reason"] == "Switched" and "login disconnected" in e["message"]
                                 for e in world.events("box")), 10, what="Switched Event naming the disconnect")


async def test_codex_box_is_stopped_before_its_login_changes_then_resumed(world: World):
    world.start_operator()
    for name, five in (("a", 100.0), ("b", 10.0)):
        await codex_subscription(world, name, five)
    await sub_state(world, "b", "Available")
    await world.add_box("box", "codex", "a", whenAgentStops={"rotation": {"enabled": True}})
    await world.run_pod("box", [TabSpec("main", ["codex"])], shims={"codex": fake_agent_argv(
        "codex", time.time() + 3600, "--limited-token", "tok-a")})
    await eventually(lambda: submits(world, "box"), 30, what="continue on the new account")
    log = world.agent_log("box", "main")
    assert [e.get("argv") for e in log if e["event"] == "start"] == [[], ["resume", "--last"]]
    assert [e["text"] for e in submits(world, "box")] == ["continue"]
    assert submits(world, "box")[0]["token"] == "tok-b", "the restarted Codex read b's auth.json"
    assert "tok-b" in (world.login_file("box", "codex") or "")
    assert status(world, "box").get("subscription") == "b"


async def test_codex_stopped_by_the_switch_gets_no_ctrl_c_at_its_shell_before_the_relaunch(world: World):
    """The switch stops the limited Codex (Ctrl-C twice: it exits to the tab's shell), then its resume relaunches
    it. The restart's own Interrupt step finds the agent gone: it must not press Ctrl-C into the shell. Those
    keys wipe the shell's line, and bash handles their SIGINT after it may already have read the relaunch typed
    right behind them (6 ms later): the line 'codex resume --last' was discarded, the agent stayed dead at the
    shell (ResumeNotTakingEffect; 2 runs in 10 of the test above on a loaded machine)."""
    from agentbox_sim.kube import ExecFault

    keys: list[list[str]] = []

    def spy(argv: list[str]) -> bool:
        if "send-keys" in argv:
            keys.append(list(argv))
        return False
    world.kube.stream_faults.append(ExecFault(mode="pass", match=spy, times=None))
    world.kube.exec_faults.append(ExecFault(mode="pass", match=spy, times=None))
    world.start_operator()
    await codex_subscription(world, "a", 100.0)
    await codex_subscription(world, "b", 10.0)
    await sub_state(world, "b", "Available")
    await world.add_box("box", "codex", "a", whenAgentStops={"rotation": {"enabled": True}})
    await world.run_pod("box", [TabSpec("main", ["codex"])], shims={"codex": fake_agent_argv(
        "codex", time.time() + 3600, "--limited-token", "tok-a")})
    await eventually(lambda: submits(world, "box"), 30, what="continue on the new account")
    ctrl_c = [argv for argv in keys if "C-c" in argv]
    assert len(ctrl_c) == 2, f"two Ctrl-C (the agent's exit), none at the shell: {ctrl_c}"
    log = world.agent_log("box", "main")
    assert [e.get("argv") for e in log if e["event"] == "start"] == [[], ["resume", "--last"]]
    assert [e["text"] for e in submits(world, "box")] == ["continue"] and submits(world, "box")[0]["token"] == "tok-b"


async def test_limit_line_printed_before_a_switch_is_not_the_new_subscriptions_limit(world: World):
    """The demo's race (b3): the box moves off an exhausted subscription on a pass whose capture
    missed the agent's limit line (not painted yet); the next capture shows that line. It was printed
    on the old login: the tab is resumed on the new subscription, not moved on to a third one."""
    world.start_operator()
    await subscription(world, "a", 100.0, 3600)
    await subscription(world, "b", 60.0, 7200)
    await subscription(world, "c", 20.0, 7200)
    for name in ("b", "c"):
        await sub_state(world, name, "Available")
    await world.add_box("box", "claude-code", "a",
                        whenAgentStops={"resumeAfterReset": True, "rotation": {"enabled": True, "group": "All"}})
    gate = world.pod_dir("box") / "go"
    # A non-shell process with a blank screen until the test opens the gate, then the agent on a's login.
    waiter = ("import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
              "os.execvp(sys.argv[2], sys.argv[2:])")
    agent = fake_agent_argv("claude-code", time.time() + 3600, "--limited-token", "tok-a")
    await world.run_pod("box", [TabSpec("main", [sys.executable, "-c", waiter, str(gate), *agent])])
    await eventually(lambda: status(world, "box").get("subscription") == "c", 20, what="switch to c (a exhausted)")
    assert submits(world, "box") == []
    gate.touch()
    await eventually(lambda: any(e["event"] == "limit" for e in world.agent_log("box", "main")), 10,
                     what="the agent prints its limit line (on a's login)")
    await eventually(lambda: submits(world, "box"), 20, what="continue on c")
    assert [(e["text"], e["token"]) for e in submits(world, "box")] == [("continue", "tok-c")]
    assert status(world, "box").get("subscription") == "c"
    assert [e["message"] for e in world.events("box") if e["reason"] == "Switched"] == [
        "Switched from a to c: 5-hour window at 100 %"]



async def test_reserve_stop_before_the_agent_painted_its_screen_resumes_it_at_the_lift(world: World):
    """The demo's race (b3): the reserve stops a box whose agent runs but shows nothing recognisable
    yet (Unknown, not idle). Esc went to a running program, so the tab was stopped by the reserve: at
    the lift it gets `continue` like a tab stopped while working."""
    world.start_operator()
    await subscription(world, "a", 75.0, 25, reserve={"fiveHourPercent": 20})
    await sub_state(world, "a", "Available")
    await world.add_box("box", "claude-code", "a", whenAgentStops={"resumeAfterReset": True})
    gate, started = world.pod_dir("box") / "go", world.pod_dir("box") / "waiting"
    # A program (not a shell) that paints nothing until the test opens the gate, then the agent.
    waiter = ("import os, sys, time\nprint('\\033[2J\\033[Hstarting', flush=True)\nopen(sys.argv[2], 'w').close()\n"
              "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\nos.execvp(sys.argv[3], sys.argv[3:])")
    agent = fake_agent_argv("claude-code", time.time() + 25, "--start-working", "--work-seconds", "1",
                            "--limited-token", "tok-a")
    await world.run_pod("box", [TabSpec("main", [sys.executable, "-c", waiter, str(gate), str(started), *agent])])
    await eventually(started.exists, 10, what="the program runs in the tab")
    world.provider.set_windows("acct-a", five_hour=(85.0, utc_in(20)), weekly=(10.0, utc_in(86400 * 3)))
    await eventually(lambda: "ReserveReached" in reasons(world, "box"), 15, what="stopped at the reserve")
    gate.touch()
    await sub_state(world, "a", "Available", timeout=30)
    await eventually(lambda: "ReserveLifted" in reasons(world, "box"), 15, what="reserve lifted")
    await eventually(lambda: submits(world, "box"), 15, what=f"continue after the reserve lifted: {world.agent_log('box', 'main')} {status(world, 'box').get('tabs')} {[(e['reason'], e['message']) for e in world.events('box')]} {world.screen('box', 'main')[-600:]}")
    assert [(e["text"], e["token"]) for e in submits(world, "box")] == [("continue", "tok-a")]
