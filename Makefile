# es-provider: the README's commands. `make run` serves the demo; `make test` is what CI runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install lint compose-check helm chart test unit integration run opensearch-start opensearch-stop bench reliability

# uv installs the locked wheels in seconds (pip took 50 s of a core); it comes from PyPI like the rest.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.9
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check es_provider tests bench harness scripts/*.py
	$(BIN)/mypy es_provider harness scripts/*.py
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_house.py

compose-check:
	scripts/check-compose

# Helm v4.3.2 for the Helm chart's checks, built once from the Go module proxy (~3 minutes on 2 cores, then cached in
# ~/.cache/es-provider/helm-v4.3.2): in `make test`'s setup, so no timed phase waits for it.
helm:
	@scripts/helm-local path

# The chart alone (charts/es-provider): helm lint and template of every values set, the manifests against the
# Kubernetes API schemas, no secret in them (tests/repo/test_chart*.py; `make test` runs them too).
chart: install helm
	$(BIN)/pytest tests/repo/test_chart.py tests/repo/test_chart_secrets.py tests/repo/test_chart_values.py

# pytest-xdist: test modules spread over processes (a module stays in one process: some have module-wide fixtures
# or bind fixed ports), all against the one node a run starts (tests/conftest.py), each test with its own indices.
XDIST ?= -n 4 --dist loadfile
ES_XDIST ?= -n 2 --dist loadfile

# The install, lint, compose check and Helm while the engine nodes start, then the tests in timed phases (scripts/run-tests,
# which starts the nodes once): all but the timing tests on OpenSearch in XDIST processes, the timing tests alone,
# and what differs by engine (-m engines: tests/conftest.py's ENGINES says what and why) on Elasticsearch 8 and 9, at
# low priority beside the timing tests.
test:
	BIN=$(BIN) XDIST="$(XDIST)" ES_XDIST="$(ES_XDIST)" SETUP="$(MAKE) --no-print-directory install lint compose-check helm" \
		scripts/run-tests

# The pure, table-driven tests alone: no engine, a few seconds.
unit: install
	$(BIN)/pytest tests/unit

# The tests against a real OpenSearch node (started as for `make test`).
integration: install
	$(BIN)/pytest tests/integration

# `make run PORT=8081 OPENSEARCH_PORT=9210`: the provider and the demo's engine on other ports (the printed curls
# follow them); OPENSEARCH_URL=…: a node of your own, nothing started (scripts/run-demo reads the same variables).
run: install
	PORT="$(PORT)" OPENSEARCH_PORT="$(OPENSEARCH_PORT)" scripts/run-demo

$(VENV)/.bench-installed: $(VENV)/.installed requirements-bench.lock
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-bench.lock
	touch $@

# All benchmarks in one run (starts the local OpenSearch itself); writes bench/results/ and docs/benchmarks.md.
bench: $(VENV)/.bench-installed
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# The reliability modules at full size (bigger corpus, more identities and fuzz cases, 60 s soak); writes
# docs/reliability.md. `make test` runs the same modules at CI size.
reliability: install
	ES_PROVIDER_HEAVY=1 ES_PROVIDER_RELIABILITY_REPORT=docs/reliability.md $(BIN)/pytest tests/integration/test_reliability_*.py \
		tests/integration/test_live_identities.py tests/integration/test_scim_load.py

opensearch-start:
	scripts/opensearch-local start

opensearch-stop:
	scripts/opensearch-local stop

# The configuration reference is generated from the settings models (tests/unit/offline/test_reference.py fails while
# it is out of date).
config-reference: install
	$(BIN)/python -m es_provider.offline.reference > docs/configuration.md

# docs/cluster.md's roles are generated from es_provider/engine/privileges.py (tests/repo/test_cluster_doc.py fails
# while they are out of date).
cluster-roles: install
	$(BIN)/python -c 'from pathlib import Path; from es_provider.cli.roles import rewrite; rewrite(Path("docs/cluster.md"))'

## run               venv + install, a real OpenSearch, the sample knowledge base, the provider on 127.0.0.1:8080; prints curl (PORT=, OPENSEARCH_PORT= move them)
## test              what CI runs: install, lint, compose check, unit + integration tests on real OpenSearch and Elasticsearch
## unit              the pure, table-driven tests alone: no engine, a few seconds
## integration       the tests against a real OpenSearch node (started as for `make test`)
## lint              ruff, mypy --strict, then the import-linter contracts (the layers)
## compose-check     docker-compose.yml is valid and refuses to start without each of the provider's keys
## helm              Helm v4.3.2 for the chart's checks (built once from the Go module proxy); prints its path
## chart             the Helm chart alone: lint, template, Kubernetes schemas, no secrets (docs/kubernetes.md)
## install           the venv in .venv from requirements.lock, the package installed editable
## bench             every benchmark in one run (starts the local OpenSearch); writes bench/results/, docs/benchmarks.md
## reliability       the reliability modules at full size; writes docs/reliability.md
## opensearch-start  a local OpenSearch node without Docker (scripts/opensearch-local start)
## opensearch-stop   stop it (scripts/opensearch-local stop)
## config-reference  regenerate docs/configuration.md from the settings models (es_provider/config/)
## cluster-roles     regenerate docs/cluster.md's least-privilege roles from es_provider/engine/privileges.py
## help              this list
.PHONY: help config-reference cluster-roles
help:
	@sed -n 's/^## /make /p' $(firstword $(MAKEFILE_LIST))
