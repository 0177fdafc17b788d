"""`agentbox-controller demo`: the whole product in an emulated cluster, in accelerated time (~1 minute).

Starts the Kubernetes API emulator, the provider usage emulator, tmux "pods" and the real operator in one
process tree, with scripted agents printing the real limit lines, and plays four scenes at once:

1. **Resume**: a Claude Code tab and a Codex tab hit their 5-hour limits with resets seconds away; at each
   reset the controller re-reads usage and sends `continue` (Codex restarted with `codex resume --last`).
2. **Rotation**: a box whose subscription is used up moves to the subscription of its group with the most
   headroom (team-c at 20% rather than team-b at 60%) and resumes there on that login.
3. **Whole group exhausted**: every subscription of a box's group is used up; the box waits, then moves to
   the first one that resets and resumes on it.
4. **Reserve**: a working box reaches its subscription's reserve (80% of the 5-hour limit): the agent is
   stopped and its login removed; at the reset the login comes back and the agent is resumed.

It prints a timeline and exits 0 only if every expected step happened. `--keep` leaves the emulated cluster
running afterwards and prints how to look at it (`kubectl agentbox status`, `tmux attach` to a box).

With `--real-agents` (`make demo REAL_AGENTS=1`) the resume scene's tabs run the pinned Claude Code and Codex
CLIs (agentbox_sim/real_agents.py) against the provider emulator instead of the scripted agents; Claude
Code has its native wait switched off, so it starts with the controller answering its limit menu.
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
    usage_near_interval_s=2.0, usage_min_interval_s=1.0,
)


def _LOGIN_EXPIRES_MS() -> int:  # noqa: N802
    """Claude logins of the demo expire in 8 hours, as a fresh one does (far from the controller's refresh
    point, so the demo refreshes none; `status` shows the expiry)."""
    return int((time.time() + 8 * 3600) * 1000)


class Timeline:
    """Prints what happens, once, with the time since the demo started."""

    def __init__(self, out: Any = None) -> None:
        self.t0 = time.time()
        self.seen: set[str] = set()
        self.out = out or sys.stdout
        self.pending: list[tuple[float, str, str]] = []
        self.passed: bool | None = None   # the checks' verdict, once made

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

    The scripted cast (`ScriptedCast`) runs agentbox_sim.fake_agent and reads its key log; the real
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
    """Scripted agents (agentbox_sim.fake_agent) printing the real limit lines."""

    async def setup(self, w: Any, timeline: Timeline, claude_reset: float, codex_reset: float) -> None:
        from agentbox_sim.world import TabSpec, claude_login, codex_login, fake_agent_argv

        await w.add_secret("claude-login", "credentials.json", claude_login("demo-claude-token", _LOGIN_EXPIRES_MS()))
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
        from agentbox_sim.real_agents import CLAUDE_VERSION, CODEX_VERSION, RealAgents
        from agentbox_sim.world import TabSpec

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


class Scenes:
    """Scenes 2-4 (rotation, whole group exhausted, reserve), with scripted Claude Code agents that read their
    live login file: an agent on a used-up account's token stays limited, on another account it works."""

    BOXES = ("rotate-box", "group-box", "reserve-box")

    def __init__(self) -> None:
        self.group_reset = 0.0
        self.reserve_reset = 0.0
        self.reserve_reached = False

    @staticmethod
    async def _subscription(w: Any, name: str, five: float, reset_at: datetime, **spec: Any) -> None:
        from agentbox_sim.world import claude_login

        token = f"tok-{name}"
        w.provider.add_login(token, f"acct-{name}")
        w.provider.set_windows(f"acct-{name}", five_hour=(five, reset_at),
                               weekly=(15.0, reset_at + timedelta(days=3)))
        await w.add_secret(f"login-{name}", "credentials.json", claude_login(token, _LOGIN_EXPIRES_MS()))
        await w.add_subscription(name, "anthropic", f"login-{name}", "credentials.json", **spec)

    async def setup(self, w: Any, timeline: Timeline, now: float, group_lead_s: float, reserve_lead_s: float) -> None:
        from agentbox_sim.world import TabSpec, fake_agent_argv

        at = lambda e: datetime.fromtimestamp(e, timezone.utc)  # noqa: E731
        self.group_reset = float(math.ceil(now + group_lead_s))
        self.reserve_reset = float(math.ceil(now + reserve_lead_s))
        later = at(now + 3600)
        # Rotation: team-a is used up; team-b has 40% left, team-c 80%.
        await self._subscription(w, "team-a", 100.0, later)
        await self._subscription(w, "team-b", 60.0, at(now + 7200))
        await self._subscription(w, "team-c", 20.0, at(now + 7200))
        # Whole group exhausted: night-a and night-b both used up; night-b resets first.
        await self._subscription(w, "night-a", 100.0, later)
        await self._subscription(w, "night-b", 100.0, at(self.group_reset))
        # Reserve: 75% used, 20% of the 5-hour window kept for the human; the working box takes it past
        # 80% (tick), so the reserve stops an agent that is visibly working.
        await self._subscription(w, "shared", 75.0, at(self.reserve_reset), reserve={"fiveHourPercent": 20})
        rotate = {"resumeAfterReset": True, "rotation": {"enabled": True, "group": "Selected",
                                                         "subscriptions": ["team-a", "team-b", "team-c"]}}
        group = {"resumeAfterReset": True, "rotation": {"enabled": True, "group": "Selected",
                                                        "subscriptions": ["night-a", "night-b"]}}
        await w.add_box("rotate-box", "claude-code", "team-a", whenAgentStops=rotate)
        await w.add_box("group-box", "claude-code", "night-a", whenAgentStops=group)
        await w.add_box("reserve-box", "claude-code", "shared")
        timeline.say("kubectl", "applied Subscriptions team-a (100%), team-b (60%), team-c (20%), night-a and "
                     "night-b (both 100%), shared (75%, reserve 20%); AgentBoxes rotate-box, group-box, reserve-box")
        await w.run_pod("rotate-box", [TabSpec("main", fake_agent_argv("claude-code", now + 3600,
                                                                       "--limited-token", "tok-team-a"))])
        await w.run_pod("group-box", [TabSpec("main", fake_agent_argv("claude-code", self.group_reset,
                                                                      "--limited-token", "tok-night-a"))])
        await w.run_pod("reserve-box", [TabSpec("main", fake_agent_argv("claude-code", self.reserve_reset,
                                                                        "--start-working",
                                                                        "--limited-token", "tok-shared"))])
        timeline.say("demo", f"night-b resets at {at(self.group_reset):%H:%M:%S}Z, shared at "
                     f"{at(self.reserve_reset):%H:%M:%S}Z")

    async def tick(self, w: Any, timeline: Timeline) -> None:
        """Once reserve-box's tab is Working in status, its usage reaches 85% of shared's 5-hour window."""
        if self.reserve_reached:
            return
        tabs = ((w.box("reserve-box") or {}).get("status") or {}).get("tabs") or []
        if any(t.get("state") == "Working" for t in tabs):
            self.reserve_reached = True
            reset = datetime.fromtimestamp(self.reserve_reset, timezone.utc)
            w.provider.set_windows("acct-shared", five_hour=(85.0, reset), weekly=(15.0, reset + timedelta(days=3)))
            timeline.say("demo", "reserve-box's agent works: shared reaches 85% of its 5-hour window")

    def observe(self, w: Any, timeline: Timeline) -> None:
        for box in self.BOXES:
            for entry in w.agent_log(box, "main"):
                what = {
                    "limit": "agent printed its usage-limit line",
                    "submit": f"agent received '{entry.get('text')}' (logged in as {entry.get('token')})",
                    "working": "agent is working again",
                    "interrupted": "agent interrupted (Esc)",
                }.get(entry["event"])
                if what:
                    timeline.say(f"{box}/main", what, key=f"{box}{entry['t']}{entry['event']}", at=entry["t"])

    def finished(self, w: Any) -> bool:
        return all(_submits(w, b) for b in self.BOXES)

    def checks(self, w: Any) -> list[tuple[str, bool]]:
        events = w.events()
        by = lambda box, reason: [e for e in events if e["involvedObject"]["name"] == box and e["reason"] == reason]  # noqa: E731
        status = lambda box: (w.box(box) or {}).get("status") or {}  # noqa: E731
        rs, gs, vs = _submits(w, "rotate-box"), _submits(w, "group-box"), _submits(w, "reserve-box")
        switched = by("rotate-box", "Switched")
        return [
            ("Rotation: rotate-box switched from team-a to team-c, the most headroom",
             bool(switched) and switched[0]["message"].startswith("Switched from team-a to team-c")),
            ("Rotation: rotate-box resumed once, on team-c's login",
             [(e["text"], e.get("token")) for e in rs] == [("continue", "tok-team-c")]
             and status("rotate-box").get("subscription") == "team-c"),
            ("Group exhausted: group-box waited (RotationGroupExhausted), nothing sent before night-b's reset",
             bool(by("group-box", "RotationGroupExhausted")) and all(e["t"] >= self.group_reset for e in gs)),
            ("Group exhausted: group-box moved to night-b after its reset and resumed on it",
             bool(gs) and gs[0].get("token") == "tok-night-b" and status("group-box").get("subscription") == "night-b"),
            ("Reserve: reserve-box stopped at 80% of the 5-hour limit (agent interrupted, ReserveReached)",
             bool(by("reserve-box", "ReserveReached"))
             and any(e["event"] == "interrupted" for e in w.agent_log("reserve-box", "main"))),
            ("Reserve: lifted at the reset, login restored and the agent resumed",
             bool(by("reserve-box", "ReserveLifted")) and bool(vs) and vs[0]["t"] >= self.reserve_reset
             and vs[0].get("token") == "tok-shared"),
        ]


