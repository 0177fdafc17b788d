"""`make agents-latest`: the drift check — do the newest published CLIs still read the way we expect?

    python -m agentbox_sim.drift [--prefix .agents-latest] [--claude VERSION] [--codex VERSION] [--no-tests]

1. asks npm for the newest published ``@anthropic-ai/claude-code`` and ``@openai/codex`` (or takes the
   given versions) and installs them into their own folder (default ``.agents-latest``; ``.agents`` and
   the pins are left alone);
2. runs the real-agent tests (tests/test_real_agents.py, tests/test_login_real_agents.py) against them
   (environment AGENTBOX_AGENTS_DIR / AGENTBOX_CLAUDE_VERSION / AGENTBOX_CODEX_VERSION);
3. captures their screens in every scenario of agentbox_sim/capture.py (saved under
   ``tmp/agents-latest/screens/<version>/``) and prints one table: version, scenario, detected state,
   reset, pass/fail — then the test results.

Exit status 0 when every capture and test passed, 1 otherwise, 2 when npm or the install failed.
Use it before raising the versions in the box image (images/box/Dockerfile) — see the README.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from agentbox_sim.real_agents import CLAUDE_PACKAGE, CODEX_PACKAGE, REPO

__all__ = ["main", "newest"]

TEST_FILES = ("tests/test_real_agents.py", "tests/test_login_real_agents.py")


def newest(package: str, timeout: float = 60.0) -> str:
    """The newest published version of ``package`` (``npm view <package> version``).

    Raises:
        RuntimeError: npm is missing or did not answer with a version.
    """
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    res = subprocess.run([npm, "view", package, "version"], capture_output=True, text=True, timeout=timeout)
    version = res.stdout.strip().splitlines()[-1].strip() if res.stdout.strip() else ""
    if res.returncode != 0 or not version or not version[0].isdigit():
        raise RuntimeError(f"npm view {package} version failed: {(res.stderr or res.stdout).strip()[-300:]}")
    return version


def _tests(env: dict[str, str], out: pathlib.Path) -> list[tuple[str, str, str]]:
    """Run the real-agent tests; returns (test, outcome, message) from pytest's JUnit XML."""
    xml = out / "real-agents.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    f"--basetemp={out / 'pytest'}", *TEST_FILES, "-k", "not captured_real_screen"],
                   cwd=REPO, env=env)
    results = []
    if xml.exists():
        for case in ET.parse(xml).iter("testcase"):
            outcome, message = "pass", ""
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    outcome = {"failure": "FAIL", "error": "ERROR", "skipped": "skipped"}[tag]
                    message = (node.get("message") or "").splitlines()[0][:100] if node.get("message") else ""
                    break
            results.append((case.get("name", "?"), outcome, message))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentbox_sim.drift", description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", type=pathlib.Path, default=REPO / ".agents-latest")
    p.add_argument("--claude", default=None, help="Claude Code version (default: newest on npm)")
    p.add_argument("--codex", default=None, help="Codex version (default: newest on npm)")
    p.add_argument("--no-tests", action="store_true", help="only capture the screens")
    ns = p.parse_args(argv)
    try:
        claude = ns.claude or newest(CLAUDE_PACKAGE)
        codex = ns.codex or newest(CODEX_PACKAGE)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"agents-latest: {exc}", file=sys.stderr)
        return 2
    out = REPO / "tmp" / "agents-latest"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AGENTBOX_AGENTS_DIR": str(ns.prefix.resolve()), "AGENTBOX_CLAUDE_VERSION": claude,
           "AGENTBOX_CODEX_VERSION": codex, "PYTHONPATH": str(REPO)}
    print(f"agents-latest: {CLAUDE_PACKAGE}@{claude}, {CODEX_PACKAGE}@{codex} in {ns.prefix}", flush=True)
    res = subprocess.run([sys.executable, "-c", "from agentbox_sim.real_agents import ensure_installed; "
                          "ensure_installed()"], cwd=REPO, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"agents-latest: install failed: {res.stderr.strip()[-500:]}", file=sys.stderr)
        return 2
    tests = [] if ns.no_tests else _tests(env, out)
    cap = subprocess.run([sys.executable, "-m", "agentbox_sim.capture", "--prefix", str(ns.prefix.resolve()),
                          "--out", str(out / "screens")], cwd=REPO, env=env, capture_output=True, text=True)
    print(cap.stdout.rstrip())
    if cap.stderr.strip():
        print(cap.stderr.strip()[-1000:], file=sys.stderr)
    if tests:
        print()
        width = max(len(t[0]) for t in tests)
        print(f"{'real-agent test'.ljust(width)}  result")
        for name, outcome, message in tests:
            print(f"{name.ljust(width)}  {outcome}{'  ' + message if message else ''}")
    ok = cap.returncode == 0 and all(outcome in ("pass", "skipped") for _, outcome, _ in tests)
    print(f"\nagents-latest: {'no drift' if ok else 'DRIFT'} (screens in {out / 'screens'})")
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
