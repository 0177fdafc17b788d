"""The `agentbox-controller` command line: `--version`, `crds --out -`, `run` without a cluster or with a bad
setting (one line, an exit code, no traceback), `--log-format`, and the settings it reads."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from controller import __version__
from controller.__main__ import EXIT_NO_CLUSTER, EXIT_USAGE, build_parser
from controller.crdgen import render_crds
from controller.settings import Settings, describe_error

pytestmark = pytest.mark.unit

CLI = [sys.executable, "-m", "controller"]


def _cli(argv: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTBOX_", "KUBERNETES_SERVICE"))}
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})},
                          cwd=Path(__file__).resolve().parents[1])


def test_version() -> None:
    out = _cli(["--version"])
    assert out.returncode == 0 and out.stdout.strip() == f"agentbox-controller {__version__}"


def test_crds_to_stdout_is_one_stream_and_makes_no_folder(tmp_path: Path) -> None:
    out = subprocess.run([*CLI, "crds", "--out", "-"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert docs == list(render_crds().values())
    assert not (tmp_path / "-").exists() and list(tmp_path.iterdir()) == []


def test_run_without_a_kubeconfig_fails_in_one_line(tmp_path: Path) -> None:
    out = _cli(["run"], env={"KUBECONFIG": str(tmp_path / "absent"), "HOME": str(tmp_path)})
    assert out.returncode == EXIT_NO_CLUSTER
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("run: no cluster:"), out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_run_with_an_unreachable_api_server_fails_in_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "secret-token-value"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    out = _cli(["run"], env={"KUBECONFIG": str(kubeconfig)})
    assert out.returncode == EXIT_NO_CLUSTER
    assert out.stderr == "run: no cluster: the API server at https://127.0.0.1:1 does not answer (MaxRetryError)\n"
    assert "secret-token-value" not in out.stderr


def test_run_with_a_bad_setting_names_the_variable() -> None:
    out = _cli(["run"], env={"AGENTBOX_SCAN_INTERVAL_S": "0", "KUBECONFIG": "/nonexistent"})
    assert out.returncode == EXIT_USAGE
    assert out.stderr == "run: bad setting: AGENTBOX_SCAN_INTERVAL_S: Input should be greater than 0 (got '0')\n"


def test_settings_come_from_the_environment_through_pydantic_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBOX_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("AGENTBOX_WEBHOOK_URL_FILE", "/etc/agentbox-webhook/url")  # notify.py's, not ours
    monkeypatch.setenv("AGENTBOX_NAMESPACE", "team-a")  # the removed setting: ignored, not an error
    assert Settings().max_attempts == 3 and Settings.from_env().max_attempts == 3
    # A given mapping replaces the process environment entirely.
    given = Settings.from_env({"AGENTBOX_SCAN_INTERVAL_S": "2.5"})
    assert given.scan_interval_s == 2.5 and given.max_attempts == Settings.model_fields["max_attempts"].default
    assert "namespace" not in Settings.model_fields
    with pytest.raises(ValidationError) as err:
        Settings.from_env({"AGENTBOX_MAX_ATTEMPTS": "many", "AGENTBOX_USAGE_STALE_S": "-1"})
    line = describe_error(err.value)
    assert line.startswith("AGENTBOX_MAX_ATTEMPTS: ") and "; AGENTBOX_USAGE_STALE_S: " in line


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_log_format(fmt: str) -> None:
    """`run --log-format` configures kopf's own formatter: JSON lines carry the object's reference."""
    from controller.handlers.entry import configure_logging as _configure_logging

    assert build_parser().parse_args(["run", f"--log-format={fmt}"]).log_format == fmt
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        _configure_logging(fmt)
        handler = root.handlers[-1]
        record = logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, "Created %s", ("Pod",), None)
        record.k8s_ref = {"namespace": "team-a", "name": "box-a"}  # what kopf's object logger attaches
        line = handler.format(record)
        if fmt == "json":
            obj = json.loads(line)
            assert obj["message"] == "Created Pod" and obj["severity"] == "info"
            assert obj["object"] == {"namespace": "team-a", "name": "box-a"}
        else:
            assert line.endswith("Created Pod") and "[INFO" in line
            with pytest.raises(json.JSONDecodeError):
                json.loads(line)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


# ---------------------------------------------------------------------------------------------- detect
CORPUS = Path(__file__).parent / "fixtures" / "corpus" / "limit-screens.jsonl"


IDLE_CLAUDE = ("╭──────────────────────────────────────╮\n│ >                                    │\n"
               "╰──────────────────────────────────────╯\n  ? for shortcuts\n")


def _first_screen_per_state() -> dict[str, dict]:
    """One corpus screen per state it has (rate_limited, awaiting_input, working), plus an idle Claude
    Code prompt and a blank shell pane (unknown)."""
    found: dict[str, dict] = {
        "idle": {"id": "idle", "agent": "claude-code", "screen": IDLE_CLAUDE, "now": "2026-01-01T00:00:00Z"},
        "unknown": {"id": "blank", "agent": "shell", "screen": "", "now": "2026-01-01T00:00:00Z"}}
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if "state" in case["expect"]:
            found.setdefault(case["expect"]["state"], case)
    return found


def test_detect_exit_code_says_the_state(tmp_path: Path) -> None:
    """`detect --exit-code`: 0 working or idle, 10 rate_limited, 11 awaiting_input, 12 unknown; without
    the flag every state exits 0. Screens from the detection corpus, through the real command."""
    from controller.cli_detect import EXIT_BY_STATE

    cases = _first_screen_per_state()
    assert set(cases) == {"rate_limited", "awaiting_input", "working", "idle", "unknown"}
    want = {"working": 0, "idle": 0, "rate_limited": 10, "awaiting_input": 11, "unknown": 12}
    assert EXIT_BY_STATE == want
    for state, case in cases.items():
        screen = tmp_path / f"{case['id']}.txt"
        screen.write_text(case["screen"], encoding="utf-8")
        argv = ["detect", "--agent", case["agent"], "--now", case["now"], "--tz", case.get("tz") or "UTC", str(screen)]
        plain, coded = _cli(argv), _cli([*argv, "--exit-code"])
        assert json.loads(coded.stdout)["state"] == state, case["id"]
        assert plain.returncode == 0 and coded.returncode == want[state], (case["id"], coded.stderr)


def test_detect_bad_pattern_is_one_readable_line() -> None:
    out = _cli(["detect", "--agent", "codex", "--pattern", "resets (", "--exit-code", "-"])
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == ("detect: --pattern[0]: not a valid regular expression for RE2 (no lookaround or "
                          "backreferences): missing ) at 'resets ('\n")


def test_troubleshooting_shows_detect_states_as_detect_prints_them() -> None:
    """docs/troubleshooting.md section 2 quotes `detect`'s output: its `state: x` values and exit codes
    are the ones the command prints (lower snake case), not the AgentBox status spelling."""
    import re

    from controller.cli_detect import EXIT_BY_STATE
    from controller.domain.types import TabState

    text = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text()
    section = text.split("## 2.", 1)[1].split("\n## ", 1)[0]
    quoted = re.findall(r"`state: (\w+)`", section)
    assert quoted and set(quoted) <= {s.value for s in TabState}, quoted
    listed = re.search(r"`state` \(([^;)]*)", section).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == {s.value for s in TabState}
    for state, code in EXIT_BY_STATE.items():
        if code:
            assert f"`{code}` {state}" in section, state
