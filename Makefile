# bkmcp — two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYZ    := dist/bkmcp.pyz
PREFIX ?= $(HOME)/.local

.PHONY: prereqs install install-pyz demo demo-resident examples test check venv interop peers lint fmt unit integration artifact build scenario bench clean conformance

venv: $(VENV)/.installed
# Says what it installs; on a terminal pip shows its progress (in a log: quiet).
$(VENV)/.installed: pyproject.toml
	@echo "== $(VENV): installing from the package index, once: bkmcp's runtime dependencies (httpx, jsonschema," \
		"jq) and the test tools pinned in pyproject.toml [test] (pytest, pytest-cov, hypothesis, ruff, mypy)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install $$([ -t 1 ] || echo -q) -e '.[test]'
	touch $@

# Servers nobody here wrote: the official Python SDK (own venv: it needs jsonschema>=4.20), server-everything, the
# real stdio servers of issue 27 (npm) and FastMCP on mcp 1.x (.venv-mcp1); docs/interop.md.
interop:
	bash .ci/install_interop.sh .venv-sdk

# Peer MCP clients for bench/peers.py (mcp2cli, Inspector CLI, mcpc, mcporter), pinned, into .peers/.
peers:
	bash bench/install_peers.sh .peers

build:
	$(PYTHON) build_zipapp.py

# `make install PREFIX=/usr/local` (default ~/.local): the freshly built dist/bkmcp.pyz as $(PREFIX)/bin/bkmcp, an
# executable (its #! line finds python3), and whether that folder is on PATH. install-pyz copies without building.
install: build
	@$(MAKE) --no-print-directory install-pyz PREFIX="$(PREFIX)"

install-pyz:
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 755 "$(PYZ)" "$(DESTDIR)$(PREFIX)/bin/bkmcp"
	@case ":$$PATH:" in \
		*":$(PREFIX)/bin:"*) echo "installed $(PREFIX)/bin/bkmcp: run bkmcp --help" ;; \
		*) echo "installed $(PREFIX)/bin/bkmcp; $(PREFIX)/bin is not on PATH: add" \
			"export PATH=\"$(PREFIX)/bin:\$$PATH\" to ~/.bashrc (or your shell's rc file), then run bkmcp --help" ;; \
	esac

# The official MCP conformance harness (npm @modelcontextprotocol/conformance 0.1.16 and 0.2.0-alpha.12, Node 22,
# pinned in tests/conformance/node) runs its client scenarios against dist/bkmcp.pyz, inside a loopback-only network
# namespace; fails on any result that tests/conformance/expected_failures.txt does not predict (docs/interop.md).
conformance: venv build
	bash .ci/install_conformance.sh .conformance
	BKMCP_CONFORMANCE_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/conformance
	$(PYTHON) tests/conformance/run_conformance.py --bkmcp "$(PYTHON) $(abspath $(PYZ))" $(CONFORMANCE_ARGS)

demo: build
	$(PYTHON) mock_server/demo.py $(PYZ)

# every server the docs' examples name, on free loopback ports, and the folder they run in (mcp.json, params.json,
# registry.db, ...); prints what to export, serves until Ctrl-C (mock_server/examples.py, docs/user-guide.md)
examples: build
	$(PYTHON) mock_server/examples.py --bkmcp "$(PYTHON) $(abspath $(PYZ))" $(EXAMPLES_DIR)

# resident mode: a scripted session against the mock server (HTTP + stdio), every command and answer printed
demo-resident: build
	$(PYTHON) mock_server/demo_resident.py $(PYZ)

lint: venv
	$(BIN)/ruff check bkmcp.py build_zipapp.py zipapp_support.py mock_server tests bench
	$(BIN)/ruff format --check .
	$(BIN)/mypy bkmcp.py build_zipapp.py zipapp_support.py

# The quick loop while editing: lint, then the unit tests but the heavy property tests (marked fuzz: make test and
# CI run them). Offline, no Node, no build: nothing here downloads once `make venv` has run.
check: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not fuzz" tests/unit

# make test CASE=tests/unit/test_cli.py::test_name (one test, a file or a node id) or CASE='jq and not halt' (a -k
# expression over the whole suite): lint, build and interop as usual, then only that case (no coverage threshold).
CASE_IS_PATH = $(findstring ::,$(CASE))$(findstring .py,$(CASE))
# Two runs side by side on two cores. Beside: the artifact suite (fresh interpreters, foreign CPythons: one process
# per example), then the heavy property tests (marked fuzz; CI runs 2000 examples each, ~10 min under coverage's
# tracer). The rest, whose processes mostly wait on sockets, runs under coverage: its branch coverage of bkmcp.py
# is the figure reported and held at 90 % (the fuzz tests' lines are the unit tests' lines too; the artifact tests
# run the built .pyz in other processes). Both runs must pass; the side run's output is printed when it ends.
# zsh, tmux, Node.js >= 20 with npm and a Python >= 3.10, checked first: a missing one stops at once with the line
# that installs it (.ci/check_prereqs.sh), not after minutes of tests.
prereqs:
	@bash .ci/check_prereqs.sh

test: prereqs venv interop lint build
ifeq ($(CASE),)
	@set -u; side_log=$$(mktemp); \
	{ BKMCP_INTEROP_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/artifact; artifact=$$?; \
		BKMCP_INTEROP_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m fuzz \
			--ignore=tests/conformance --ignore=tests/artifact tests && exit $$artifact; } >"$$side_log" 2>&1 & \
	side=$$!; trap 'kill $$side 2>/dev/null; rm -f "$$side_log"' EXIT INT TERM; \
	BKMCP_INTEROP_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider --cov=bkmcp --cov-branch \
		--cov-report=term-missing:skip-covered --cov-fail-under=90 --ignore=tests/conformance \
		--ignore=tests/artifact -m "not fuzz" tests; main=$$?; \
	wait $$side; side_status=$$?; echo "== tests/artifact, then the fuzz-marked tests (run beside the rest)"; \
	cat "$$side_log"; test $$main -eq 0 && test $$side_status -eq 0
	# the mock server checked against the official SDK client (runs in the SDK's own venv)
	.venv-sdk/bin/python -m pytest -q -p no:cacheprovider -m interop tests/integration/test_mock_server.py
else ifneq ($(CASE_IS_PATH),)
	BKMCP_INTEROP_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(CASE)
else
	BKMCP_INTEROP_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/conformance -k "$(CASE)" tests
endif

# ruff format, line length 120 (pyproject.toml); `make lint` fails on a file it would change
fmt: venv
	$(BIN)/ruff format .

unit: venv
	$(BIN)/python -m pytest -q tests/unit

integration: venv
	$(BIN)/python -m pytest -q tests/integration

artifact: venv build
	$(BIN)/python -m pytest -q tests/artifact

# make scenario S=MCP-001
scenario: venv
	$(BIN)/python -m pytest -q tests/integration -m "scenario" -k "$(S)"

bench: venv build
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/roundtrips.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/flags.py
	$(BIN)/python bench/peers.py
	$(BIN)/python bench/call_cost.py
	$(BIN)/python bench/resident.py
	$(BIN)/python bench/scale.py

clean:
	rm -rf dist build .pytest_cache .mypy_cache .ruff_cache .coverage htmlcov
