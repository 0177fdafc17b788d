"""`agentbox-controller demo`: the resume scenario in an emulated cluster, in accelerated time.

Starts the Kubernetes API emulator, the provider usage emulator, two tmux "pods" and the real
operator in one process tree; a Claude Code tab and a Codex tab (scripted agents printing the
real limit lines) hit their 5-hour limits with resets seconds away. The demo prints a timeline
and exits 0 only if every expected step happened:

1. both limits are detected and a resume is scheduled at each reset;
2. at the Claude reset the controller re-reads usage and sends `continue`;
3. at the Codex reset it restarts Codex with `codex resume --last` and sends `continue`;
4. both agents work again, and each got exactly one `continue`.
"""

from __future__ import annotations

import asyncio
import math
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from controller.settings import Settings

DEMO_SETTINGS = Settings(
    scan_interval_s=2.0, resume_margin_s=1.0, human_idle_s=10.0, auto_continue_grace_s=10.0, settle_s=5.0,
    max_attempts=3, unknown_reset_recheck_s=10.0, send_pause_s=0.2, verify_timeout_s=5.0, restart_timeout_s=20.0,
    usage_interval_s=30.0, usage_max_age_s=2.0, exec_timeout_s=10.0, metrics_port=0,
)


class Timeline:
    """Prints what happens, once, with the time since the demo started."""

    def __init__(self, out: Any = None) -> None:
        self.t0 = time.time()
        self.seen: set[str] = set()
        self.out = out or sys.stdout

    def say(self, who: str, what: str, key: str | None = None, at: float | None = None) -> None:
        key = key or f"{who}|{what}"
        if key in self.seen:
            return
        self.seen.add(key)
        stamp = (at or time.time()) - self.t0
        wall = datetime.fromtimestamp(at or time.time(), timezone.utc).strftime("%H:%M:%S")
        print(f"  +{stamp:5.1f}s  {wall}Z  {who:<16} {what}", file=self.out, flush=True)


async def _play(real_agents: bool, workdir: Path, timeline: Timeline) -> bool:
    from controller.sim.world import TabSpec, World, claude_login, codex_login, fake_agent_argv

    async with World(workdir, DEMO_SETTINGS) as w:
        now = time.time()
        claude_reset = float(math.ceil(now + 20))
        codex_reset = float(math.ceil(now + 28))
        at = lambda e: datetime.fromtimestamp(e, timezone.utc)  # noqa: E731
        w.provider.add_login("demo-claude-token", "claude-account")
        w.provider.set_windows("claude-account", five_hour=(100.0, at(claude_reset)),
                               weekly=(41.0, at(now) + timedelta(days=3)))
        w.provider.add_login("demo-codex-token", "codex-account")
        w.provider.set_windows("codex-account", five_hour=(100.0, at(codex_reset)),
                               weekly=(12.0, at(now) + timedelta(days=5)))
        timeline.say("demo", f"provider emulator on {w.provider.url}; API emulator on {w.kube.url}")
        w.start_operator()
        timeline.say("controller", "operator started (kopf, standalone)")
        await w.add_secret("claude-login", "credentials.json", claude_login("demo-claude-token"))
        await w.add_subscription("claude-main", "anthropic", "claude-login", "credentials.json",
                                 displayName="claude@example.com")
        await w.add_secret("codex-login", "auth.json", codex_login("demo-codex-token", "codex-account"))
        await w.add_subscription("codex-main", "openai", "codex-login", "auth.json", displayName="codex@example.com")
        await w.add_box("claude-box", "claude-code", "claude-main")
        await w.add_box("codex-box", "codex", "codex-main")
        timeline.say("kubectl", "applied Secrets, Subscriptions claude-main/codex-main, AgentBoxes claude-box/codex-box")
        await w.run_pod("claude-box", [TabSpec("main", fake_agent_argv("claude-code", claude_reset))])
        await w.run_pod("codex-box", [TabSpec("main", ["codex"])],
                        shims={"codex": fake_agent_argv("codex", codex_reset)})
        timeline.say("kubelet", "pods claude-box and codex-box running; agents started in tmux tab 'main'")
        timeline.say("demo", f"Claude's 5-hour window resets at {at(claude_reset):%H:%M:%S}Z, "
                     f"Codex's at {at(codex_reset):%H:%M:%S}Z (printed minute-rounded by the agents)")

        deadline = time.time() + 90
        done = False
        while time.time() < deadline and not done:
            _observe(w, timeline)
            done = _finished(w)
            await asyncio.sleep(0.25)
        _observe(w, timeline)
        await asyncio.sleep(1.0)
        _observe(w, timeline)
        return _report(w, timeline, claude_reset, codex_reset)


