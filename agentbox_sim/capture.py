"""Capture the real CLIs' screens against the provider emulator, and check what detection makes of them.

    python -m agentbox_sim.capture [--prefix DIR] [--out DIR] [--only NAME ...]

Each scenario drives the real Claude Code or Codex (from ``--prefix``, default ``.agents``; the
versions installed there are the ones captured) in a tmux pane of an emulated pod, with the provider
emulator answering its model calls and returning the providers' real rate-limit responses, and no
operator running (nothing types into the pane but the scenario). At each step it saves the pane
(``tmux capture-pane -p -J``) as ``<out>/<version>/<name>.txt`` and what the screen means — stated by
the scenario, not by the detector — in ``<out>/<version>/screens.json``:
``{name: {"agent", "now", "tz", "expect": {"state", "auto_continue", "limit_menu", "menu_choice",
"resets_at"}}}``. tests/test_real_agents.py checks every saved screen against its expectation, and
this module prints a table (version, scenario, detected state, reset, pass/fail) for ``make agents-latest``.

Redactions only: the sandbox path becomes ``/home/agent/work``, the long ``env … codex`` line
``codex``; trailing spaces and trailing blank rows are dropped. Exit status 0 when every capture
matched its expectation, 1 otherwise, 2 when the CLIs are unavailable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pathlib
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from agentbox_sim.real_agents import (
    AGENTS_DIR,
    CLAUDE_PACKAGE,
    CODEX_PACKAGE,
    AgentsUnavailable,
    RealAgents,
    _installed_version,
)

__all__ = ["Capture", "Row", "capture_all", "main", "SCENARIOS"]

UTC = timezone.utc
RESET_AHEAD_S = 90.0      # the reset stays ahead of every capture of a scenario
PANE = "=agentbox:main"
NATIVE_WAIT = re.compile(r"(?:continu\w*|set to continue)\s+automatically", re.IGNORECASE)


@dataclass
class Capture:
    """One saved screen: its name, agent, the instant it was taken and what it means."""

    name: str
    agent: str
    screen: str
    now: datetime
    expect: dict[str, Any]


@dataclass
class Row:
    """One line of the drift table."""

    version: str
    scenario: str
    expected: str
    detected: str
    reset: str
    ok: bool
    note: str = ""


@dataclass
class _Ctx:
    world: Any
    agents: RealAgents
    box: str
    account: str
    reset: float = 0.0
    captures: list[Capture] = field(default_factory=list)

    def screen(self) -> str:
        return self.world.screen(self.box, "main")

    def keys(self, *args: str) -> None:
        self.world.tmux(self.box, "send-keys", "-t", PANE, *args)

    async def type(self, text: str) -> None:
        """Type like a person: the text, a pause, Enter as its own key; Enter again when the TUI
        was still drawing and left the text in its composer."""
        self.keys("-l", text)
        await asyncio.sleep(0.5)
        self.keys("Enter")
        for _ in range(8):
            await asyncio.sleep(4.0)
            rows = [line.strip() for line in self.screen().splitlines() if line.strip()]
            if not any(row in (f"› {text}", f"❯ {text}") for row in rows[-4:]):
                return
            self.keys("Enter")

    async def until(self, probe: Callable[[str], Any], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if probe(self.screen()):
                await asyncio.sleep(1.0)  # let the frame settle
                return
            await asyncio.sleep(0.3)
        raise TimeoutError(f"{self.box}: {what} did not appear in {timeout:.0f} s; screen:\n{self.screen()}")

    def reset_minute(self) -> str:
        """The reset as the CLIs print it: local time, rounded down to the minute (TZ=UTC here)."""
        return datetime.fromtimestamp(math.floor(self.reset / 60) * 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def save(self, name: str, **expect: Any) -> None:
        if expect.pop("reset", False):
            expect["resets_at"] = self.reset_minute()
        self.captures.append(Capture(name, "codex" if name.startswith("codex") else "claude-code",
                                     self.screen(), datetime.now(UTC).replace(microsecond=0), expect))


async def _pod(world: Any, box: str, login_key: str, login_text: str) -> None:
    """A pod object and the agent's login file, as the operator and the box entrypoint would make them."""
    await world.create(f"/api/v1/namespaces/{world.namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": box},
        "spec": {"containers": [{"name": "box", "image": "agentbox-box:dev"}]}})
    rel = ".claude/.credentials.json" if login_key == "credentials.json" else ".codex/auth.json"
    path = world.pod_dir(box) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(login_text)
    path.chmod(0o600)


