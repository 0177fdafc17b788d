"""Agent facts live in their adapters (issue 12 item 1): each adapter lists its structured sources (argv,
bound, parser) and its login file's argv; `service/boxfiles.py` only runs them, knows no agent, and treats
what comes back as untrusted (bounded, validated, problems naming the file)."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from controller.agents.adapter import STRUCTURED_MAX, AgentAdapter, StructuredSource, head_cut
from controller.agents.registry import ADAPTERS, get_adapter
from controller.service import boxfiles
from controller.service.boxfiles import BoxFileError, parse_source_output, read_structured

pytestmark = pytest.mark.unit

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)
STATUSLINE = json.dumps({"rate_limits": {"five_hour": {"used_percentage": 100, "resets_at": 1782914400}}})


@dataclass
class Res:
    stdout: str
    stderr: str = ""
    rc: int = 0


def _strings_outside_docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_boxfiles_holds_no_agent_fact():
    """No script, path, agent name or tmux command in the runner: they are the adapters' (and the
    terminal's) facts."""
    src = Path(boxfiles.__file__)
    strings = _strings_outside_docstrings(src)
    for word in ("$HOME", "claude", "codex", "statusline", "rollout", "transcript", "tmux", "sh", "head -c",
                 ".json"):
        assert not [s for s in strings if word in s.split() or (len(word) > 2 and word in s)], word


def test_every_structured_source_is_a_bounded_argv_with_a_parser():
    sources = [s for a in ADAPTERS.values() for s in a.structured_sources]
    assert {s.name for s in sources} == {"statusline", "transcript", "rollout"}
    for s in sources:
        assert isinstance(s, StructuredSource) and isinstance(s.argv, tuple)
        assert all(isinstance(word, str) for word in s.argv)
        assert s.argv[:2] == ("sh", "-c") and s.max_bytes == STRUCTURED_MAX == 65536
        assert head_cut(s.max_bytes) == "head -c 65537" and head_cut(s.max_bytes) in s.argv[2]
        assert callable(s.parse) and s.path.startswith("~/")


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_login_argv_carry_the_path_as_an_argument_never_in_the_script(agent: str):
    a = get_adapter(agent)
    for argv in (a.login_write_argv(), a.login_replace_argv(), a.login_remove_argv(), a.login_read_argv()):
        assert argv[:2] == ["sh", "-c"] and argv[-1] == a.login_file and a.login_file not in argv[2]
    notice = a.notice_argv("/dev/pts/3", "$(rm -rf ~) `x`")
    assert notice[-2:] == ["$(rm -rf ~) `x`", "/dev/pts/3"] and "rm" not in notice[2]


async def test_an_agent_without_a_login_file_gets_no_write():
    calls: list[list[str]] = []

    async def exec_fn(argv, stdin=None):
        calls.append(argv)
        return Res("")
    with pytest.raises(BoxFileError, match="shell has no login file"):
        await boxfiles.write_login(exec_fn, get_adapter("shell"), "{}")
    with pytest.raises(BoxFileError):
        await boxfiles.remove_login(exec_fn, get_adapter("shell"))
    assert calls == []


async def test_the_login_secret_key_comes_from_the_adapter_only():
    """The box credentials Secret's key is the adapter's: an agent without one gets no Secret under an
    invented name (before: the executor wrote ``credentials.json`` for any agent without a key)."""
    from types import SimpleNamespace

    from controller.agents.adapter import NoLoginFile
    from controller.service.executor import Executor

    assert get_adapter("claude-code").login_secret_key() == "credentials.json"
    assert get_adapter("codex").login_secret_key() == "auth.json"
    with pytest.raises(NoLoginFile, match="agent shell has no login Secret key"):
        get_adapter("shell").login_secret_key()
    secrets: list[dict] = []
    calls: list[list[str]] = []

    async def ensure_secret(body):
        secrets.append(body)

    async def exec_fn(argv, stdin=None):
        calls.append(argv)
        return Res("")
    rt = SimpleNamespace(kube=SimpleNamespace(ensure_secret=ensure_secret))
    for agent, key in (("shell", None), ("claude-code", "credentials.json")):
        ex = Executor(rt, "ns", "box", "uid-1", get_adapter(agent), SimpleNamespace(exec_fn=exec_fn),
                      lambda *a: None, None, None, {}, None, None)  # type: ignore[arg-type]
        if key is None:
            with pytest.raises(NoLoginFile):
                await ex.logins.put_login('{"claudeAiOauth": {}}')
            assert secrets == [] and calls == []
        else:
            await ex.logins.put_login('{"claudeAiOauth": {}}')
            assert list(secrets[-1]["data"]) == [key] and len(calls) == 1


async def test_print_notice_refuses_a_terminal_outside_dev_and_passes_the_text_as_an_argument():
    calls: list[list[str]] = []
    answers = iter([Res("/tmp/evil\n"), Res("/dev/pts/4\n"), Res("")])

    async def exec_fn(argv, stdin=None):
        calls.append(argv)
        return next(answers)
    adapter = get_adapter("claude-code")
    with pytest.raises(BoxFileError, match="no terminal"):
        await boxfiles.print_notice(exec_fn, adapter, "%1", "hello")
    await boxfiles.print_notice(exec_fn, adapter, "%1", "hello")
    assert calls[-1] == adapter.notice_argv("/dev/pts/4", "hello")


def _one(agent: str, name: str) -> StructuredSource:
    return next(s for s in get_adapter(agent).structured_sources if s.name == name)