async def _objects(w: Any, timeline: Timeline) -> None:
    await w.add_subscription("claude-main", "anthropic", "claude-login", "credentials.json",
                             displayName="claude@example.com")
    await w.add_subscription("codex-main", "openai", "codex-login", "auth.json", displayName="codex@example.com")
    await w.add_box("claude-box", "claude-code", "claude-main")
    await w.add_box("codex-box", "codex", "codex-main")
    timeline.say("kubectl", "applied Secrets, Subscriptions claude-main/codex-main, AgentBoxes claude-box/codex-box")


async def _play(cast: Cast, workdir: Path, timeline: Timeline, lead_s: float = 20.0, keep: bool = False) -> bool:
    from agentbox_sim.world import World

    scenes = Scenes()
    async with World(workdir, DEMO_SETTINGS) as w:
        now = time.time()
        claude_reset = float(math.ceil(now + lead_s))
        codex_reset = float(math.ceil(now + lead_s + 8))
        at = lambda e: datetime.fromtimestamp(e, timezone.utc)  # noqa: E731
        w.provider.add_login("demo-claude-token", "claude-account")
        w.provider.add_login("demo-codex-token", "codex-account")
        # The usage API knows the windows before any agent starts: an agent prints its reset rounded down
        # to the minute, so the controller asks the API at once and must hear "not yet".
        w.provider.set_windows("claude-account", five_hour=(100.0, at(claude_reset)),
                               weekly=(41.0, at(now) + timedelta(days=3)))
        w.provider.set_windows("codex-account", five_hour=(100.0, at(codex_reset)),
                               weekly=(12.0, at(now) + timedelta(days=5)))
        timeline.say("demo", f"provider emulator on {w.provider.url}; API emulator on {w.kube.url}")
        w.start_operator()
        timeline.say("controller", "operator started (kopf, standalone)")
        try:
            await cast.setup(w, timeline, claude_reset, codex_reset)
            timeline.say("demo", f"Claude's 5-hour window resets at {at(claude_reset):%H:%M:%S}Z, "
                         f"Codex's at {at(codex_reset):%H:%M:%S}Z (printed minute-rounded by the agents)")
            await scenes.setup(w, timeline, time.time(), group_lead_s=lead_s + 4, reserve_lead_s=lead_s + 12)

            deadline = time.time() + 120
            done = False
            while time.time() < deadline and not done:
                await cast.tick(w, timeline)
                await scenes.tick(w, timeline)
                _observe(w, timeline, cast, scenes)
                done = cast.finished(w) and scenes.finished(w)
                await asyncio.sleep(0.25)
            _observe(w, timeline, cast, scenes)
            await asyncio.sleep(1.0)
            _observe(w, timeline, cast, scenes)
            _show_status(w)
            ok = _report(w, cast, scenes, claude_reset, codex_reset)
            timeline.passed = ok
            print("\nDemo " + ("passed: every expected step happened." if ok else "FAILED: see the steps above."),
                  flush=True)
            if keep:
                await _keep(w, ok)
            return ok
        finally:
            timeline.flush()
            await w.stop_operator()
            await cast.close()


