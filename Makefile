# Every target creates the virtualenv and installs what it needs on a fresh machine.
# Its Python: the system's own build first, then python3.13 ... python3 on PATH; each must be >= 3.11 and able to
# make a venv with pip. Distributions build CPython with profile-guided optimisation and LTO; pyenv's default build has
# neither, and this CPU-bound suite needs a third more CPU on it (README, Development). PYTHON=... picks another.
PYTHON ?= $(shell for p in /usr/bin/python3.13 /usr/bin/python3.12 /usr/bin/python3.11 /usr/bin/python3 \
                           python3.13 python3.12 python3.11 python3; do \
            command -v $$p >/dev/null 2>&1 && $$p -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' \
              2>/dev/null && { echo $$p; break; }; \
          done)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test check chromium node-clients demo bench bench-smoke fuzz clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "chunktape needs Python >= 3.11 with venv and pip (ensurepip; Debian and Ubuntu: apt install python3-venv); or give PYTHON=/path/to/python"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

check: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# Bytecode caches on, even where the shell sets PYTHONDONTWRITEBYTECODE: pytest then keeps the test modules it
# rewrites, and the CLI processes the suite starts reuse compiled modules instead of compiling them each time.
# The HTML report's tests run in a real headless Chromium: Debian's package, installed here when it is missing and
# apt-get is usable (never failing the build where it is not: those tests then skip and say why).
chromium:
	@sh scripts/install_chromium.sh

# The Node SDKs (openai-node, Anthropic's) that drive `chunktape serve` in the suite, pinned, into .node-clients/
# with npm where it is there (never failing the build where it is not: those tests then skip and say why).
node-clients:
	@sh scripts/install_node_clients.sh

test: check chromium node-clients
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 2 --dist loadgroup

demo: install
	$(BIN)/chunktape demo

# Every benchmark, tiny, checked to run (seconds; installs nothing); then the full run that prints the figures, which
# installs the pinned peers (cassetter, pytest-recording with pip, aimock with npm) into benchmarks/.work on its first
# run (benchmarks/_peers.py; a row whose peer cannot be installed says so).
bench-smoke: install
	$(BIN)/python benchmarks/run.py --smoke

bench: bench-smoke
	$(BIN)/python benchmarks/run.py

fuzz: install
	$(BIN)/python -m pip install --quiet atheris
	$(BIN)/python benchmarks/fuzz.py

clean:
	rm -rf $(VENV) .node-clients .mypy_cache .ruff_cache .pytest_cache .hypothesis dist build demo-out
