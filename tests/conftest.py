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
]
