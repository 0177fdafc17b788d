"""`agentbox-controller detect`: say what a pasted tab screen means, as one JSON object.

    agentbox-controller detect --agent {claude-code,codex,...} [--now ISO] [--tz ZONE]
                               [--pattern REGEX ...] [FILE|-]

stdout: ``Detection.to_json()`` on one line, e.g. ``{"state": "rate_limited", "kind": "usage",
"resets_at": "2026-02-04T03:00:00Z", ...}`` (UTC). Errors: one line on stderr; exit 2 for bad
arguments (unreadable file, naive/invalid --now, invalid --pattern), 0 otherwise; with ``--exit-code``
the state also sets the exit status (``EXIT_BY_STATE``: 0 working or idle, 10 rate_limited,
11 awaiting_input, 12 unknown) for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any

from controller.agents.registry import PROFILES, UnknownAgent, detect
from controller.domain.signals import merge
from controller.redact import redact
from controller.domain.types import Usage
from controller.domain.detection import InvalidPattern, compile_user_pattern

__all__ = ["add_detect_parser", "run_detect"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
# `detect --exit-code`: the exit status says the state (above 9, clear of argparse's 2 and Python's 1).
EXIT_BY_STATE = {"working": 0, "idle": 0, "rate_limited": 10, "awaiting_input": 11, "unknown": 12}


def add_detect_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``detect`` sub-command to an ``argparse`` subparsers object; sets ``func=run_detect``."""
    p = subparsers.add_parser(
        "detect",
        help="detect the state of a pasted agent screen (prints one JSON object)",
        description="Read a tab screen (tmux capture-pane -p text) and print what it means as JSON.",
    )
    p.add_argument("--agent", required=True, choices=sorted(PROFILES), help="agent CLI that drew the screen")
    p.add_argument("--now", default=None,
                   help="instant the screen was seen, ISO 8601 with offset or Z (default: the current time)")
    p.add_argument("--tz", default=None,
                   help="the box's IANA zone for lines that print none (default: $TZ, else UTC)")
    p.add_argument("--pattern", action="append", default=[], metavar="REGEX",
                   help="extra user pattern (named groups: epoch, year, month, day, hour, minute, ampm, "
                        "zone, rel_days, rel_hours, rel_minutes); repeatable")
    p.add_argument("--exit-code", action="store_true",
                   help="exit with the state: 0 working or idle, 10 rate_limited, 11 awaiting_input, 12 unknown "
                        "(2 stays bad input)")
    p.add_argument("--explain", action="store_true",
                   help="add \"explain\": which family matched, which time expression was parsed, why an older "
                        "limit line was judged history")
    p.add_argument("file", nargs="?", default="-", help="screen file, or - for stdin (default)")
    p.set_defaults(func=run_detect)
    return p


def _parse_now(text: str | None) -> datetime:
    if not text:
        return datetime.now(timezone.utc)
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("needs an offset or Z (e.g. 2026-05-01T10:00:00Z)")
    return value


def run_detect(ns: argparse.Namespace) -> int:
    """Run ``detect`` for parsed arguments ``ns`` (agent, now, tz, pattern, file).

    Prints one JSON object (``Detection.to_json()``, instants in UTC) to stdout.

    Returns:
        0 on success (with ``ns.exit_code``: ``EXIT_BY_STATE[state]``); 2 for an unknown agent, an unreadable file, a bad ``--now`` or an invalid
        ``--pattern`` (one line on stderr).
    """
    try:
        now = _parse_now(getattr(ns, "now", None))
    except ValueError as exc:
        print(f"detect: --now: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    tz = getattr(ns, "tz", None) or os.environ.get("TZ") or "UTC"
    try:
        from zoneinfo import ZoneInfo

        ZoneInfo(tz)
    except (ValueError, KeyError, OSError):
        print(f"detect: --tz: unknown time zone {tz!r} (an IANA name such as Europe/Paris)", file=sys.stderr)
        return EXIT_BAD_INPUT
    patterns = []
    for i, text in enumerate(getattr(ns, "pattern", None) or []):
        try:
            patterns.append(compile_user_pattern(text, field_path=f"--pattern[{i}]"))
        except InvalidPattern as exc:
            print(f"detect: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    path = getattr(ns, "file", "-") or "-"
    try:
        if path == "-":
            screen = sys.stdin.read()
        else:
            with open(path, encoding="utf-8", errors="replace") as fh:
                screen = fh.read()
    except OSError as exc:
        print(f"detect: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    trace: list[str] | None = [] if getattr(ns, "explain", False) else None
    try:
        result = detect(ns.agent, screen, now, tz, patterns, trace)
    except UnknownAgent as exc:
        print(f"detect: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    structured = structured_usage(screen, now)
    if structured is not None:
        result = merge(result, structured[0], structured[1], now)
        if trace is not None:
            trace.append(f"structured usage from {structured[1]} merged: "
                         + ", ".join(f"{w.name} {w.utilization:g}%" for w in structured[0].windows.values()))
    out = result.to_json()
    if out.get("evidence"):
        out["evidence"] = redact(out["evidence"])  # this output gets pasted into bug reports
    if trace is not None:
        out["explain"] = [redact(line) for line in trace] + [
            f"verdict: {out['state']}" + (f", {out['kind']}" if out.get("kind") else "")
            + (f", resets {out['resets_at']}" if out.get("resets_at") else "")
            + (", the agent's native wait is armed (the controller types nothing)" if out.get("auto_continue") else "")]
    print(json.dumps(out, ensure_ascii=False))
    return EXIT_BY_STATE.get(out["state"], EXIT_OK) if getattr(ns, "exit_code", False) else EXIT_OK


def structured_usage(text: str, now: datetime) -> tuple[Usage, str] | None:
    """Machine-readable usage found in pasted output: Claude Code `--output-format stream-json`
    `rate_limit_event` lines (every window they carry; a rejected one makes its window 100 %) or Codex rollout `token_count`
    lines. The last one wins. Returns (usage, source) or None."""
    from controller.agents.usage_files import parse_rate_limit_event_usage, parse_token_count
    from controller.domain.usagejson import UsageParseError

    found: tuple[Usage, str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        try:
            if obj.get("type") == "rate_limit_event":
                # every window of the event (unifiedWindows); the rejected one at 100 %
                _limited, usage = parse_rate_limit_event_usage(obj, now)
                if usage.windows:
                    found = (usage, "stream-json")
            elif "token_count" in line:
                usage = parse_token_count(obj)
                if usage.windows:
                    found = (usage, "rollout")
        except (UsageParseError, AttributeError):
            continue
    return found
