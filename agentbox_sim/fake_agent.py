"""Scripted stand-ins for the Claude Code and Codex TUIs, run inside the demo/test tmux "pods".

They print the agents' real limit lines (wording from the corpus and `shared/notes/real-agents.md`,
Claude Code 2.1.x and Codex 0.169) and react to keys the way the real TUIs do:

* Claude Code: a boxed prompt (`│ > text │`); typed text echoes; Enter submits. After a limit
  it shows `You've hit your 5-hour limit · resets 5:13pm (UTC)` (beyond 24 h the date first, `resets Dec 3,
  12:57am (UTC)`, as Claude Code 2.1.x prints it; see `limit_lines`); with `--auto-continue` the
  native wait line instead, and (unless `--auto-continue-fails`) it continues by itself
  `--auto-continue-after` seconds after the reset; with `--menu` the rate-limit options menu,
  answered by its number keys (`--menu-no-stop`: a menu without the 'Stop and wait' option;
  `--menu-sticky`: a menu that stays open after its number is pressed).
  `--prompt` opens a permission prompt first. `--refuse-after-reset N`: the limit comes back (the same
  line) on the first N submits after the reset, as a provider still refusing after its printed reset.
* Codex: a `› ` composer with the placeholder `Ask Codex to do anything`; the limit line
  `■ You've hit your usage limit. … try again at 5:19 PM.`; Ctrl-C twice exits and prints the
  resume hint; `codex resume --last` (this program with `resume --last`) redraws the transcript.

`continue` submitted after the reset instant makes the agent work (a spinner, then output);
before it, the limit line comes back. Every key and submitted line is appended to
`$AGENTBOX_FAKE_LOG` (one JSON object per line) so tests can count what the controller sent.

Usage: python -m agentbox_sim.fake_agent {claude-code,codex} --reset-epoch S [options]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import sys
import termios
import time
import tty
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

BOX_WIDTH = 62


def _log(event: str, **data: object) -> None:
    path = os.environ.get("AGENTBOX_FAKE_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"t": time.time(), "event": event, **data}) + "\n")


def claude_clock(at: datetime, zone: str, now: datetime | None = None) -> str:
    """Claude Code's reset text as 2.1.x prints it (its `JN` formatter): the local clock, minute-rounded
    down, '5pm' or '5:13pm', when the reset is at most 24 h after ``now`` (default: the current time);
    otherwise the date first, 'Dec 3, 12:57am', with the year when it is not ``now``'s ('Jan 1, 2100, 12am').
    (A clock alone for a reset days or years out would be read as the next such clock.)"""
    tz = ZoneInfo(zone)
    local = at.astimezone(tz)
    now = now or datetime.now(timezone.utc)
    hour = local.hour % 12 or 12
    ampm = "am" if local.hour < 12 else "pm"
    clock = f"{hour}{ampm}" if local.minute == 0 else f"{hour}:{local.minute:02d}{ampm}"
    if (at - now).total_seconds() <= 24 * 3600:
        return clock
    year = f", {local.year}" if local.year != now.astimezone(tz).year else ""
    return f"{local:%b} {local.day}{year}, {clock}"


def codex_clock(at: datetime, zone: str, now: datetime) -> str:
    """Codex's reset text: '%-I:%M %p' on the same local date, else 'Mon Dth, YYYY H:MM AM'."""
    local, today = at.astimezone(ZoneInfo(zone)), now.astimezone(ZoneInfo(zone))
    clock = f"{local.hour % 12 or 12}:{local.minute:02d} {'AM' if local.hour < 12 else 'PM'}"
    if local.date() == today.date():
        return clock
    day = local.day
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{local:%b} {day}{suffix}, {local.year} {clock}"


