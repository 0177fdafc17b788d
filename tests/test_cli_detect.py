"""The `agentbox-controller detect` command: a pasted screen in, one JSON object out."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli_detect import add_detect_parser, run_detect

pytestmark = pytest.mark.unit

SCREEN = """\
⏺ Read(src/parser.py)
  ⎿  Read 214 lines (ctrl+r to expand)

  ⎿  You've hit your limit · resets 10pm (America/New_York)

╭──────────────────────────────────────────────────────────────╮
│ > half typed                                                 │
╰──────────────────────────────────────────────────────────────╯
  ? for shortcuts
"""


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentbox-controller")
    add_detect_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["detect", *argv])


def test_detect_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    screen = tmp_path / "screen.txt"
    screen.write_text(SCREEN, encoding="utf-8")
    ns = _parse(["--agent", "claude-code", "--now", "2026-02-03T20:00:00Z", "--tz", "UTC", str(screen)])
    assert ns.func is run_detect
    assert run_detect(ns) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    result = json.loads(out)
    assert result["state"] == "rate_limited"
    assert result["kind"] == "usage"
    assert result["resets_at"] == "2026-02-04T03:00:00Z"
    assert result["prompt_text"] == "half typed"
    assert result["detected_by"] == "pattern:claude-code/hit-your-limit"


def test_detect_stdin_codex_box_zone(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    screen = "■ You've hit your usage limit. Try again at 2:57 PM.\n\n› Ask Codex to do anything\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(screen))
    assert run_detect(_parse(["--agent", "codex", "--now", "2026-04-05T10:00:00+00:00", "--tz", "America/New_York"])) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["resets_at"] == "2026-04-05T18:57:00Z"
    assert result["prompt_text"] == ""


def test_detect_user_pattern(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("quota hit until 17:30\n"))
    ns = _parse(["--agent", "shell", "--now", "2026-05-01T10:00:00Z",
                 "--pattern", r"quota hit until (?P<hour>\d+):(?P<minute>\d\d)"])
    assert run_detect(ns) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["state"] == "rate_limited" and result["resets_at"] == "2026-05-01T17:30:00Z"


@pytest.mark.parametrize("argv,message", [
    (["--agent", "codex", "--now", "2026-05-01T10:00:00"], "--now"),
    (["--agent", "codex", "--now", "yesterday"], "--now"),
    (["--agent", "codex", "--pattern", "(oops"], "--pattern[0]"),
    (["--agent", "codex", "/nonexistent/screen.txt"], "cannot read"),
])
def test_detect_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_detect(_parse(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


def test_detect_unknown_agent_is_refused_by_argparse() -> None:
    with pytest.raises(SystemExit):
        _parse(["--agent", "aider"])


def test_detect_subprocess(tmp_path: Path) -> None:
    code = (
        "import sys; from controller.cli_detect import run_detect, add_detect_parser; import argparse;"
        "p = argparse.ArgumentParser(); add_detect_parser(p.add_subparsers());"
        "sys.exit(run_detect(p.parse_args(sys.argv[1:])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "detect", "--agent", "claude-code", "--now", "2026-02-03T20:00:00Z", "-"],
        input=SCREEN, capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["resets_at"] == "2026-02-04T03:00:00Z"


def test_detect_reads_stream_json_rate_limit_events(capsys):
    """`claude -p --output-format stream-json` output pasted into `detect`: the rejected
    rate_limit_event (corpus E01) gives the exact reset; a warning event (E02) does not limit."""
    import argparse
    import io
    import json as _json
    import sys as _sys

    from controller.cli_detect import run_detect

    corpus = Path(__file__).parent / "fixtures" / "corpus" / "usage-payloads.jsonl"
    events = {c["id"]: c for c in map(_json.loads, corpus.read_text().splitlines()) if c["kind"] == "rate_limit_event"}
    for cid, limited in (("E01", True), ("E02", False)):
        stdin = io.StringIO("claude -p output\n" + _json.dumps(events[cid]["payload"]) + "\n")
        old, _sys.stdin = _sys.stdin, stdin
        try:
            ns = argparse.Namespace(agent="claude-code", now="2026-05-12T02:00:00Z", tz="UTC", pattern=[], file="-")
            assert run_detect(ns) == 0
        finally:
            _sys.stdin = old
        out = _json.loads(capsys.readouterr().out)
        if limited:
            assert out["state"] == "rate_limited" and out["detected_by"] == "structured:stream-json"
            assert out["resets_at"] == events[cid]["expect"]["resets_at"]
        else:
            assert out["state"] != "rate_limited"


def test_detect_refuses_an_unknown_zone_and_redacts_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from controller.cli_detect import run_detect

    screen = tmp_path / "s.txt"
    screen.write_text("  ⎿  You've hit your 5-hour limit · resets 5:13pm · key sk-ant-oat01-abcdefghijklmnopqrstuv\n")
    bad = argparse.Namespace(agent="claude-code", now="2026-07-01T12:00:00Z", tz="Europe/Pariss", pattern=[],
                             file=str(screen))
    assert run_detect(bad) == 2
    assert "unknown time zone 'Europe/Pariss'" in capsys.readouterr().err
    good = argparse.Namespace(**{**vars(bad), "tz": "Europe/Paris"})
    assert run_detect(good) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["resets_at"] == "2026-07-01T15:13:00Z"
    assert "sk-ant" not in out["evidence"] and "[redacted]" in out["evidence"]


def test_detect_explain_names_family_time_expression_and_history(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """issue 13: `detect --explain` says which family matched, which time expression it read, and why an
    older limit line is history, so an operator sees why a new wording was or was not understood."""
    from controller.cli_detect import run_detect
    import argparse

    screen = tmp_path / "s.txt"
    screen.write_text(
        "■ You’ve hit your usage limit. Try again at 3:05 PM.\n\n› continue\n\n"
        "• Working (4s • esc to interrupt)\n\n› Ask Codex to do anything\n\n  gpt-5.6-sol medium · ~/src/app\n")
    ns = argparse.Namespace(agent="codex", now="2026-05-01T15:06:00Z", tz="UTC", pattern=[], file=str(screen),
                            explain=True)
    assert run_detect(ns) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "working"
    text = "\n".join(out["explain"])
    assert "family usage (pattern:codex/hit-usage-limit)" in text
    assert 'time expression "Try again at 3:05 PM." -> 2026-05-01T15:05:00Z' in text
    assert "is history: a message was sent after it" in text
    assert out["explain"][-1].startswith("verdict: working")

    screen.write_text("● Usage limit reached · set to continue automatically at 7:13am\n"
                      "  key sk-ant-oat01-abcdefghijklmnopqrstuv\n\n❯ \n")
    ns = argparse.Namespace(agent="claude-code", now="2026-12-01T06:50:00Z", tz="UTC", pattern=[], file=str(screen),
                            explain=True)
    assert run_detect(ns) == 0
    out = json.loads(capsys.readouterr().out)
    text = "\n".join(out["explain"])
    assert "family auto_continue (pattern:claude-code/native-wait)" in text
    assert "native wait is armed" in text
    assert "sk-ant-oat01-abcdefghijklmnopqrstuv" not in text  # screen text in the explanation is redacted

    ns.explain = False
    assert run_detect(ns) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)


FAMILIES = Path(__file__).parent / "fixtures" / "families" / "limit-screens.jsonl"


@pytest.mark.parametrize("case_id,verdict_line", [
    ("F1-01", "family: claude-model-fallback → working"),
    ("F1-02", "family: claude-model-fallback (under load) → working"),
    ("F1-03", "family: claude-retrying → working"),
    ("F2-04", "family: codex-usage-limit (typographic quotes/spaces normalised) → rate_limited"),
    ("F3-01", "family: codex-usage-limit (wrapped line joined: 2 rows; typographic quotes/spaces normalised)"
              " → rate_limited"),
    ("F4-02", "family: claude-usage-limit (finished/background rows are not activity: "),
    ("F5-01", "family: codex-spend-cap (the limit menu (a popup in front of the input) has no 'stop and wait' "
              "option: left to a human) → rate_limited"),
])
def test_detect_explain_names_the_family_that_decided(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      case_id: str, verdict_line: str) -> None:
    """issue 21: `detect --explain` names the family and the rule that decided (a joined wrap, normalised
    quotes, rows that are not activity, a fallback that keeps working), one line before the verdict."""
    case = next(json.loads(line) for line in FAMILIES.read_text(encoding="utf-8").splitlines()
                if json.loads(line)["id"] == case_id)
    screen = tmp_path / "s.txt"
    screen.write_text(case["screen"], encoding="utf-8")
    ns = argparse.Namespace(agent=case["agent"], now=case["now"], tz=case["tz"], pattern=[], file=str(screen),
                            explain=True)
    assert run_detect(ns) == 0
    out = json.loads(capsys.readouterr().out)
    family = [line for line in out["explain"] if line.startswith("family: ")]
    assert len(family) == 1 and family[0].startswith(verdict_line), out["explain"]
    assert out["explain"][-1].startswith(f"verdict: {case['expect']['state']}"), out["explain"]
