"""Adversarial screens (issue 9 #5, #6): a box's tab shows whatever its user or agent prints. The
controller captures every tab on every pass; nothing a screen holds may stall the controller for the
other boxes. Run against the real operator in the emulated world (real tmux)."""

from __future__ import annotations

import math
import sys
import time
from datetime import datetime, timezone

import pytest

from controller.sim.world import TabSpec, World, claude_login, eventually, fake_agent_argv, utc_in

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