@pytest.mark.parametrize("stdout,why", [
    ("1782900000\n" + "[" * 50000, "not a JSON object"),           # nesting deeper than the parser's stack
    ("9" * 40 + "\n" + STATUSLINE, "unreadable modification time"),  # an mtime beyond any date
    ("1782900000\nnot json", "not a JSON object"),
    ("1782900000\n[1]", "unreadable usage (statusline: expected an object"),
    ("1782900000\n" + json.dumps({"rate_limits": {"five_hour": {"used_percentage": "x"}}}),
     "unreadable usage (rate_limits.five_hour.used_percentage"),
])
def test_malformed_statusline_is_a_problem_naming_the_file_never_an_exception(stdout: str, why: str):
    problems: list[str] = []
    assert parse_source_output(_one("claude-code", "statusline"), 0, stdout, NOW, problems) is None
    assert len(problems) == 1 and problems[0].startswith("~/.agentbox/statusline.json: " + why)


def test_a_deeply_nested_rollout_line_is_a_problem_not_an_exception():
    problems: list[str] = []
    assert parse_source_output(_one("codex", "rollout"), 0, "[" * 50000, NOW, problems) is None
    assert problems == ["~/.codex/sessions/*/*/*/rollout-*.jsonl: the last token_count event is not JSON; ignored"]


def test_the_statusline_header_line_is_not_counted_in_the_bound_but_the_data_is():
    source = _one("claude-code", "statusline")
    body = STATUSLINE[:-1] + " " * (STRUCTURED_MAX - len(STATUSLINE)) + STATUSLINE[-1]
    assert len(body) == STRUCTURED_MAX
    assert parse_source_output(source, 0, f"1782900000\n{body}", NOW) is not None
    problems: list[str] = []
    assert parse_source_output(source, 0, f"1782900000\n {body}", NOW, problems) is None
    assert problems == ["~/.agentbox/statusline.json: larger than 65536 bytes; ignored"]


async def test_output_refused_by_the_exec_layer_is_a_problem_and_the_next_source_is_read():
    class TooLarge(Exception):
        reason = "output_too_large"
    line = (Path(__file__).parent / "fixtures" / "real-transcripts" / "claude-2.1.328-usage-limit.jsonl"
            ).read_text().splitlines()[0]

    async def exec_fn(argv, stdin=None):
        if argv == list(_one("claude-code", "statusline").argv):
            raise TooLarge()
        return Res(line + "\n")
    problems: list[str] = []
    usage, source = await read_structured(exec_fn, "claude-code", NOW, problems)
    assert source == "transcript" and usage is not None and usage.windows["five_hour"].utilization == 100.0
    assert problems == ["~/.agentbox/statusline.json: larger than 65536 bytes; ignored"]


async def test_an_agent_without_sources_reads_nothing():
    async def exec_fn(argv, stdin=None):  # pragma: no cover - must not be called
        raise AssertionError(argv)
    assert await read_structured(exec_fn, "opencode", NOW) == (None, "")
    assert await read_structured(exec_fn, "no-such-agent", NOW) == (None, "")


# ---------------------------------------------------------------------- the scripts, run by a real sh
def _sh_in(home: Path):
    async def exec_fn(argv: list[str], stdin: str | None = None) -> Res:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        return Res(out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), proc.returncode or 0)
    return exec_fn


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
async def test_login_file_scripts_in_a_real_shell(tmp_path: Path, agent: str):
    adapter: AgentAdapter = get_adapter(agent)
    run = _sh_in(tmp_path)
    path = tmp_path / (adapter.login_file or "")
    # replace only where a file exists: none yet
    assert (await run(adapter.login_replace_argv(), stdin="{}")).rc == 4 and not path.exists()
    await boxfiles.write_login(run, adapter, '{"a": 1}')
    assert path.read_text() == '{"a": 1}' and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (await run(adapter.login_read_argv())).stdout == '{"a": 1}'
    assert (await run(adapter.login_replace_argv(), stdin='{"b": 2}')).rc == 0 and path.read_text() == '{"b": 2}'
    await boxfiles.remove_login(run, adapter)
    assert not path.exists() and (await run(adapter.login_read_argv())).rc == 4


async def test_structured_scripts_in_a_real_shell(tmp_path: Path):
    run = _sh_in(tmp_path)
    assert await read_structured(run, "claude-code", NOW) == (None, "statusline")  # no files: no data
    status = tmp_path / ".agentbox" / "statusline.json"
    status.parent.mkdir()
    status.write_text(STATUSLINE)
    usage, source = await read_structured(run, "claude-code", NOW)
    assert source == "statusline" and usage is not None and usage.windows["five_hour"].utilization == 100
    assert usage.read_at is not None and abs(usage.read_at.timestamp() - status.stat().st_mtime) < 2
    rollout = tmp_path / ".codex" / "sessions" / "2026" / "07" / "01" / "rollout-1.jsonl"
    rollout.parent.mkdir(parents=True)
    event = {"type": "event_msg", "payload": {"type": "token_count", "rate_limits": {
        "primary": {"used_percent": 42.0, "window_minutes": 300, "resets_at": 1782914400}}}}
    rollout.write_text("\n".join([json.dumps({"type": "other"}), json.dumps(event), json.dumps({"type": "x"})]) + "\n")
    usage, source = await read_structured(run, "codex", NOW)
    assert source == "rollout" and usage is not None and usage.windows["five_hour"].utilization == 42.0
    rollout.write_text(json.dumps({**event, "pad": "x" * (STRUCTURED_MAX + 10)}) + "\n")
    problems: list[str] = []
    assert await read_structured(run, "codex", NOW, problems) == (None, "rollout")
    assert problems == ["~/.codex/sessions/*/*/*/rollout-*.jsonl: a token_count event larger than 65536 bytes; "
                        "ignored"]
