"""The emulated world: Kubernetes API server, kubelet model, provider usage API, scripted and real agents, demo.

Used by the tests, the benchmarks and `agentbox-controller demo`; never by the product (`controller`),
which an import-linter contract in pyproject.toml checks. The one allowed edge is the CLI's `demo`
subcommand, which imports :mod:`agentbox_sim.demo` lazily.
"""
