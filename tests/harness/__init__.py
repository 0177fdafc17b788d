"""Test harness plugins, loaded by tests/conftest.py through ``pytest_plugins`` (one module per area)."""
