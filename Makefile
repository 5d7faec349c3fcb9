# pubsub-toolkit - every target a newcomer needs. `make run` and `make test` are the two to start with.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?=
# `make test`'s processes: most tests wait on emulators and servers, so two overlap well on two
# cores. Each file stays on one process (--dist loadfile): its module fixtures start once.
TEST_WORKERS ?= 2
TFVARS ?= deploy/terraform.tfvars

.PHONY: help install system-deps run up down test test-unit test-slow lint format build tf-check deploy deploy-gcloud iac-tools bench bench-cost bench-peer bench-latency bench-tracing bench-ingress-ordering bench-publisher bench-compare soak test-faults sim sim-mutations clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/' | expand -t 20

system-deps: ## install what the machine lacks (redis-server, chromium, shellcheck; checks Java and the emulators)
	@missing=""; \
	  command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v shellcheck >/dev/null || missing="$$missing shellcheck"; \
	  if [ -n "$$missing" ]; then echo "installing$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; fi
	@command -v java >/dev/null || { echo "Java 17 is required by the emulators: apt-get install openjdk-17-jre-headless"; exit 1; }
	@test -x /usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator || \
	  { echo "missing Pub/Sub emulator: apt-get install google-cloud-cli-pubsub-emulator"; exit 1; }
	@test -f /usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar || \
	  { echo "missing Firestore emulator: apt-get install google-cloud-cli-firestore-emulator"; exit 1; }

$(VENV)/.installed: pyproject.toml cli/pyproject.toml local/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# The library with every extra the suite exercises and, beside it, the operator's CLI and
	# status page (cli/: the `pubsub-toolkit` command) and the local stack (local/), each its
	# own distribution, all editable; the tools from pyproject's `dev` dependency group
	# (--group needs pip >= 25.1, hence the upgrade above).
	$(PIP) install -q -e '.[redis,secrets,tasks,relay,functions,dashboard,metrics,asyncio,otlp]' -e ./cli -e ./local --group dev
	touch $@

tests/e2e/node/node_modules/.installed: tests/e2e/node/package-lock.json
	@if command -v npm >/dev/null; then \
	  (cd tests/e2e/node && npm ci --no-audit --no-fund --loglevel=error) && touch $@; \
	else echo "npm not found: the Node.js client e2e test will be skipped"; fi

install: system-deps $(VENV)/.installed tests/e2e/node/node_modules/.installed iac-tools ## create .venv (and the Node client for its e2e test) with the dev tools

run: install ## run the pipeline locally on the emulators, narrated; stops everything afterwards
	$(VENV)/bin/pubsub-toolkit demo

up: install ## start the local stack in the background (then: eval "$$(.venv/bin/pubsub-toolkit local env)")
	$(VENV)/bin/pubsub-toolkit local up

down: ## stop everything `make up` started
	test -x $(VENV)/bin/pubsub-toolkit && $(VENV)/bin/pubsub-toolkit local down || true

