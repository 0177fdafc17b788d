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
    from controller.__main__ import _configure_logging

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
