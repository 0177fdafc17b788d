"""Adversarial screens (issue 9 #5, #6): a box's tab shows whatever its user or agent prints. The
controller captures every tab on every pass; nothing a screen holds may stall the controller for the
other boxes. Run against the real operator in the emulated world (real tmux)."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from datetime import datetime, timezone

import pytest

from agentbox_sim.fake_agent import claude_clock
from agentbox_sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in

pytestmark = pytest.mark.component

# A tab that makes its window wide and tall and prints one line without spaces that fills it: tmux
# `capture-pane -J` joins the wrapped rows into one logical line of width x height characters.
FLOOD = ("import subprocess, sys, time\n"
         "subprocess.run(['tmux', 'resize-window', '-x', '{w}', '-y', '{h}'])\n"
         "time.sleep(0.5)\n"
         "sys.stdout.write({text!r} * {n}); sys.stdout.flush()\n"
         "time.sleep(3600)\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", ["ab1c", "http://"])
async def test_one_long_screen_line_does_not_stall_other_boxes(world: World, unit: str):
    """The flood box's screen holds a ~60,000-character line of letters and digits (or of URL
    starts): the healthy box beside it is still resumed within seconds of its reset."""
    world.start_operator()
    world.provider.add_login("tok-flood", "acct-flood")
    await world.add_secret("login-flood", "credentials.json", claude_login("tok-flood"))
    await world.add_subscription("s-flood", "anthropic", "login-flood", "credentials.json")
    await world.add_box("flood", "claude-code", "s-flood")
    w, h = 300, 200
    script = FLOOD.format(w=w, h=h, text=unit, n=w * h // len(unit))
    await world.run_pod("flood", [TabSpec("main", [sys.executable, "-c", script])])
    await eventually(lambda: any("list-windows" in r.argv for r in world.kube.exec_journal if r.pod == "flood"), 20,
                     what="the flood box watched")

    reset = float(math.ceil(time.time() + 12))
    world.provider.add_login("tok-good", "acct-good")
    world.provider.set_windows("acct-good", five_hour=(100.0, datetime.fromtimestamp(reset, timezone.utc)),
                               weekly=(40.0, utc_in(86400)))
    await world.add_secret("login-good", "credentials.json", claude_login("tok-good"))
    await world.add_subscription("s-good", "anthropic", "login-good", "credentials.json")
    await world.add_box("good", "claude-code", "s-good")
    await world.run_pod("good", [TabSpec("main", fake_agent_argv("claude-code", reset))])

    def sent() -> float | None:
        return next((e["t"] for e in world.agent_log("good", "main") if e["event"] == "submit"), None)

    await eventually(sent, reset - time.time() + 60, what="the healthy box resumed")
    late = sent() - reset
    assert late < 10.0, f"the healthy box was resumed {late:.1f} s after its reset (the flood box stalled the loop)"


# 30 tabs showing a limit banner, renamed every second: each new name is a new tab to the controller,
# and each LimitDetected message names the tab, so deduplication by message never folds them.
RENAMER = r'''
import random, subprocess, time
for i in range(30):
    subprocess.run(["tmux", "new-window", "-d", "-n", f"t{i}", "sh", "-c",
                    "printf 'Usage limit reached \u2219 resets {clock}\\n'; sleep 3600"])
while True:
    for w in subprocess.run(["tmux", "list-windows", "-F", "#{window_id}"], capture_output=True,
                            text=True).stdout.split()[1:]:
        subprocess.run(["tmux", "rename-window", "-t", w, f"n{random.randrange(10**9)}"])
    time.sleep(1)
'''


@pytest.mark.timeout(120)
async def test_a_box_that_renames_its_tabs_cannot_flood_events(world: World):
    """Before: 780 LimitDetected Events in 30 s from one box. Events of one object are rate-limited
    like the Kubernetes EventRecorder's spam filter (a burst, then one per `refill_s`)."""
    world.start_operator()
    world.provider.add_login("tok-storm", "acct-storm")
    await world.add_secret("login-storm", "credentials.json", claude_login("tok-storm"))
    await world.add_subscription("s-storm", "anthropic", "login-storm", "credentials.json")
    await world.add_box("storm", "claude-code", "s-storm")
    # the reset two hours ahead: a fixed clock time would read as a reset just passed in the hour after it
    renamer = RENAMER.replace("{clock}", claude_clock(utc_in(7200), "UTC"))
    await world.run_pod("storm", [TabSpec("main", [sys.executable, "-c", renamer])])
    await eventually(lambda: sum(e["reason"] == "LimitDetected" for e in world.events("storm")) >= 20, 30,
                     what="the renamed tabs detected")
    t0 = time.time()
    await asyncio.sleep(20.0)
    elapsed = time.time() - t0 + 30.0  # the whole run, generously
    posted = len(world.events("storm"))
    budget = 50 + elapsed / 6.0 + 2  # Recorder.burst, Recorder.refill_s
    assert posted <= budget, f"{posted} Events from one box (at most {budget:.0f} allowed)"