async def _claude(ctx: _Ctx, *, auto_continue: bool, weekly_far: bool = False) -> None:
    from agentbox_sim.world import TabSpec

    world, agents = ctx.world, ctx.agents
    creds = agents.claude_login(f"sk-ant-oat01-{ctx.box}-emulated", ctx.account)
    await _pod(world, ctx.box, "credentials.json", creds)
    shims = agents.claude_shims(ctx.box, auto_continue=auto_continue, account=ctx.account)
    await world.run_pod(ctx.box, [TabSpec("main", ["claude", "--permission-mode", "default"])], shims=shims)
    await ctx.until(lambda s: "? for shortcuts" in s, 90, "Claude Code's prompt")
    ctx.reset = float(math.ceil(time.time() + RESET_AHEAD_S))
    at = datetime.fromtimestamp(ctx.reset, UTC)
    if weekly_far:  # the weekly window, reset 3 days out: beyond what the native wait accepts
        ctx.reset = float(math.ceil(time.time() + 3 * 86400))
        world.provider.set_windows(ctx.account, five_hour=(20.0, at),
                                   weekly=(100.0, datetime.fromtimestamp(ctx.reset, UTC)))
    else:
        world.provider.set_windows(ctx.account, five_hour=(100.0, at), weekly=(40.0, at + timedelta(days=3)))
    await ctx.type("write hello")


async def claude_native_wait(ctx: _Ctx) -> None:
    """Native auto-continue on (the default): the limit line and the armed wait, then Esc cancels it."""
    await _claude(ctx, auto_continue=True)
    await ctx.until(lambda s: NATIVE_WAIT.search(s), 60, "the native wait")
    ctx.save("claude-auto-limit", state="rate_limited", kind="usage", auto_continue=True, reset=True)
    ctx.keys("Escape")
    await ctx.until(lambda s: re.search(r"Automatic continue (?:cancel|stop)", s), 20, "the cancelled wait")
    ctx.save("claude-auto-cancelled", state="rate_limited", kind="usage", auto_continue=False, reset=True)


async def claude_menu_wait_here(ctx: _Ctx) -> None:
    """``autoContinueAtUsageLimit: false``: the limit menu; a person chooses "Wait here, then continue
    automatically" — a wait the agent will finish by itself, never to be typed over."""
    await _claude(ctx, auto_continue=False)
    await ctx.until(lambda s: "What do you want to do?" in s, 60, "the limit menu")
    ctx.save("claude-menu", state="rate_limited", kind="usage", limit_menu=True, menu_choice=1, reset=True)
    screen = ctx.screen()
    m = re.search(r"(\d)\.\s+Wait here, then continue automatically", screen)
    ctx.keys(m.group(1) if m else "2")
    await ctx.until(lambda s: "What do you want to do?" not in s, 20, "the menu closed")
    await asyncio.sleep(2.0)
    ctx.save("claude-menu-wait-here", state="rate_limited", kind="usage", auto_continue=True, reset=True)


async def claude_menu_stop(ctx: _Ctx) -> None:
    """The limit menu answered with "Stop and wait for limit to reset": the limit line and an empty prompt."""
    await _claude(ctx, auto_continue=False)
    await ctx.until(lambda s: "What do you want to do?" in s, 60, "the limit menu")
    m = re.search(r"(\d)\.\s+Stop and wait for limit to reset", ctx.screen())
    ctx.keys(m.group(1) if m else "1")
    await ctx.until(lambda s: "What do you want to do?" not in s, 20, "the menu closed")
    await asyncio.sleep(2.0)
    ctx.save("claude-menu-stop-and-wait", state="rate_limited", kind="usage", auto_continue=False, reset=True)


async def claude_weekly_far(ctx: _Ctx) -> None:
    """The weekly limit with a reset days away: the native wait does not take it (it gives up when the
    reset is more than 24 hours out, corpus N16; 2.1.332 and 2.1.337 open the options menu instead)."""
    await _claude(ctx, auto_continue=True, weekly_far=True)
    await ctx.until(lambda s: "weekly limit" in s, 60, "the weekly limit line")
    await asyncio.sleep(3.0)
    # 2.1.332, 2.1.337: no native wait for a reset days away; the options menu opens although auto-continue is on
    ctx.save("claude-weekly-far", state="rate_limited", kind="usage", limit_menu=True, menu_choice=1, reset=True)


