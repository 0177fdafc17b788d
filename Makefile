# agentbox-controller — developer commands. `make demo` and `make test` work from a fresh clone:
# they create .venv at the repository root and install tmux when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` spreads the suite over this many pytest-xdist workers. The suite waits on real clocks (resets,
# graces, leases, real tmux and agent CLIs) far more than it computes: measured on 2 cores, 8 workers keep the
# load near 2 and take about a quarter of the serial wall time. TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) * 4 )))

.PHONY: venv demo test test-quick test-unit durations lint bench crds clean tmux e2e agents agents-latest capture-screens images kind-up kind-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP) tmux

tmux:
	@command -v tmux >/dev/null 2>&1 || { \
	  echo "tmux missing: installing it"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq tmux >/dev/null; \
	  else echo "install tmux with your package manager" >&2; exit 1; fi; }

demo: venv
	$(VENV)/bin/agentbox-controller demo $(if $(REAL_AGENTS),--real-agents,) $(if $(KEEP),--keep,)

# The real Claude Code and Codex CLIs (versions pinned in agentbox_sim/real_agents.py) for the
# real-agent tests and `make demo REAL_AGENTS=1`; installed once into .agents/, skipped without npm.
agents: venv
	@if command -v npm >/dev/null 2>&1; then \
	  $(PY) -c "from agentbox_sim.real_agents import ensure_installed as e, PINNED as p; e(); print('agents: ' + ', '.join(k + '@' + v for k, v in p.items()) + ' in .agents/')"; \
	else echo "agents: npm not found, skipping the real Claude Code / Codex CLIs (their tests will be skipped)"; fi

# The drift check: the newest published Claude Code and Codex in .agents-latest/ (the pins stay), the
# real-agent tests and a capture of their screens against them; prints version, scenario, detected
# state, reset, pass/fail. Run it before raising the versions in images/box/Dockerfile.
agents-latest: venv
	$(PY) -m agentbox_sim.drift

# Re-capture the pinned CLIs' screens into tests/fixtures/real-screens/<version>/ (after a pin change).
capture-screens: agents
	$(PY) -m agentbox_sim.capture --out tests/fixtures/real-screens

# Layers that are checked: the import-linter contracts in pyproject.toml ([tool.importlinter]) and mypy
# (strict) on the domain and the agent and provider adapters ([tool.mypy]).
lint: venv
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check --no-cache controller agentbox_sim tests bench

# The whole proof (what .ci/run calls): lint, then every test over TEST_WORKERS workers, the longest first
# (tests/harness/ordering.py; one test handed out at a time so no worker queues two long ones). The JUnit
# report in tmp/junit.xml feeds `make durations`.
test: venv agents lint
	mkdir -p tmp
	$(PY) -m pytest -q -rs --durations=30 --basetemp=tmp/pytest --junitxml=tmp/junit.xml \
	  $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --maxschedchunk 1,) $(PYTEST_ARGS)

# The edit-test loop: the pure domain and unit tests (no emulated world, no tmux), on every core; ~30 s.
test-quick: venv
	$(PY) -m pytest -q -m unit -n auto -p no:cacheprovider $(PYTEST_ARGS)

test-unit: test-quick

# Refresh tests/durations.json (the order `make test` hands tests out in) from the last `make test`'s report.
durations: venv
	$(PY) hack/durations.py --out tests/durations.json tmp/junit.xml

bench: venv
	$(PY) bench/resume_latency.py

crds: venv
	$(VENV)/bin/agentbox-controller crds --out crds
	cp crds/*.yaml charts/agentbox-controller/files/crds/

# Container images: no image is published yet, so a cluster runs these local builds. `make images` uses
# docker (daemon running), podman or buildah, whichever works (BUILDER=... forces one).
IMAGE_REGISTRY ?= ghcr.io/agentbox-dev
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*/\1/p' charts/agentbox-controller/Chart.yaml)
CONTROLLER_IMAGE ?= $(IMAGE_REGISTRY)/agentbox-controller:$(IMAGE_TAG)
BOX_IMAGE ?= $(IMAGE_REGISTRY)/agentbox-box:$(IMAGE_TAG)
KIND_CLUSTER ?= agentbox

images:
	hack/images.sh "$(CONTROLLER_IMAGE)" "$(BOX_IMAGE)"

# kind cluster (kind-config.yaml) + both images loaded + chart + example Subscription and box (hack/kind-up.sh).
kind-up: venv
	CONTROLLER_IMAGE="$(CONTROLLER_IMAGE)" BOX_IMAGE="$(BOX_IMAGE)" KIND_CLUSTER="$(KIND_CLUSTER)" hack/kind-up.sh

kind-down:
	kind delete cluster --name "$(KIND_CLUSTER)"

# The opt-in real-cluster tests (tests/e2e): they refuse any kube context that is not a kind one.
e2e: venv
	AGENTBOX_E2E=1 $(PY) -m pytest -q -m e2e tests/e2e

clean:
	rm -rf $(VENV) tmp .pytest_cache
