"""Files and lines in the box pod, through pod exec: the agent's live login file and a notice
printed in a tab. Every command is an argv list whose shell scripts are constants; variable parts
(paths from the agent adapter, the notice text, the login on stdin) travel as arguments or stdin,
never inside a script."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from controller.agents.adapter import AgentAdapter
from controller.agents.registry import ADAPTERS
from controller.domain.types import Usage

ExecFn = Callable[..., Awaitable[Any]]
"""`await exec_fn(argv, stdin=None) -> result(stdout, stderr, rc)` in the box container."""

# Write stdin to $HOME/<path> atomically (mode 0600): the agent never reads a half-written file.
_WRITE = ('umask 077; f="$HOME/$1"; mkdir -p "$(dirname "$f")" && cat > "$f.agentbox-tmp" '
          '&& mv -f "$f.agentbox-tmp" "$f"')
_REMOVE = 'rm -f -- "$HOME/$1"'
# Print a line on a pane's terminal (shown to the human; not input to the agent).
_NOTICE = 'printf "\\r\\n\\033[1m%s\\033[0m\\r\\n" "$1" > "$2"'


class BoxFileError(RuntimeError):
    """A command in the box failed (message: what and the rc only)."""


def _home_relative(adapter: AgentAdapter) -> str:
    if not adapter.login_file:
        raise BoxFileError(f"agent {adapter.name} has no login file path")
    return adapter.login_file


async def write_login(exec_fn: ExecFn, adapter: AgentAdapter, login_text: str) -> None:
    """Replace the agent's login file in the box (e.g. ~/.claude/.credentials.json) with `login_text`.

    Raises:
        BoxFileError: the write failed.
    """
    res = await exec_fn(["sh", "-c", _WRITE, "sh", _home_relative(adapter)], stdin=login_text)
    if res.rc != 0:
        raise BoxFileError(f"writing the {adapter.name} login file exited {res.rc}")


async def remove_login(exec_fn: ExecFn, adapter: AgentAdapter) -> None:
    """Remove the agent's login file from the box (the reserve stop)."""
    res = await exec_fn(["sh", "-c", _REMOVE, "sh", _home_relative(adapter)])
    if res.rc != 0:
        raise BoxFileError(f"removing the {adapter.name} login file exited {res.rc}")


async def print_notice(exec_fn: ExecFn, pane_id: str, text: str) -> None:
    """Print `text` on a tab's terminal as a bold line of its own."""
    tty = await exec_fn(["tmux", "display-message", "-p", "-t", pane_id, "#{pane_tty}"])
    path = tty.stdout.strip()
    if tty.rc != 0 or not path.startswith("/dev/"):
        raise BoxFileError(f"no terminal for pane (rc {tty.rc})")
    res = await exec_fn(["sh", "-c", _NOTICE, "sh", text, path])
    if res.rc != 0:
        raise BoxFileError(f"printing the notice exited {res.rc}")


# Box files are untrusted and may be huge (a 32 MiB line): every read is cut in the box to one byte
# more than STRUCTURED_MAX, and a longer answer counts as no data. The exec layer bounds the output too
# (exec_max_output_bytes), in case the box's own `head` does not.
STRUCTURED_MAX = 65536
"""Longest statusline file, rollout line or transcript line read from a box (bytes)."""

# The statusline helper of the box image saves Claude Code's statusline stdin here.
STATUSLINE_PATH = ".agentbox/statusline.json"
_STATUSLINE = 'f="$HOME/$1"; [ -f "$f" ] || exit 3; stat -c %Y "$f" && head -c 65537 "$f"'
# The newest Codex rollout file's last token_count event, from the file's last 4 MiB.
_ROLLOUT = ('f=$(ls -t "$HOME"/.codex/sessions/*/*/*/rollout-*.jsonl 2>/dev/null | head -n 1); '
            '[ -n "$f" ] || exit 3; tail -c 4194304 "$f" | grep -F \'"token_count"\' | tail -n 1 | head -c 65537')


# The newest Claude Code transcript's API error entries (a usage-limit 429 is recorded with
# `apiErrorParams.rate_limit_info`, the shape of stream-json's rate_limit_event; Claude Code 2.1.328).
_TRANSCRIPT = ('f=$(ls -t "$HOME"/.claude/projects/*/*.jsonl 2>/dev/null | head -n 1); '
               '[ -n "$f" ] || exit 3; tail -c 4194304 "$f" | tail -n 400 | grep -F \'"isApiErrorMessage":true\' '
               '| tail -n 1 | head -c 65537')


def _fits(text: str) -> bool:
    return len(text.encode("utf-8", "replace")) <= STRUCTURED_MAX