test: install ## the whole suite: unit, integration (emulators, Redis, functions-framework)
	$(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-unit: install ## the fast layers, no servers (~1.5 min): unit tests, properties, the simulation's 2,000 schedules
	$(PY) -m pytest tests/unit tests/property tests/simulation -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-slow: install ## long runs (the consumer-crash fault), kept out of `make test`
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

test-faults: install ## the fault-injection and property suites, slow faults included
	$(PY) -m pytest tests/faults tests/property $(PYTEST_ARGS)

lint: install ## ruff lint + format check, mypy on the library and the entry points, its layers and no import cycles (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@# the deployed entry points, one by one (each is a module named main)
	for entry in functions/ingress/main.py functions/consumer/main.py appengine/relay/main.py; do \
	  $(VENV)/bin/mypy $$entry || exit 1; done
	$(VENV)/bin/lint-imports

format: install ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

build: ## deployable bundles in build/: each function and the relay with the library beside main.py
	scripts/build-bundles

deploy: ## deploy with Terraform (TFVARS=path, default deploy/terraform.tfvars); needs only terraform, gcloud and bash
	TFVARS=$(TFVARS) scripts/deploy-terraform

deploy-gcloud: ## deploy with plain gcloud (PROJECT_ID=... REGION=...; DRY_RUN=1 prints the commands)
	scripts/deploy-gcloud

iac-tools: ## checkov in its own venv (.tools/checkov-venv) for tf-check and tests/terraform
	scripts/install-iac-tools

tf-check: install ## Terraform fmt, validate, test, checkov, trivy, hcl2 structure (offline providers when the registry is out of reach)
	scripts/tf-check

bench: install ## benchmarks (each starts its own servers); JSON and a PNG chart in bench/results/
	$(PY) -m bench.dedup
	$(PY) -m bench.delay
	$(PY) -m bench.fifo_sequencer
	$(PY) -m bench.fifo
	$(PY) -m bench.fifo_counts
	$(PY) -m bench.async_consumer
	$(PY) -m bench.charts

bench-cost: install ## per-path counts of Pub/Sub, Firestore, Redis, Cloud Tasks and invocations, in $ per million (bench/results/cost.json)
	$(PY) -m bench.cost

bench-peer: install ## the dedup store against the PyPI peer gcp-pubsub-idempotency, alternating rounds (bench/results/peer.json)
	$(PY) -m bench.peer

bench-latency: install ## origin -> ingress -> final vs a direct publish on the local stack, p50/p99 (~6 min)
	$(PY) -m bench.latency

bench-tracing: install ## tracing off / on / 10% sampled: ingress as deployed (Pub/Sub emulator, Redis and Firestore), then in-process vs before tracing (1839f16), alternating rounds (bench/results/tracing.json); then instructions per message under callgrind (tracing_instructions.json); ~20 min
	$(PY) -m bench.tracing
	$(PY) -m bench.tracing_instructions

bench-ingress-ordering: install ## message ordering on the ingress push subscription on/off: share of FIFO messages arriving early (bench/results/ingress_ordering.json; ~1 min)
	$(PY) -m bench.ingress_ordering

bench-publisher: install ## the Publisher against google-cloud-pubsub's client, unordered and FIFO, 1 and 8 threads, alternating rounds (bench/results/publisher.json; ~80 s)
	$(PY) -m bench.publisher

bench-compare: install ## issue 26: bench/fifo, bench/dedup, bench/async_consumer, BASELINE (602d3ba) vs this tree in one run; fails unless every median ratio >= 0.95 (bench/results/compare_restructure.json; ~8 min, run on an idle machine)
	$(PY) -m bench.compare --baseline $(or $(BASELINE),602d3ba) --check

soak: install ## 50,000 mixed messages through the local stack, ledger checked (~12-15 min; not in `make test`)
	$(PY) -m bench.soak

SEEDS ?= 10000
SEED ?=
sim: $(VENV)/.installed ## deterministic simulation: SEEDS=N schedules on 2 workers, or SEED=S replayed with its trace
	PYTHONHASHSEED=0 $(PY) -m tests.simulation $(if $(SEED),--seed $(SEED),--seeds $(SEEDS))

sim-mutations: $(VENV)/.installed ## each defect fix reverted: how many schedules the simulation needs to find it
	PYTHONHASHSEED=0 $(PY) -m tests.simulation.mutations

clean: ## remove build output and caches (keeps .venv)
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

# The documentation site. mkdocs comes from .venv once the docs dependencies are in the dev dependency group
# (mkdocs, mkdocs-material, mkdocstrings-python); MKDOCS=path uses another install.
# NO_MKDOCS_2_WARNING quiets mkdocs-material's end-of-life banner; strict warnings still fail.
MKDOCS ?= $(VENV)/bin/mkdocs
.PHONY: docs
docs: ## the documentation site in build/site (mkdocs build --strict: a broken link, anchor or API name fails)
	@command -v $(MKDOCS) >/dev/null || { echo "mkdocs not found at $(MKDOCS): run make install, or pass MKDOCS=path/to/mkdocs (needs mkdocs, mkdocs-material, mkdocstrings-python)"; exit 2; }
	NO_MKDOCS_2_WARNING=1 $(MKDOCS) build --strict -d build/site