async def codex_session(ctx: _Ctx) -> None:
    """Codex (ChatGPT mode): a reply near the limit (its status warning), the usage-limit 429, Ctrl-C
    twice, and ``codex resume --last`` (the old limit line redrawn above an empty composer)."""
    from agentbox_sim.world import TabSpec

    world, agents = ctx.world, ctx.agents
    await _pod(world, ctx.box, "auth.json", agents.codex_login(ctx.account))
    await world.run_pod(ctx.box, [TabSpec("main", ["codex"])], shims=agents.codex_shims(ctx.box))
    await ctx.until(lambda s: "Ask Codex to do anything" in s and "? for shortcuts" in s, 90, "Codex's composer")
    await asyncio.sleep(2.0)
    ctx.reset = float(math.ceil(time.time() + RESET_AHEAD_S))
    at = datetime.fromtimestamp(ctx.reset, UTC)
    world.provider.set_windows(ctx.account, five_hour=(99.6, at), weekly=(10.0, at + timedelta(days=5)))
    await ctx.type("say hi")
    await ctx.until(lambda s: world.provider.reply_text.split(" ")[0] in s and "Ask Codex" in s, 60, "the reply")
    await asyncio.sleep(2.0)
    ctx.save("codex-status-line", state="idle", kind="warning")
    world.provider.set_windows(ctx.account, five_hour=(100.0, at), weekly=(10.0, at + timedelta(days=5)))
    await ctx.type("write hello")
    await ctx.until(lambda s: "hit your usage limit" in s, 60, "the limit line")
    ctx.save("codex-limit", state="rate_limited", kind="usage", reset=True)
    ctx.keys("C-c")
    await asyncio.sleep(0.7)
    ctx.keys("C-c")
    await ctx.until(lambda s: "codex resume" in s or re.search(r"^\$ ?$", s, re.M), 20, "the shell")
    ctx.save("codex-ctrl-c-twice", state="unknown")
    await ctx.type("codex resume --last")
    await ctx.until(lambda s: "hit your usage limit" in s and "Ask Codex" in s, 60, "the resumed transcript")
    ctx.save("codex-resumed", state="rate_limited", kind="usage", reset=True)


SCENARIOS: dict[str, tuple[str, Callable[[_Ctx], Awaitable[None]]]] = {
    "claude-native-wait": ("claude-code", claude_native_wait),
    "claude-menu-wait-here": ("claude-code", claude_menu_wait_here),
    "claude-menu-stop": ("claude-code", claude_menu_stop),
    "claude-weekly-far": ("claude-code", claude_weekly_far),
    "codex": ("codex", codex_session),
}


def _clean(screen: str, sandbox: pathlib.Path) -> str:
    text = screen.replace(str(sandbox.resolve()), "/home/agent/work").replace(str(sandbox), "/home/agent/work")
    text = re.sub(r"env [A-Z_]+=\S*(?: [A-Z_]+=\S*)+ \S*/codex\b", "codex", text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


async def capture_all(prefix: pathlib.Path = AGENTS_DIR, only: list[str] | None = None,
                      workdir: pathlib.Path | None = None) -> tuple[dict[str, str], list[Capture], list[str]]:
    """Run the scenarios (all, or ``only``) at once in one emulated world.

    Returns:
        ``({agent: version}, captures, errors)``; a scenario that failed midway keeps the captures it
        made and adds one error line.

    Raises:
        AgentsUnavailable: the CLIs are not installed in ``prefix``.
    """
    from controller.settings import Settings
    from agentbox_sim.world import World

    versions = {"claude-code": _installed_version(prefix, CLAUDE_PACKAGE) or "?",
                "codex": _installed_version(prefix, CODEX_PACKAGE) or "?"}
    names = [n for n in SCENARIOS if not only or n in only]
    tmp = workdir or pathlib.Path(tempfile.mkdtemp(prefix="agentbox-capture-"))
    captures: list[Capture] = []
    errors: list[str] = []
    async with World(tmp / "world", Settings()) as world:
        agents = RealAgents(world, prefix=prefix)
        try:
            await agents.start()
            ctxs = [_Ctx(world, agents, name, f"acct-{name}") for name in names]
            # the Claude scenarios together, then Codex alone: under load Codex 0.171.0 can leave a
            # prompt in its composer for a minute and more (its Enter is taken only once it is ready)
            claude = [c for c in ctxs if SCENARIOS[c.box][0] == "claude-code"]
            others = [c for c in ctxs if c not in claude]
            results = list(await asyncio.gather(*(SCENARIOS[c.box][1](c) for c in claude), return_exceptions=True))
            for c in others:
                results += await asyncio.gather(SCENARIOS[c.box][1](c), return_exceptions=True)
            for ctx, res in zip(claude + others, results):
                sandbox = world.pod_dir(ctx.box)
                for cap in ctx.captures:
                    cap.screen = _clean(cap.screen, sandbox)
                captures += ctx.captures
                if isinstance(res, BaseException):
                    errors.append(f"{ctx.box}: {type(res).__name__}: {res}")
        finally:
            world.sockets.close()
            await agents.cleanup()
    return versions, captures, errors


def write(out: pathlib.Path, versions: dict[str, str], captures: list[Capture]) -> list[pathlib.Path]:
    """Save the captures under ``out/<version>/`` (screens.json merged with what is there)."""
    written = []
    for cap in captures:
        folder = out / versions[cap.agent]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{cap.name}.txt").write_text(cap.screen)
        meta_path = folder / "screens.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        meta[f"{cap.name}.txt"] = {"agent": cap.agent, "now": cap.now.strftime("%Y-%m-%dT%H:%M:%SZ"), "tz": "UTC",
                                   "expect": cap.expect}
        meta_path.write_text(json.dumps(dict(sorted(meta.items())), indent=2, ensure_ascii=False) + "\n")
        written.append(folder / f"{cap.name}.txt")
    return written