def transcript_usage(line: str, read_at: datetime) -> Usage | None:
    """Usage from one Claude Code transcript API-error entry: a rejected `rate_limit_info` makes
    its window 100 % until `resetsAt`; anything else is no data."""
    from dataclasses import replace

    from controller.agents.usage_files import parse_rate_limit_event
    from controller.domain.usagejson import UsageParseError

    try:
        entry = json.loads(line)
        info = (entry.get("apiErrorParams") or {}).get("rate_limit_info") or entry.get("quotaLimits")
        if not isinstance(info, dict):
            return None
        limited, window = parse_rate_limit_event({"type": "rate_limit_event", "rate_limit_info": info})
    except (ValueError, AttributeError, RecursionError, UsageParseError):
        return None
    if not limited:
        return None
    return Usage({window.name: replace(window, utilization=max(window.utilization, 100.0))}, read_at=read_at)


async def read_structured(exec_fn: ExecFn, agent: str, now: datetime,
                          problems: list[str] | None = None) -> tuple[Usage | None, str]:
    """The agent's own machine-readable usage from the box: (usage or None, source name), from the sources
    its adapter lists (:attr:`controller.agents.adapter.AgentAdapter.structured_sources`), first hit wins.

    Claude Code: the statusline input saved by the box's statusline helper (`rate_limits`,
    Claude Code 2.1.x; only when a window is used up), then its newest transcript's API-error entry.
    Codex: the last `token_count` event of the newest rollout file
    (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`, Codex CLI 0.1xx). Unparseable or oversized data
    counts as none; when `problems` is given, a message naming the file is appended for each such file.
    """
    from controller.agents.usage_files import parse_statusline, parse_token_count
    from controller.domain.usagejson import UsageParseError

    def bad(path: str, why: str) -> None:
        if problems is not None:
            problems.append(f"{path}: {why}; ignored")

    async def run(argv: list[str], path: str) -> Any:
        try:
            return await exec_fn(argv)
        except Exception as exc:
            if getattr(exc, "reason", None) == "output_too_large":  # the box's `head` did not cut it
                bad(path, f"larger than {STRUCTURED_MAX} bytes")
                return None
            raise

    async def statusline() -> Usage | None:
        """Claude Code's statusline input: counts only when a window is used up."""
        path = f"~/{STATUSLINE_PATH}"
        res = await run(["sh", "-c", _STATUSLINE, "sh", STATUSLINE_PATH], path)
        if res is None or res.rc != 0:
            return None
        if not _fits(res.stdout.partition("\n")[2]):
            bad(path, f"larger than {STRUCTURED_MAX} bytes")
            return None
        first, _, rest = res.stdout.partition("\n")
        try:
            read_at = datetime.fromtimestamp(int(first.strip()), timezone.utc)
            usage = parse_statusline(json.loads(rest), read_at)
            if any(w.utilization >= 100 for w in usage.windows.values()):
                return usage
        except UsageParseError as exc:  # a ValueError too: first
            bad(path, f"unreadable usage ({exc})")
        except ValueError:
            bad(path, "not a JSON object")
        return None

    async def transcript() -> Usage | None:
        """Claude Code's newest transcript API-error entry."""
        path = "~/.claude/projects/*/*.jsonl"
        res = await run(["sh", "-c", _TRANSCRIPT, "sh"], path)
        if res is None or res.rc != 0 or not res.stdout.strip():
            return None
        if not _fits(res.stdout):
            bad(path, f"an API error entry larger than {STRUCTURED_MAX} bytes")
            return None
        return transcript_usage(res.stdout.strip().splitlines()[-1], now)

    async def rollout() -> Usage | None:
        """Codex's last token_count event of its newest rollout."""
        path = "~/.codex/sessions/*/*/*/rollout-*.jsonl"
        res = await run(["sh", "-c", _ROLLOUT, "sh"], path)
        if res is None or res.rc != 0 or not res.stdout.strip():
            return None
        if not _fits(res.stdout):
            bad(path, f"a token_count event larger than {STRUCTURED_MAX} bytes")
            return None
        try:
            return parse_token_count(json.loads(res.stdout.strip().splitlines()[-1]))
        except UsageParseError as exc:  # a ValueError too: first
            bad(path, f"unreadable usage ({exc})")
        except ValueError:
            bad(path, "the last token_count event is not JSON")
        return None

    readers = {"statusline": statusline, "transcript": transcript, "rollout": rollout}
    adapter = ADAPTERS.get(agent)
    sources = adapter.structured_sources if adapter else ()
    for source in sources:
        usage = await readers[source]()
        if usage is not None:
            return usage, source
    return None, sources[0] if sources else ""