def _show_status(w: Any) -> None:
    """The fleet at the end, as `kubectl agentbox status` draws it (controller/statusview.py)."""
    from controller import constants as C
    from controller.statusview import build_view, render_table

    view = build_view(w.kube.objects(C.AGENTBOX_PLURAL, w.namespace), w.kube.objects(C.SUBSCRIPTION_PLURAL, w.namespace),
                      datetime.now(timezone.utc))
    print("\nThe fleet now (kubectl agentbox status):\n")
    for line in render_table(view, all_namespaces=False).splitlines():
        print(f"  {line}")


async def _keep(w: Any, ok: bool) -> None:
    """Leave the emulated cluster and the operator running until Ctrl-C; print how to look at it."""
    import shutil

    from controller import constants as C

    kubeconfig = w.kubeconfig
    print(f"\nThe emulated cluster keeps running{' (the demo FAILED)' if not ok else ''}; Ctrl-C stops it.")
    print("Look at it:")
    print(f"  export KUBECONFIG={kubeconfig}")
    plugin = Path(sys.executable).parent / "kubectl-agentbox"
    print(f"  {plugin if plugin.exists() else 'kubectl-agentbox'} status -o wide        "
          "# or `kubectl agentbox status` with kubectl-agentbox on PATH")
    if shutil.which("kubectl"):
        print("  kubectl get abox,asub    # NAME/AGE here (the emulator serves no printer columns); describe for Events")
    for box in ("claude-box", "rotate-box", "reserve-box"):
        print(f"  tmux -S {w.sockets(w.namespace, box)} attach -t ={C.TMUX_SESSION}   # {box} (detach: Ctrl-b d)")
    sys.stdout.flush()
    import signal

    # Ctrl-C (or SIGTERM) ends the wait; the caller then stops the operator and the emulators as usual.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    print("\nStopping the emulated cluster.", flush=True)


