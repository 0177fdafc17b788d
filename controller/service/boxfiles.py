"""Running the agents' box-file commands through pod exec: the live login file, a notice printed in a tab,
and the structured usage files. Which file, which script, which bound and which parser are the agent
adapter's facts (:class:`controller.agents.adapter.AgentAdapter`, :class:`~controller.agents.adapter.StructuredSource`);
this module only runs them: what comes back is untrusted, bounded (a longer answer counts as no data) and
a problem message names the file, never its content. Every command is an argv list whose shell script is
a constant of the adapter; variable parts travel as arguments or stdin, never inside a script."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Awaitable, Callable

from controller.agents.adapter import STRUCTURED_MAX, AgentAdapter, NoLoginFile, SourceUnreadable, StructuredSource
from controller.agents.registry import ADAPTERS
from controller.domain.types import Usage
from controller.terminal.tmux import pane_tty_argv

__all__ = ["STRUCTURED_MAX", "BoxFileError", "ExecFn", "parse_source_output", "print_notice", "read_source",
           "read_sources", "read_structured", "remove_login", "write_login"]

ExecFn = Callable[..., Awaitable[Any]]
"""`await exec_fn(argv, stdin=None) -> result(stdout, stderr, rc)` in the box container."""


class BoxFileError(RuntimeError):
    """A command in the box failed (message: what and the rc only)."""


def _login_argv(argv: Callable[[], list[str]]) -> list[str]:
    try:
        return argv()
    except NoLoginFile as exc:
        raise BoxFileError(str(exc)) from None


async def write_login(exec_fn: ExecFn, adapter: AgentAdapter, login_text: str) -> None:
    """Replace the agent's login file in the box (its adapter's ``login_file``, e.g.
    ~/.claude/.credentials.json) with `login_text`, atomically, mode 0600.

    Raises:
        BoxFileError: the agent has no login file, or the write failed.
    """
    res = await exec_fn(_login_argv(adapter.login_write_argv), stdin=login_text)
    if res.rc != 0:
        raise BoxFileError(f"writing the {adapter.name} login file exited {res.rc}")


async def remove_login(exec_fn: ExecFn, adapter: AgentAdapter) -> None:
    """Remove the agent's login file from the box (the reserve stop).

    Raises:
        BoxFileError: the agent has no login file, or the removal failed.
    """
    res = await exec_fn(_login_argv(adapter.login_remove_argv))
    if res.rc != 0:
        raise BoxFileError(f"removing the {adapter.name} login file exited {res.rc}")


async def print_notice(exec_fn: ExecFn, adapter: AgentAdapter, pane_id: str, text: str) -> None:
    """Print `text` on a tab's terminal as a bold line of its own (:meth:`AgentAdapter.notice_argv`).

    Raises:
        BoxFileError: the pane has no terminal under /dev, or printing failed.
    """
    tty = await exec_fn(pane_tty_argv(pane_id))
    path = tty.stdout.strip()
    if tty.rc != 0 or not path.startswith("/dev/"):
        raise BoxFileError(f"no terminal for pane (rc {tty.rc})")
    res = await exec_fn(adapter.notice_argv(path, text))
    if res.rc != 0:
        raise BoxFileError(f"printing the notice exited {res.rc}")


def _problem(problems: list[str] | None, source: StructuredSource, why: str) -> None:
    if problems is not None:
        problems.append(f"{source.path}: {why}; ignored")


def parse_source_output(source: StructuredSource, rc: int, stdout: str, now: datetime,
                        problems: list[str] | None = None) -> Usage | None:
    """Usage from what ``source.argv`` printed in the box (``rc``, ``stdout``), however it was run.

    A non-zero ``rc`` (no such file) is no data. Data (after ``source.header_lines``) above
    ``source.max_bytes`` bytes, whatever the box's own ``head`` did, is no data and a problem; so is data the
    source's parser calls malformed. Problems are appended to ``problems`` as "<file>: <why>; ignored".
    """
    if rc != 0:
        return None
    body = stdout
    for _ in range(source.header_lines):
        body = body.partition("\n")[2]
    if len(body.encode("utf-8", "replace")) > source.max_bytes:
        _problem(problems, source, source.too_large())
        return None
    try:
        return source.parse(stdout, now)
    except SourceUnreadable as exc:
        _problem(problems, source, str(exc))
        return None


async def read_source(exec_fn: ExecFn, source: StructuredSource, now: datetime,
                      problems: list[str] | None = None) -> Usage | None:
    """Run ``source.argv`` in the box and parse its output (:func:`parse_source_output`). An exec refused
    for its output size (``reason == "output_too_large"``: the box's ``head`` did not cut it) is no data
    and a problem.

    Raises:
        Whatever ``exec_fn`` raises otherwise (transport errors, NotOwned).
    """
    try:
        res = await exec_fn(list(source.argv))
    except Exception as exc:
        if getattr(exc, "reason", None) == "output_too_large":
            _problem(problems, source, f"larger than {source.max_bytes} bytes")
            return None
        raise
    return parse_source_output(source, res.rc, res.stdout, now, problems)


async def read_sources(exec_fn: ExecFn, sources: Sequence[StructuredSource], now: datetime,
                       problems: list[str] | None = None) -> tuple[Usage | None, str]:
    """(usage or None, source name) from ``sources`` in order, first hit wins; when none yields usage,
    (None, the first source's name) or (None, "") without sources.

    Raises:
        As :func:`read_source`.
    """
    for source in sources:
        usage = await read_source(exec_fn, source, now, problems)
        if usage is not None:
            return usage, source.name
    return None, sources[0].name if sources else ""


async def read_structured(exec_fn: ExecFn, agent: str, now: datetime,
                          problems: list[str] | None = None) -> tuple[Usage | None, str]:
    """The agent's own machine-readable usage from the box: (usage or None, source name), from the sources
    its adapter lists (:attr:`controller.agents.adapter.AgentAdapter.structured_sources`), first hit wins
    (:func:`read_sources`). An unknown agent has none. Unparseable or oversized data counts as none; when
    `problems` is given, a message naming the file is appended for each such file.

    Raises:
        As :func:`read_source`.
    """
    adapter = ADAPTERS.get(agent)
    return await read_sources(exec_fn, adapter.structured_sources if adapter else (), now, problems)
