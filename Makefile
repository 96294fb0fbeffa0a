# One task runner; `make test` is exactly what CI runs (.ci/run).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := test
.PHONY: venv test test-long lint typecheck unit ray deploy coverage demo bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests use (nc for the protocol text's shell client; chromium and
# its driver for the web view's browser tests).
.PHONY: .debian-packages
.debian-packages: scripts/ensure-debian-packages
	scripts/ensure-debian-packages netcat-openbsd:nc git:git bubblewrap:bwrap prometheus:promtool systemd:systemd-analyze openssl:openssl iproute2:ip chromium:chromium chromium-driver:chromedriver

lint: $(STAMP)
	$(BIN)/ruff check sloopd sloopctl tests benchmarks
	$(BIN)/ruff format --check sloopd sloopctl tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite in TEST_WORKERS processes (pytest-xdist: most tests wait on daemons, git
# and agents, so two workers on two cores finish in about two thirds of the time),
# under coverage of the test processes (pytest-cov; reported, not gated); `make
# coverage` measures the daemons and CLIs the tests start too (slower: every daemon is
# traced).  TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
unit: $(STAMP)
	rm -rf .coverage-data && mkdir -p .coverage-data
	$(BIN)/pytest -q -n $(TEST_WORKERS) --cov --cov-report= -m "not long and not ray and not deploy"
	-@$(BIN)/coverage report --format=total \
	  | sed 's/^/coverage of sloopd and sloopctl in the test processes (percent of lines): /'

coverage: $(STAMP) .debian-packages .agent-clis
	rm -rf .coverage-data && mkdir -p .coverage-data
	$(BIN)/coverage run --rcfile=scripts/coverage-subprocess.toml -m pytest -q
	$(BIN)/coverage combine -q --rcfile=scripts/coverage-subprocess.toml
	$(BIN)/coverage report --rcfile=scripts/coverage-subprocess.toml

# The real agent CLIs the tests run, at pinned versions (tests/support/agent_clis.py),
# into a cache outside the repository (~/.cache/sloop/agent-clis), reused when present.
.PHONY: .agent-clis
.agent-clis: scripts/ensure-agent-clis
	scripts/ensure-agent-clis @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @google/gemini-cli@0.61.0

# The Ray run (docs/scale-out.md): in a network namespace with only loopback, each
# worker starts a real cluster (a head and two worker nodes, token auth on); the tests
# marked on_ray run again with every stage on its nodes, and tests/ray run there too.
ray: $(STAMP) .debian-packages .agent-clis
	scripts/in-netns env SLOOP_REQUIRE_RAY=1 SLOOP_TEST_EXECUTOR=ray \
	  $(BIN)/pytest -q -n $(TEST_WORKERS) -m "(on_ray or ray) and not long" tests/integration tests/ray

# The deployment for real (docs/deploy.md, "What the tests run"): the daemon's image
# built offline from a debootstrapped base (cached in ~/.cache/sloop/deploy) and run
# under podman with the least privileges that work, compose.yaml run by podman-compose,
# and the systemd unit run by systemd as a container's PID 1.  Skips only where no
# container can run at all, and fails instead under CI=true.
deploy: $(STAMP)
	scripts/ensure-debian-packages podman:podman runc:runc debootstrap:debootstrap \
	  dpkg-dev:dpkg-scanpackages podman-compose:podman-compose docker-compose:docker-compose
	$(BIN)/pytest -q -m deploy tests/deploy

test: $(STAMP) .debian-packages .agent-clis lint typecheck unit ray deploy

# Minutes of load, not run by `make test`: the long protocol fuzz and the Ray fault
# runs (a node killed mid-stage, the daemon SIGKILLed, the cluster restarted) (-m overrides
# pyproject's `-m 'not long'`).  SLOOP_FUZZ_SEED=<seed> replays its first seed.
test-long: $(STAMP) .debian-packages .agent-clis
	$(BIN)/pytest -q -s -m "long and not ray"
	scripts/in-netns env SLOOP_REQUIRE_RAY=1 $(BIN)/pytest -q -m "ray and long" tests/ray

# Every agent runs in a bubblewrap sandbox (docs/security.md): the demo's too.
# make demo AGENT=claude|codex|gemini: a real agent CLI against a local stand-in.
demo: $(STAMP)
	scripts/ensure-debian-packages git:git bubblewrap:bwrap
	AGENT="$(AGENT)" $(BIN)/python scripts/demo.py

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .coverage-data

# docs/protocol.md: its examples captured from a real daemon of this build.
.PHONY: protocol-doc
protocol-doc: $(STAMP)
	$(BIN)/python scripts/protocol_doc/capture.py > scripts/protocol_doc/captured.txt
	$(BIN)/python scripts/protocol_doc/render.py scripts/protocol_doc/protocol.md.in docs/protocol.md