def check(agent: str, screen: str, now: datetime, tz: str, expect: dict[str, Any]) -> tuple[bool, str, str, str]:
    """Detect one screen and compare with its expectation: (ok, detected summary, reset, mismatch note)."""
    from controller.agents.registry import detect

    det = detect(agent, screen, now, tz)
    problems = []
    if det.state.value != expect["state"]:
        problems.append(f"state {det.state.value} != {expect['state']}")
    if "kind" in expect and (det.kind.value if det.kind else None) != expect["kind"]:
        problems.append(f"kind {det.kind.value if det.kind else None} != {expect['kind']}")
    for key in ("auto_continue", "limit_menu"):
        if det.to_json()[key] != expect.get(key, False):
            problems.append(f"{key} {det.to_json()[key]} != {expect.get(key, False)}")
    if "menu_choice" in expect and det.menu_choice != expect["menu_choice"]:
        problems.append(f"menu_choice {det.menu_choice} != {expect['menu_choice']}")
    if expect.get("resets_at"):
        want = datetime.fromisoformat(expect["resets_at"].replace("Z", "+00:00"))
        if det.resets_at is None or abs((det.resets_at - want).total_seconds()) > 60:
            problems.append(f"resets_at {det.to_json()['resets_at']} != {expect['resets_at']}")
    detected = det.state.value + (" auto" if det.auto_continue else "") + (" menu" if det.limit_menu else "")
    return not problems, detected, det.to_json()["resets_at"] or "-", "; ".join(problems)


def table(rows: list[Row]) -> str:
    """The drift table: version, scenario, expected, detected state, reset, pass/fail."""
    head = ("version", "scenario", "expected", "detected", "reset", "result")
    data = [(r.version, r.scenario, r.expected, r.detected, r.reset, "pass" if r.ok else f"FAIL {r.note}")
            for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *data)] if data else [len(h) for h in head]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*d) for d in data])


def rows_for(versions: dict[str, str], captures: list[Capture]) -> list[Row]:
    rows = []
    for cap in captures:
        ok, detected, reset, note = check(cap.agent, cap.screen, cap.now, "UTC", cap.expect)
        rows.append(Row(f"{cap.agent} {versions[cap.agent]}", cap.name, cap.expect["state"], detected, reset, ok, note))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentbox_sim.capture", description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", type=pathlib.Path, default=AGENTS_DIR, help="npm prefix holding the CLIs")
    p.add_argument("--out", type=pathlib.Path, default=None,
                   help="save the screens under OUT/<version>/ (default: do not save, only print the table)")
    p.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="run only this scenario (repeatable)")
    ns = p.parse_args(argv)
    try:
        versions, captures, errors = asyncio.run(capture_all(ns.prefix, ns.only))
    except AgentsUnavailable as exc:
        print(f"capture: {exc}", file=sys.stderr)
        return 2
    if ns.out is not None:
        for path in write(ns.out, versions, captures):
            print(f"saved {path}")
    rows = rows_for(versions, captures)
    print(table(rows))
    for err in errors:
        print(f"scenario error: {err}")
    return 0 if rows and all(r.ok for r in rows) and not errors else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
