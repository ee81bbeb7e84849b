# Two commands for a new machine: `make dev` (run locally on embedded defaults) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000

.PHONY: dev test install install-test lock-check lock lock-upgrade audit ships system-deps node-deps playground sam-tools llama-server lint token bench load clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

## The venvs install the locked sets (requirements/*.txt, exact versions and hashes; devtools/locks.py), never the
## ranges of pyproject.toml: `lock-check` stops first when pyproject.toml changed and the locks did not follow.
## The project itself is installed editable without dependencies, so nothing but the lock decides a version.
$(VENV)/.installed: requirements/local.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet --require-hashes -r requirements/local.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.installed-test: requirements/test.txt | $(VENV)/bin/python
	$(PY) -m pip install --quiet --require-hashes -r requirements/test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(VENV)/.installed $@

lock-check:
	@$(PYTHON) -m devtools.locks check

install: lock-check $(VENV)/.installed

install-test: lock-check $(VENV)/.installed-test

## Re-lock after changing a range in pyproject.toml (other pins stay), or move every pin to the newest allowed
## version; review as docs/deployment.md "What the functions ship" says. uv, pinned, runs from its own venv.
UV_VERSION := 0.13.9
UV := .tools/uv-$(UV_VERSION)/bin/uv
$(UV):
	$(PYTHON) -m venv .tools/uv-$(UV_VERSION)
	.tools/uv-$(UV_VERSION)/bin/python -m pip install --quiet uv==$(UV_VERSION)

lock: $(UV)
	$(PYTHON) -m devtools.locks compile --uv $(UV)

lock-upgrade: $(UV)
	$(PYTHON) -m devtools.locks compile --uv $(UV) --upgrade

## Known vulnerabilities of the locked runtime set (pip-audit against PyPI's advisory data). Needs a machine that
## reaches the advisory service, so it is for a connected CI, not part of `make test`.
audit:
	$(PYTHON) -m venv .tools/pip-audit
	.tools/pip-audit/bin/python -m pip install --quiet --require-hashes -r requirements/audit.txt
	.tools/pip-audit/bin/pip-audit --strict --require-hashes --disable-pip -r requirements/runtime.txt

## Serve the API on http://127.0.0.1:$(PORT) with moto, an in-process stream store and the offline model;
## the playground page is at http://127.0.0.1:$(PORT)/playground.
dev: install playground
	PORT=$(PORT) $(PY) -m devtools.local.runner

## A trace viewer on this machine for `make dev`'s traces: Arize Phoenix (PyPI) in a venv of its own, OTLP over HTTP on
## port 6006, data kept in .tools/phoenix-data; works offline. Then: OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:6006 make dev
traces-viewer:
	@test -x .tools/phoenix-venv/bin/phoenix || ($(PYTHON) -m venv .tools/phoenix-venv && .tools/phoenix-venv/bin/pip install --quiet "arize-phoenix==20.26.1")
	PHOENIX_WORKING_DIR=.tools/phoenix-data PHOENIX_PORT=6006 .tools/phoenix-venv/bin/phoenix serve

## Print a local token for `make dev` (USER_ID, TENANT_ID, SCOPES choose its claims).
token: install
	@$(PY) -m devtools.local.token

## redis-server, node/npm, and the browser of the playground tests: Debian's chromium (driven by Playwright's Python
## API; Playwright's own browser download does not work here).
system-deps:
	@command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
	@command -v node >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }
	@command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
	@{ command -v cmake && command -v g++; } >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake g++; }

node-deps:
	cd tests/e2e/js && npm ci --no-audit --no-fund --silent

## Bundle the /playground page (web/playground, @ag-ui/client + esbuild) into functions/agent_api/playground_static.
PLAYGROUND_OUT := functions/agent_api/playground_static/app.js
playground: $(PLAYGROUND_OUT)

$(PLAYGROUND_OUT): web/playground/package-lock.json web/playground/build.mjs $(wildcard web/playground/src/*)
	@command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
	cd web/playground && npm ci --no-audit --no-fund --silent && node build.mjs

sam-tools:
	@if [ -f scripts/install_sam_tools.sh ]; then bash scripts/install_sam_tools.sh; fi

## The real-model test tier's server: llama-cpp-python built from source (generic CPU) with SmolLM2-135M, in a venv
## cached outside the repository (${XDG_CACHE_HOME:-~/.cache}/agent-backend/); built once per machine.
llama-server: system-deps
	@PYTHON=$(PYTHON) bash scripts/llama_server_env.sh >/dev/null

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## Install everything the tests need, then lint, type-check and run every test, as timed stages with a table of
## their wall times at the end (devtools/make_test.py, docs/testing.md): the llama.cpp build runs in the
## background beside the other stages, and pytest runs in tiers (parallel, serial, real model). TEST_WORKERS sets
## the number of xdist workers.
test:
	@$(PYTHON) -m devtools.make_test

## Run every benchmark in its full configuration (about 16 minutes; results go into docs/benchmarks.md by hand).
bench: install-test
	$(PY) -m bench.input_tokens
	$(PY) -m bench.context_assembly
	$(PY) -m bench.server_overhead
	$(PY) -m bench.cold_start
	$(PY) -m bench.memory_tokens
	$(PY) -m bench.first_request
	$(PY) -m bench.capacity

## The full load test (32 concurrent SSE runs for 60 s on loopback; exits 1 on any lost/duplicated/reordered event).
load: install-test
	$(PY) -m tests.reliability.load --concurrency 32 --seconds 60

clean:
	rm -rf $(VENV) tests/e2e/js/node_modules web/playground/node_modules functions/agent_api/playground_static .tools .mypy_cache .pytest_cache .ruff_cache