def _observe(w: Any, timeline: Timeline, cast: Cast, scenes: Scenes | None = None) -> None:
    for ev in sorted(w.events(), key=lambda e: e.get("metadata", {}).get("resourceVersion", "")):
        obj = (ev.get("involvedObject") or {}).get("name", "?")
        if ev.get("reason") in ("Exhausted", "CreatedSecret"):
            continue
        timeline.say(obj, f"Event {ev.get('type')}/{ev.get('reason')}: {ev.get('message')}",
                     key=ev["metadata"]["name"])
    cast.observe(w, timeline)
    if scenes is not None:
        scenes.observe(w, timeline)
    for box in ("claude-box", "codex-box", *(scenes.BOXES if scenes else ())):
        status = (w.box(box) or {}).get("status") or {}
        for tab in status.get("tabs") or []:
            timeline.say(f"{box}/{tab['name']}", f"status: {tab.get('state')} — {tab.get('message')}")
    timeline.flush()


def _submits(w: Any, box: str) -> list[dict[str, Any]]:
    return [e for e in w.agent_log(box, "main") if e["event"] == "submit"]


def _report(w: Any, cast: Cast, scenes: Scenes, claude_reset: float, codex_reset: float) -> bool:
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in w.events()}
    checks: list[tuple[str, bool]] = [
        ("Claude limit detected", ("claude-box", "LimitDetected") in reasons),
        ("Codex limit detected", ("codex-box", "LimitDetected") in reasons),
    ]
    print("\nResult:")
    checks += cast.checks(w, claude_reset, codex_reset)
    checks.append(("Resumed Events posted", {("claude-box", "Resumed"), ("codex-box", "Resumed")} <= reasons))
    checks += scenes.checks(w)
    for name, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    return all(ok for _, ok in checks)


def run_demo(real_agents: bool = False, verbose: bool = False, keep: bool = False) -> int:
    """Play the demo; returns the process exit code (0 when every expected step happened). `keep`: leave the
    emulated cluster running afterwards until Ctrl-C (the exit code is still the demo's)."""
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cast: Cast = ScriptedCast()
    if real_agents:
        from agentbox_sim.real_agents import AgentsUnavailable, ensure_installed

        try:
            ensure_installed()
        except AgentsUnavailable as exc:
            print(f"--real-agents: {exc}", file=sys.stderr)
            return 2
        cast = RealCast()
    print("agentbox-controller demo: agents hit their usage limits. The controller resumes a Claude Code and a\n"
          "Codex tab at their resets" + (" (real CLIs)" if real_agents else "") + ", moves a box to the subscription "
          "with the most headroom,\nwaits out a whole exhausted group until its first reset, and stops a box at "
          "its reserve and\nrestores it at the reset.\n")
    timeline = Timeline()
    with tempfile.TemporaryDirectory(prefix="agentbox-demo-", dir=_demo_tmp(real_agents), ignore_cleanup_errors=True) as tmp:
        ok = asyncio.run(_play(cast, Path(tmp), timeline, lead_s=30.0 if real_agents else 20.0, keep=keep))
    return 0 if ok else 1


def _demo_tmp(real_agents: bool) -> str | None:
    """Codex refuses to create its helper links under /tmp: the real demo works under the repo's tmp/."""
    if not real_agents:
        return None
    from agentbox_sim.real_agents import REPO

    path = REPO / "tmp"
    path.mkdir(exist_ok=True)
    return str(path)
