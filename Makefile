# JPU-Share — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help deps podman prometheus images cluster cluster-down install run servers test test-unit test-e2e test-slurm soak slurm-testcluster lint fmt schemas bench simulate simulate-sample philly-trace clean

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install the project with its dev tools

deps: install  ## install system packages (PostgreSQL server binaries) if missing
	bash scripts/install-deps

podman:  ## podman + runc and the base image the `container` isolation runs jobs in (root)
	bash scripts/install-podman

prometheus:  ## Debian's prometheus for the metrics tests (root; its system daemon stays off)
	bash scripts/install-prometheus

images: install podman  ## the deployment's images (service, NATS, PostgreSQL, front), no registry
	bash scripts/images

cluster: install podman  ## compose/docker-compose.yml on podman: 3 NATS, PostgreSQL, every service
	bash scripts/cluster up

cluster-down:  ## stop `make cluster` (volumes kept; scripts/cluster down -v removes them)
	bash scripts/cluster down

run: deps  ## start NATS, PostgreSQL, all services and the demo; Ctrl-C stops everything
	$(PY) -m jpu.stack run

servers: deps  ## start only the embedded NATS JetStream and PostgreSQL (prints their URLs)
	$(PY) -m jpu.stack servers

test: deps podman prometheus  ## the whole suite against real NATS, PostgreSQL, Slurm and podman (what CI runs)
	$(PY) -m pytest -q tests

test-unit: install  ## the pure-core tests only (no servers)
	$(PY) -m pytest -q tests/unit

test-e2e: deps  ## the platform as processes, driven through HTTP only
	$(PY) -m pytest -q tests/e2e

test-slurm: deps  ## the Slurm backend on a real local Slurm cluster (installs Debian's Slurm)
	bash scripts/slurm-testcluster install
	JPU_TEST_SLURM_REQUIRED=1 $(PY) -m pytest -q tests/slurm tests/integration/test_backend_contract.py -k slurm

soak: install  ## `make test` 3 times from a fresh clone in a 0700 folder, once under load (SOAK_ARGS)
	bash scripts/ci-soak $(SOAK_ARGS)

slurm-testcluster: ## start a local Slurm test cluster (fake GPUs) for JPU_SLURM_BACKEND=slurm
	bash scripts/slurm-testcluster install
	bash scripts/slurm-testcluster start

lint: install  ## ruff (lint + format check), mypy and the import layers (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy -p jpu -p jpu_services
	$(VENV)/bin/lint-imports

fmt: install  ## format the code
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

schemas: install  ## regenerate proto-schemas/ from the event structs
	$(PY) -m jpu.tools.schemas write

bench: deps  ## benchmarks (ratios against references measured in the same run)
	$(PY) bench/run_all.py

# The bundled sample of the Philly trace (data/README.md); TRACE=data/philly.csv after
# `make philly-trace` for the whole trace.
TRACE ?= data/philly-sample.csv
PHILLY_URL := https://raw.githubusercontent.com/petuum/adaptdl/de25dcc90c350b8ade3a710e437a651a8d2efae6/simulator/traces/philly.csv

simulate: install  ## the Philly trace (bundled sample; TRACE=data/philly.csv) through the simulator
	mkdir -p out
	$(VENV)/bin/jpu philly-convert --trace $(TRACE) --out out/philly.jsonl
	$(VENV)/bin/jpu simulate --cluster config/philly-cluster.yaml --workload out/philly.jsonl --out out/philly --audit

simulate-sample: install  ## the sample workload (data/sample-workload.jsonl) on the default cluster
	$(VENV)/bin/jpu simulate --cluster config/sample-cluster.yaml --workload data/sample-workload.jsonl --out out/sample --audit

philly-trace:  ## download the whole Philly trace to data/philly.csv, checked by its SHA-256
	curl -fL --retry 3 -o data/philly.csv.part $(PHILLY_URL)
	echo "$$(cut -d' ' -f1 data/philly.csv.sha256)  data/philly.csv.part" | sha256sum -c - \
		|| { rm -f data/philly.csv.part; echo "not the expected file: nothing kept" >&2; exit 1; }
	mv data/philly.csv.part data/philly.csv

clean:  ## remove the venv and local state (.jpu: embedded NATS/PostgreSQL data)
	rm -rf $(VENV) .jpu out
