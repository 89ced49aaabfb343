# Two commands: `make demo` runs axon_eg on a built-in example, `make test` runs the test suite (`make test-all`
# adds the slow tests, as CI does).
# Each creates its own virtual environment (.venv) on first use. `make install-check` builds a wheel and runs
# it from a fresh venv outside the checkout (.ci/install-check; CI runs it after `make test`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch where one is available (a bare `torch` requirement can pull a multi-GB CUDA build).
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test test-slow test-all lint install-check clean

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)" || $(PY) -m pip install -q torch
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/axon-eg optimize rmsnorm -k 4 --out out/demo

# `make test` (README's command, under 5 min on 2 cores): lint, then every test not marked slow. Rules are
# proved as they load (load_rules re-proves what this machine has not proved). `make test-slow` (CI runs it
# after `make test`): `axon-eg rules verify` (every rule and its float-safety verdicts from their text) and
# the tests marked slow (end-to-end runs, store regeneration, the longest property runs).
test: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -c "from axon_eg.rules_discovered.store import load_rules; load_rules()"  # proves the store once here
	TRITON_INTERPRET=1 $(PY) -m pytest -n 2 -m "not slow" --durations=10

test-slow: $(VENV)/.installed
	$(VENV)/bin/axon-eg rules verify
	TRITON_INTERPRET=1 $(PY) -m pytest -n 2 -m slow --durations=10

test-all: test test-slow

install-check:
	PYTHON="$(PYTHON)" TORCH_SPEC="$(TORCH_SPEC)" bash .ci/install-check

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
