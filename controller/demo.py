"""`agentbox-controller demo`: the resume scenario in an emulated cluster, in accelerated time.

Starts the Kubernetes API emulator, the provider usage emulator, two tmux "pods" and the real
operator in one process tree; a Claude Code tab and a Codex tab (scripted agents printing the
real limit lines) hit their 5-hour limits with resets seconds away. The demo prints a timeline
and exits 0 only if every expected step happened:

1. both limits are detected and a resume is scheduled at each reset;
2. at the Claude reset the controller re-reads usage and sends `continue`;
3. at the Codex reset it restarts Codex with `codex resume --last` and sends `continue`;
4. both agents work again, and each got exactly one `continue`.

With `--real-agents` (`make demo REAL_AGENTS=1`) the tabs run the pinned Claude Code and Codex CLIs
(controller/sim/real_agents.py) against the provider emulator instead of the scripted agents; Claude
Code has its native wait switched off, so step 2 starts with the controller answering its limit menu.
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
        self.pending: list[tuple[float, str, str]] = []

    def say(self, who: str, what: str, key: str | None = None, at: float | None = None) -> None:
        """Queue a line (once per key); `flush` prints the queue in time order."""
        key = key or f"{who}|{what}"
        if key in self.seen:
            return
        self.seen.add(key)
        self.pending.append((at or time.time(), who, what))

    def flush(self) -> None:
        """Print the queued lines sorted by their instants (agent logs carry earlier timestamps
        than the moment the demo reads them)."""
        for at, who, what in sorted(self.pending, key=lambda item: item[0]):
            wall = datetime.fromtimestamp(at, timezone.utc).strftime("%H:%M:%S")
            print(f"  +{at - self.t0:5.1f}s  {wall}Z  {who:<16} {what}", file=self.out, flush=True)
        self.pending.clear()


class Cast:
    """Who plays the agents: how their tabs start and what the demo reads to follow them.

    The scripted cast (`ScriptedCast`) runs controller.sim.fake_agent and reads its key log; the real
    cast (`RealCast`) runs the pinned Claude Code and Codex CLIs against the provider emulator and
    reads the emulator's record of their model calls.
    """

    async def setup(self, w: Any, timeline: Timeline, claude_reset: float, codex_reset: float) -> None:
        raise NotImplementedError

    async def tick(self, w: Any, timeline: Timeline) -> None:
        """Called every 0.25 s while the demo runs."""

    def observe(self, w: Any, timeline: Timeline) -> None:
        raise NotImplementedError

    def finished(self, w: Any) -> bool:
        raise NotImplementedError

    def checks(self, w: Any, claude_reset: float, codex_reset: float) -> list[tuple[str, bool]]:
        raise NotImplementedError

    async def close(self) -> None:
        """Stop whatever the cast started."""


class ScriptedCast(Cast):
    """Scripted agents (controller.sim.fake_agent) printing the real limit lines."""

    async def setup(self, w: Any, timeline: Timeline, claude_reset: float, codex_reset: float) -> None:
        from controller.sim.world import TabSpec, claude_login, codex_login, fake_agent_argv

        await w.add_secret("claude-login", "credentials.json", claude_login("demo-claude-token"))
        await w.add_secret("codex-login", "auth.json", codex_login("demo-codex-token", "codex-account"))
        await _objects(w, timeline)
        await w.run_pod("claude-box", [TabSpec("main", fake_agent_argv("claude-code", claude_reset))])
        await w.run_pod("codex-box", [TabSpec("main", ["codex"])],
                        shims={"codex": fake_agent_argv("codex", codex_reset)})
        timeline.say("kubelet", "pods claude-box and codex-box running; agents started in tmux tab 'main'")

    def observe(self, w: Any, timeline: Timeline) -> None:
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

    def finished(self, w: Any) -> bool:
        return all(any(e["event"] == "working" for e in w.agent_log(b, "main")) for b in ("claude-box", "codex-box"))

    def checks(self, w: Any, claude_reset: float, codex_reset: float) -> list[tuple[str, bool]]:
        checks: list[tuple[str, bool]] = []
        cs, xs = _submits(w, "claude-box"), _submits(w, "codex-box")
        checks.append(("Claude got exactly one 'continue'", [e["text"] for e in cs] == ["continue"]))
        checks.append(("Claude resumed after its reset, within 30 s",
                       bool(cs) and claude_reset <= cs[0]["t"] <= claude_reset + 30))
        starts = [e.get("argv") for e in w.agent_log("codex-box", "main") if e["event"] == "start"]
        checks.append(("Codex restarted with `codex resume --last`", starts == [[], ["resume", "--last"]]))
        checks.append(("Codex got exactly one 'continue'", [e["text"] for e in xs] == ["continue"]))
        checks.append(("Codex resumed after its reset, within 30 s",
                       bool(xs) and codex_reset <= xs[0]["t"] <= codex_reset + 30))
        checks.append(("Both agents working again", self.finished(w)))
        for box, reset, subs in (("claude-box", claude_reset, cs), ("codex-box", codex_reset, xs)):
            if subs:
                print(f"  {box}: reset → continue in {subs[0]['t'] - reset:.1f} s")
        return checks


class RealCast(Cast):
    """The real Claude Code and Codex CLIs (pinned npm packages in .agents/), contained: own HOMEs,
    a proxy that refuses every outbound CONNECT, the provider emulator on loopback answering their
    model calls with the providers' real 429s. Claude Code's native wait is switched off
    (``autoContinueAtUsageLimit: false``), so its limit menu appears and the controller answers it."""

    PROMPT = "write hello"

    def __init__(self) -> None:
        self.agents: Any = None
        self.typed: set[str] = set()
        self.codex_access = ""

    async def setup(self, w: Any, timeline: Timeline, claude_reset: float, codex_reset: float) -> None:
        from controller.sim.real_agents import CLAUDE_VERSION, CODEX_VERSION, RealAgents
        from controller.sim.world import TabSpec

        self.agents = RealAgents(w)
        await self.agents.start()
        timeline.say("demo", f"real CLIs: Claude Code {CLAUDE_VERSION}, Codex {CODEX_VERSION}; outbound traffic "
                     f"refused by the proxy {self.agents.proxy.url}; Codex talks HTTPS to {w.provider.tls_url}")
        await w.add_secret("claude-login", "credentials.json",
                           self.agents.claude_login("sk-ant-oat01-demo-emulated", "claude-account"))
        await w.add_secret("codex-login", "auth.json", self.agents.codex_login("codex-account"))
        await _objects(w, timeline)
        await w.run_pod("claude-box", [TabSpec("main", ["claude", "--permission-mode", "default"])],
                        shims=self.agents.claude_shims("claude-box", auto_continue=False, account="claude-account"))
        await w.run_pod("codex-box", [TabSpec("main", ["codex"])], shims=self.agents.codex_shims("codex-box"))
        timeline.say("kubelet", "pods claude-box and codex-box running; `claude` and `codex` started in tmux tab 'main'")

    async def tick(self, w: Any, timeline: Timeline) -> None:
        ready = {"claude-box": ("? for shortcuts",), "codex-box": ("Ask Codex to do anything", "? for shortcuts")}
        for box, marks in ready.items():
            if box in self.typed or not all(m in w.screen(box, "main") for m in marks):
                continue
            self.typed.add(box)
            await asyncio.sleep(1.0 if box == "codex-box" else 0.2)
            w.tmux(box, "send-keys", "-t", "=agentbox:main", "-l", self.PROMPT)
            await asyncio.sleep(0.5)
            w.tmux(box, "send-keys", "-t", "=agentbox:main", "Enter")
            timeline.say(f"{box}/main", f"a person typed the prompt '{self.PROMPT}'")

    def _turns(self, w: Any, box: str) -> list[Any]:
        account = "claude-account" if box == "claude-box" else "codex-account"
        return [t for t in w.provider.turns if t.account == account and not t.text.startswith("Generate a concise")]

    def _continues(self, w: Any, box: str) -> list[Any]:
        return [t for t in self._turns(w, box) if t.text == "continue" and t.status == 200]

    def observe(self, w: Any, timeline: Timeline) -> None:
        for box in ("claude-box", "codex-box"):
            for t in self._turns(w, box):
                what = ("the provider answered 429 (usage limit)" if t.status == 429 else f"the provider answered {t.status}")
                timeline.say(f"{box}/main", f"model call with the user turn '{t.text[:50]}': {what}",
                             key=f"{box}{t.at}", at=t.at)

    def finished(self, w: Any) -> bool:
        return all(self._continues(w, b) for b in ("claude-box", "codex-box"))

    def checks(self, w: Any, claude_reset: float, codex_reset: float) -> list[tuple[str, bool]]:
        checks: list[tuple[str, bool]] = []
        reasons = {(e["involvedObject"]["name"], e["reason"]) for e in w.events()}
        cs, xs = self._continues(w, "claude-box"), self._continues(w, "codex-box")
        checks.append(("Claude's limit menu answered 'Stop and wait'", ("claude-box", "AnsweredLimitMenu") in reasons))
        checks.append(("Claude got exactly one 'continue'", len(cs) == 1))
        checks.append(("Claude resumed after its reset, within 30 s",
                       bool(cs) and claude_reset <= cs[0].at <= claude_reset + 30))
        checks.append(("Codex restarted with `codex resume --last`",
                       any(e["involvedObject"]["name"] == "codex-box" and e["reason"] == "Resumed"
                           and "codex resume --last" in e["message"] for e in w.events())))
        checks.append(("Codex got exactly one 'continue', in the resumed conversation",
                       len(xs) == 1 and self.PROMPT in xs[0].history))
        checks.append(("Codex resumed after its reset, within 30 s",
                       bool(xs) and codex_reset <= xs[0].at <= codex_reset + 30))
        checks.append(("Outbound requests all went to the refusing proxy", all(a.startswith(("CONNECT ", "GET ", "POST "))
                                                    for a in self.agents.proxy.attempts)))
        for box, reset, subs in (("claude-box", claude_reset, cs), ("codex-box", codex_reset, xs)):
            if subs:
                print(f"  {box}: reset → continue in {subs[0].at - reset:.1f} s")
        return checks

    async def close(self) -> None:
        if self.agents is not None:
            self.agents.world.sockets.close()
            pids = await self.agents.cleanup()
            print(f"  stopped {len(pids)} leftover agent process(es) (Codex app-server daemons); "
                  f"{len(self.agents.proxy.attempts)} outbound request(s) refused")


async def _objects(w: Any, timeline: Timeline) -> None:
    await w.add_subscription("claude-main", "anthropic", "claude-login", "credentials.json",
                             displayName="claude@example.com")
    await w.add_subscription("codex-main", "openai", "codex-login", "auth.json", displayName="codex@example.com")
    await w.add_box("claude-box", "claude-code", "claude-main")
    await w.add_box("codex-box", "codex", "codex-main")
    timeline.say("kubectl", "applied Secrets, Subscriptions claude-main/codex-main, AgentBoxes claude-box/codex-box")


async def _play(cast: Cast, workdir: Path, timeline: Timeline, lead_s: float = 20.0) -> bool:
    from controller.sim.world import World

    async with World(workdir, DEMO_SETTINGS) as w:
        now = time.time()
        claude_reset = float(math.ceil(now + lead_s))
        codex_reset = float(math.ceil(now + lead_s + 8))
        at = lambda e: datetime.fromtimestamp(e, timezone.utc)  # noqa: E731
        w.provider.add_login("demo-claude-token", "claude-account")
        w.provider.add_login("demo-codex-token", "codex-account")
        timeline.say("demo", f"provider emulator on {w.provider.url}; API emulator on {w.kube.url}")
        w.start_operator()
        timeline.say("controller", "operator started (kopf, standalone)")
        try:
            await cast.setup(w, timeline, claude_reset, codex_reset)
            w.provider.set_windows("claude-account", five_hour=(100.0, at(claude_reset)),
                                   weekly=(41.0, at(now) + timedelta(days=3)))
            w.provider.set_windows("codex-account", five_hour=(100.0, at(codex_reset)),
                                   weekly=(12.0, at(now) + timedelta(days=5)))
            timeline.say("demo", f"Claude's 5-hour window resets at {at(claude_reset):%H:%M:%S}Z, "
                         f"Codex's at {at(codex_reset):%H:%M:%S}Z (printed minute-rounded by the agents)")

            deadline = time.time() + 90
            done = False
            while time.time() < deadline and not done:
                await cast.tick(w, timeline)
                _observe(w, timeline, cast)
                done = cast.finished(w)
                await asyncio.sleep(0.25)
            _observe(w, timeline, cast)
            await asyncio.sleep(1.0)
            _observe(w, timeline, cast)
            return _report(w, cast, claude_reset, codex_reset)
        finally:
            timeline.flush()
            await w.stop_operator()
            await cast.close()


def _observe(w: Any, timeline: Timeline, cast: Cast) -> None:
    for ev in sorted(w.events(), key=lambda e: e.get("metadata", {}).get("resourceVersion", "")):
        obj = (ev.get("involvedObject") or {}).get("name", "?")
        if ev.get("reason") in ("Exhausted", "CreatedSecret"):
            continue
        timeline.say(obj, f"Event {ev.get('type')}/{ev.get('reason')}: {ev.get('message')}",
                     key=ev["metadata"]["name"])
    cast.observe(w, timeline)
    for box in ("claude-box", "codex-box"):
        status = (w.box(box) or {}).get("status") or {}
        for tab in status.get("tabs") or []:
            timeline.say(f"{box}/{tab['name']}", f"status: {tab.get('state')} — {tab.get('message')}")
    timeline.flush()


def _submits(w: Any, box: str) -> list[dict[str, Any]]:
    return [e for e in w.agent_log(box, "main") if e["event"] == "submit"]


def _report(w: Any, cast: Cast, claude_reset: float, codex_reset: float) -> bool:
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in w.events()}
    checks: list[tuple[str, bool]] = [
        ("Claude limit detected", ("claude-box", "LimitDetected") in reasons),
        ("Codex limit detected", ("codex-box", "LimitDetected") in reasons),
    ]
    print("\nResult:")
    checks += cast.checks(w, claude_reset, codex_reset)
    checks.append(("Resumed Events posted", {("claude-box", "Resumed"), ("codex-box", "Resumed")} <= reasons))
    for name, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    return all(ok for _, ok in checks)


def run_demo(real_agents: bool = False, verbose: bool = False) -> int:
    """Play the demo; returns the process exit code (0 when every expected step happened)."""
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cast: Cast = ScriptedCast()
    if real_agents:
        from controller.sim.real_agents import AgentsUnavailable, ensure_installed

        try:
            ensure_installed()
        except AgentsUnavailable as exc:
            print(f"--real-agents: {exc}", file=sys.stderr)
            return 2
        cast = RealCast()
    print("agentbox-controller demo: a Claude Code tab and a Codex tab hit their usage limits;\n"
          "the controller resumes each at its reset." + (" (real CLIs)" if real_agents else "") + "\n")
    timeline = Timeline()
    with tempfile.TemporaryDirectory(prefix="agentbox-demo-", dir=_demo_tmp(real_agents), ignore_cleanup_errors=True) as tmp:
        ok = asyncio.run(_play(cast, Path(tmp), timeline, lead_s=30.0 if real_agents else 20.0))
    print("\nDemo " + ("passed: every expected step happened." if ok else "FAILED: see the steps above."))
    return 0 if ok else 1


def _demo_tmp(real_agents: bool) -> str | None:
    """Codex refuses to create its helper links under /tmp: the real demo works under the repo's tmp/."""
    if not real_agents:
        return None
    from controller.sim.real_agents import REPO

    path = REPO / "tmp"
    path.mkdir(exist_ok=True)
    return str(path)