def codex_wait(at: datetime, now: datetime) -> str:
    """Codex's relative form of the wait until ``at`` (the CLI before its absolute clock, corpus X02/X04):
    "in 5 days 22 hours 11 minutes", "in 1 minute"; whole minutes, rounded up, zero parts left out."""
    minutes = max(1, -int(-(at - now).total_seconds() // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((days, "day"), (hours, "hour"), (mins, "minute")) if n]
    return "in " + " ".join(parts)


def limit_lines(agent: str, reset_epoch: float, zone: str, now: datetime, auto_continue: bool = False,
                relative: bool = False) -> list[str]:
    """The lines the fake agent prints when it hits its limit at ``now``, a reset at ``reset_epoch``
    (epoch seconds) shown in ``zone``: Codex's `■ … try again at <codex_clock>.` (with ``relative``,
    `🖐  … try again in <codex_wait>.`), Claude Code's `⎿  You've hit your 5-hour limit · resets
    <claude_clock> (<zone>)` and, with ``auto_continue``, its native-wait line. Pure: tests read these
    lines back with the product's parser at any ``now``."""
    at = datetime.fromtimestamp(reset_epoch, timezone.utc)
    if agent == "codex" and relative:
        return ["", "🖐  You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try "
                f"again {codex_wait(at, now)}.", ""]
    if agent == "codex":
        return ["", "■ You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
                "https://chatgpt.com/settings/usage to purchase more credits or try again at "
                f"{codex_clock(at, zone, now)}.", ""]
    lines = ["", f"  ⎿  You've hit your 5-hour limit · resets {claude_clock(at, zone, now)} ({zone})"]
    if auto_continue:
        lines.append(f"● Usage limit reached · continuing automatically at {claude_clock(at, zone, now)} "
                     "· esc or type to cancel")
    return lines


_MENU_KEYS = {"Upgrade your plan": "upgrade", "Stop and wait for limit to reset": "stop",
              "Switch to usage credits": "credits", "Wait here, then continue automatically": "wait"}


class Screen:
    """A tiny full-redraw screen: transcript lines above, a footer below."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def draw(self, footer: list[str]) -> None:
        rows = shutil.get_terminal_size((100, 40)).lines
        body = self.lines[-max(1, rows - len(footer) - 1):]
        out = "\x1b[2J\x1b[H" + "\r\n".join(body + [""] + footer)
        sys.stdout.write(out)
        sys.stdout.flush()


class FakeAgent:
    """State machine of one fake TUI. Times are epoch seconds (UTC)."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.ns = ns
        self.agent = ns.agent
        self.screen = Screen()
        self.typed = ""
        self.mode = "idle"          # idle | limited | auto_wait | menu | prompt | working
        self.work_until = 0.0
        self.reset = ns.reset_epoch
        self.ctrl_c = 0
        self.zone = ns.zone
        self.refused = 0

    # ----- rendering
    def menu_options(self) -> list[str]:
        """The rate-limit menu's options in display order (`--menu-upgrade-first`, `--menu-no-stop`)."""
        if self.ns.menu_no_stop:
            return ["Upgrade your plan", "Switch to usage credits"]
        if self.ns.menu_upgrade_first:
            return ["Upgrade your plan", "Stop and wait for limit to reset", "Switch to usage credits"]
        return ["Stop and wait for limit to reset", "Wait here, then continue automatically", "Upgrade your plan"]

    def footer(self) -> list[str]:
        if self.mode == "menu":
            opts = self.menu_options()
            lines = [" What do you want to do?", ""]
            for i, opt in enumerate(opts, 1):
                lines.append(f" {'❯' if i == 1 else ' '} {i}. {opt}")
            return lines + ["", " Enter to confirm · Esc to cancel"]
        if self.mode == "prompt":
            return ["╭" + "─" * BOX_WIDTH + "╮", "│ Bash command".ljust(BOX_WIDTH + 1) + "│",
                    "│   rm -rf build && make".ljust(BOX_WIDTH + 1) + "│", "│".ljust(BOX_WIDTH + 1) + "│",
                    "│ Do you want to proceed?".ljust(BOX_WIDTH + 1) + "│",
                    "│ ❯ 1. Yes".ljust(BOX_WIDTH + 1) + "│",
                    "│   2. No, and tell Claude what to do differently (esc)".ljust(BOX_WIDTH + 1) + "│",
                    "╰" + "─" * BOX_WIDTH + "╯"]
        if self.agent == "codex":
            composer = f"› {self.typed}" if self.typed else "› Ask Codex to do anything"
            hint = "  esc to interrupt" if self.mode == "working" else "  gpt-5-codex medium · 62% context left · ~/src/app"
            spin = ["• Working (3s • esc to interrupt)"] if self.mode == "working" else []
            return spin + [composer, "", hint]
        spin = [f"✶ Composing… ({int(time.time() % 60)}s · ↓ 1.2k tokens · esc to interrupt)"] if self.mode == "working" else []
        box = ["╭" + "─" * BOX_WIDTH + "╮", ("│ > " + self.typed).ljust(BOX_WIDTH + 1)[:BOX_WIDTH + 1] + "│",
               "╰" + "─" * BOX_WIDTH + "╯"]
        return spin + box + ["  ? for shortcuts"]

    def redraw(self) -> None:
        self.screen.draw(self.footer())

    def say(self, *lines: str) -> None:
        self.screen.lines.extend(lines)

    # ----- behaviour
    def hit_limit(self) -> None:
        _log("limit", reset=self.reset)
        self.say(*limit_lines(self.agent, self.reset, self.zone, datetime.now(timezone.utc),
                              bool(self.ns.auto_continue), bool(self.ns.relative)))
        if self.agent == "codex":
            self.mode = "limited"
        elif self.ns.auto_continue:
            self.mode = "auto_wait"
        else:
            self.mode = "menu" if self.ns.menu else "limited"
        self.redraw()

    def start_work(self, reason: str) -> None:
        self.mode = "working"
        self.work_until = time.time() + self.ns.work_seconds
        _log("working", reason=reason)
        self.say("", "⏺ Continuing the task where I left off." if self.agent != "codex" else "• Continuing the task.")
        self.redraw()

    def login_token(self) -> str | None:
        """The access token of the login file in $HOME (None when there is none)."""
        rel = ".codex/auth.json" if self.agent == "codex" else ".claude/.credentials.json"
        try:
            with open(os.path.join(os.environ.get("HOME", "/nonexistent"), rel)) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        if self.agent == "codex":
            return (data.get("tokens") or {}).get("access_token")
        return (data.get("claudeAiOauth") or {}).get("accessToken")

    def submit(self) -> None:
        line, self.typed = self.typed, ""
        token = self.login_token() if self.ns.limited_token else None
        _log("submit", text=line, token=token)
        if self.agent == "codex":
            self.say("", f"› {line}")
        else:
            self.say("", f"> {line}")
        if self.ns.limited_token and token is None:
            self.say("● Login expired · Please run /login")
            self.redraw()
        elif self.ns.limited_token and token != self.ns.limited_token:
            self.start_work("submitted on another account")
        elif time.time() >= self.reset and self.refused >= self.ns.refuse_after_reset:
            self.start_work("submitted after reset")
        else:
            if time.time() >= self.reset:
                self.refused += 1  # the provider still refuses after the printed reset (#20719)
            self.hit_limit()

    def key(self, ch: str) -> None:
        _log("key", key=ch if ch.isprintable() else repr(ch), mode=self.mode)
        if ch == "\x03":
            self.ctrl_c += 1
            if self.agent == "codex" and self.ctrl_c >= 2:
                self.quit_codex()
            return
        self.ctrl_c = 0
        if self.mode == "menu":
            options = [_MENU_KEYS[o] for o in self.menu_options()]
            if ch.isdigit() and 1 <= int(ch) <= len(options):
                choice = options[int(ch) - 1]
                _log("menu", choice=choice)
                if self.ns.menu_sticky:
                    return  # the key was taken, the menu stays open (a stuck or redrawn menu)
                if choice == "stop":
                    self.mode = "limited"
                else:
                    self.say(f"  (chose {choice})")
                    self.mode = "limited"
                self.redraw()
            return
        if self.mode == "prompt":
            return  # a permission prompt only takes a human's answer here
        if self.mode == "frozen":
            if ch in ("\r", "\n") and self.typed:
                self.submit()
            elif ch.isprintable():
                self.typed += ch
            return
        if self.mode == "working" and ch == "\x1b":
            self.mode = "idle"
            _log("interrupted")
            self.say("  ⎿  Interrupted by user")
            self.redraw()
            return
        if self.mode == "auto_wait":
            self.mode = "limited"  # typing cancels Claude's native wait
            self.say("● Automatic continue cancelled · /rate-limit-options to re-arm")
        if ch in ("\r", "\n"):
            if self.typed:
                self.submit()
            return
        if ch in ("\x7f", "\b"):
            self.typed = self.typed[:-1]
        elif ch == "\x1b":
            pass
        elif ch.isprintable():
            self.typed += ch
        self.redraw()

    def quit_codex(self) -> None:
        _log("exit")
        sys.stdout.write("\x1b[2J\x1b[H")
        sys.stdout.write("\r\nTo continue this session, run codex resume 0199a1b2-0000-4000-8000-000000000000\r\n")
        sys.stdout.flush()
        raise SystemExit(0)

    def tick(self) -> None:
        now = time.time()
        if self.mode == "working" and int(now) != getattr(self, "_spun", 0):
            self._spun = int(now)   # the spinner and its timer move every second, as in the real TUI
            self.redraw()
        if self.mode == "working" and now >= self.work_until:
            self.mode = "idle"
            self.say("", "⏺ Done: the parser is refactored and the tests pass.")
            self.redraw()
        if self.ns.limit_at and self.mode == "working" and now >= self.ns.limit_at and not getattr(self, "_hit", False):
            self._hit = True
            self.hit_limit()
        if self.mode == "auto_wait" and not self.ns.auto_continue_fails and now >= self.reset + self.ns.auto_continue_after:
            self.say("● Usage limit reset · Continuing automatically")
            self.start_work("native auto-continue")

    def run(self) -> None:
        self.say("╭" + "─" * BOX_WIDTH + "╮", "│ > Refactor the parser module and add tests".ljust(BOX_WIDTH + 1) + "│",
                 "╰" + "─" * BOX_WIDTH + "╯", "", "⏺ I'll start by reading the parser module.", "",
                 "⏺ Read(src/parser.py)", "  ⎿  Read 214 lines (ctrl+r to expand)") if self.agent != "codex" else \
            self.say("› Fix the failing test in parser_test.go", "", "• Ran go test ./...",
                     "  └ --- FAIL: TestParseHeader (0.00s)")
        if self.ns.resumed:
            _log("resumed")
        if self.ns.prompt:
            self.mode = "prompt"
            self.redraw()
        elif self.ns.start_working:
            self.start_work("initial task")
        elif self.ns.wrap_up:
            self.say("", "⏺ Approaching your 5-hour usage limit — Claude will wrap up the current step.")
            self.mode = "idle"
            self.redraw()
        elif self.ns.frozen:
            self.say("", "⏺ Bash(npm test)", "  ⎿  Running…")
            self.mode = "frozen"
            self.screen.draw([])
        elif self.ns.resumed and time.time() >= self.reset:
            self.hit_limit_shown_only()
        else:
            self.hit_limit()
        fd = sys.stdin.fileno()
        old = termios.tcgetattr(fd) if os.isatty(fd) else None
        if old is not None:
            tty.setraw(fd)
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    data = os.read(fd, 64).decode("utf-8", errors="replace")
                    if not data:
                        break
                    for ch in data:
                        self.key(ch)
                self.tick()
        finally:
            if old is not None:
                termios.tcsetattr(fd, termios.TCSADRAIN, old)

    def hit_limit_shown_only(self) -> None:
        """`codex resume --last` redraws the transcript with the old limit line, then an idle composer."""
        self.say(*limit_lines("codex", self.reset, self.zone, datetime.now(timezone.utc),
                              relative=bool(self.ns.relative)))
        self.mode = "limited"
        self.redraw()


def main(argv: list[str] | None = None) -> int:
    """Entry point: `python -m agentbox_sim.fake_agent AGENT [options]` (or a `codex` shim)."""
    p = argparse.ArgumentParser()
    p.add_argument("agent", choices=["claude-code", "codex"])
    p.add_argument("--reset-epoch", type=float, required=True, help="the usage reset instant, epoch seconds")
    p.add_argument("--zone", default="UTC", help="the agent's local zone")
    p.add_argument("--auto-continue", action="store_true", help="Claude Code: native wait at the limit")
    p.add_argument("--relative", action="store_true", help="Codex: print the wait ('try again in 2 minutes'), "
                   "not the clock")
    p.add_argument("--auto-continue-after", type=float, default=3.0, help="seconds after the reset it fires")
    p.add_argument("--auto-continue-fails", action="store_true", help="the native wait never fires")
    p.add_argument("--menu", action="store_true", help="Claude Code: open the rate-limit options menu")
    p.add_argument("--menu-upgrade-first", action="store_true", help="menu lists 'Upgrade your plan' first")
    p.add_argument("--menu-no-stop", action="store_true", help="menu without a 'Stop and wait' option")
    p.add_argument("--menu-sticky", action="store_true", help="the menu stays open after its number is pressed")
    p.add_argument("--refuse-after-reset", type=int, default=0,
                   help="the limit comes back (same line) on this many submits after the reset")
    p.add_argument("--prompt", action="store_true", help="open a permission prompt instead of hitting the limit")
    p.add_argument("--work-seconds", type=float, default=60.0, help="how long it works after continuing")
    p.add_argument("--start-working", action="store_true", help="start busy on a task (no limit line)")
    p.add_argument("--limit-at", type=float, default=0.0,
                   help="epoch seconds: while working, print the limit line at this instant")
    p.add_argument("--wrap-up", action="store_true", help="end the turn with the ~95 %% notice, no banner")
    p.add_argument("--frozen", action="store_true", help="hang mid-tool with no prompt and no limit line")
    p.add_argument("--limited-token", help="the access token whose account is limited: a submit on another "
                   "account's login (read from $HOME) works at once")
    p.add_argument("--resumed", action="store_true", help=argparse.SUPPRESS)
    ns, rest = p.parse_known_args(argv)
    ns.rest = rest  # arguments the real CLI would get (e.g. resume --last)
    if ns.rest[:1] == ["resume"]:
        ns.resumed = True
    _log("start", argv=ns.rest)
    FakeAgent(ns).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
