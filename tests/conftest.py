"""Shared pytest configuration: fixtures live in plugin modules under tests/harness/, listed here.

Add a module of your own to ``pytest_plugins`` instead of growing this file.  The modules are imported as
``harness.*`` because pytest (default "prepend" import mode) puts ``tests/`` on ``sys.path``.
"""

pytest_plugins = [
    "harness.loop_hygiene",
    "harness.kube_fixtures",
    "harness.world_fixtures",
    "harness.real_agent_fixtures",
    "harness.operator_process",
    "harness.ordering",
]


def pytest_configure(config) -> None:
    """Refuse to run in a venv installed before the emulated world moved to its own package
    (`agentbox_sim`): subprocesses (scripted agents, the kubelet's container init) would fail to import it
    far from the cause. `make venv` reinstalls when pyproject.toml changes."""
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-c", "import agentbox_sim"], cwd="/", capture_output=True)
    if probe.returncode != 0:
        raise RuntimeError("agentbox_sim is not installed in this venv: run `make venv` "
                           "(or `.venv/bin/pip install -e '.[test]'`)")