def _observe(w: Any, timeline: Timeline) -> None:
    for ev in sorted(w.events(), key=lambda e: e.get("metadata", {}).get("resourceVersion", "")):
        obj = (ev.get("involvedObject") or {}).get("name", "?")
        if ev.get("reason") in ("Exhausted", "CreatedSecret"):
            continue
        timeline.say(obj, f"Event {ev.get('type')}/{ev.get('reason')}: {ev.get('message')}",
                     key=ev["metadata"]["name"])
    for box in ("claude-box", "codex-box"):
        for entry in w.agent_log(box, "main"):
            what = {
                "limit": "agent printed its usage-limit line",
                "submit": f"agent received the line '{entry.get('text')}'",
                "working": f"agent is working again ({entry.get('reason')})",
                "exit": "agent exited (Ctrl-C twice)",
                "start": f"agent started: {'codex ' + ' '.join(entry['argv']) if entry.get('argv') else 'initial run'}",
                "menu": f"menu answered: {entry.get('choice')}",
            }.get(entry["event"])
            if what:
                timeline.say(f"{box}/main", what, key=f"{box}{entry['t']}{entry['event']}", at=entry["t"])
        status = (w.box(box) or {}).get("status") or {}
        for tab in status.get("tabs") or []:
            timeline.say(f"{box}/{tab['name']}", f"status: {tab.get('state')} — {tab.get('message')}")


def _submits(w: Any, box: str) -> list[dict[str, Any]]:
    return [e for e in w.agent_log(box, "main") if e["event"] == "submit"]


def _finished(w: Any) -> bool:
    return all(any(e["event"] == "working" for e in w.agent_log(b, "main")) for b in ("claude-box", "codex-box"))


def _report(w: Any, timeline: Timeline, claude_reset: float, codex_reset: float) -> bool:
    checks: list[tuple[str, bool]] = []
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in w.events()}
    checks.append(("Claude limit detected", ("claude-box", "LimitDetected") in reasons))
    checks.append(("Codex limit detected", ("codex-box", "LimitDetected") in reasons))
    cs, xs = _submits(w, "claude-box"), _submits(w, "codex-box")
    checks.append(("Claude got exactly one 'continue'", [e["text"] for e in cs] == ["continue"]))
    checks.append(("Claude resumed after its reset, within 30 s",
                   bool(cs) and claude_reset <= cs[0]["t"] <= claude_reset + 30))
    starts = [e.get("argv") for e in w.agent_log("codex-box", "main") if e["event"] == "start"]
    checks.append(("Codex restarted with `codex resume --last`", starts == [[], ["resume", "--last"]]))
    checks.append(("Codex got exactly one 'continue'", [e["text"] for e in xs] == ["continue"]))
    checks.append(("Codex resumed after its reset, within 30 s",
                   bool(xs) and codex_reset <= xs[0]["t"] <= codex_reset + 30))
    checks.append(("Both agents working again", _finished(w)))
    checks.append(("Resumed Events posted", {("claude-box", "Resumed"), ("codex-box", "Resumed")} <= reasons))
    print("\nResult:")
    for name, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    for box, reset, subs in (("claude-box", claude_reset, cs), ("codex-box", codex_reset, xs)):
        if subs:
            print(f"  {box}: reset → continue in {subs[0]['t'] - reset:.1f} s")
    return all(ok for _, ok in checks)


def run_demo(real_agents: bool = False, verbose: bool = False) -> int:
    """Play the demo; returns the process exit code (0 when every expected step happened)."""
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if real_agents:
        print("--real-agents: running the real Claude Code and Codex CLIs is not available yet "
              "(tracked separately); run the demo without it.", file=sys.stderr)
        return 2
    print("agentbox-controller demo: a Claude Code tab and a Codex tab hit their usage limits;\n"
          "the controller resumes each at its reset.\n")
    timeline = Timeline()
    with tempfile.TemporaryDirectory(prefix="agentbox-demo-") as tmp:
        ok = asyncio.run(_play(real_agents, Path(tmp), timeline))
    print("\nDemo " + ("passed: every expected step happened." if ok else "FAILED: see the steps above."))
    return 0 if ok else 1
