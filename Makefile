# Thin front for aic.stack. Every target is one call of ansible-playbook, pytest or a script.
SHELL := /bin/bash
VENV ?= .venv
INVENTORY ?= inventories/local
BIN := $(VENV)/bin
PLAYBOOK := $(BIN)/ansible-playbook -i $(INVENTORY)

.PHONY: setup build lock-wheels deploy down test lint sanity unit integration molecule cliff-kvd cliff-spur-l2 rehearsal rehearsal-down
.DEFAULT_GOAL := deploy

## setup: create the venv with the pinned requirements and link the repo as the collection aic.stack
setup: $(VENV)/.installed .collections/ansible_collections/aic/stack

$(VENV)/.installed: requirements.txt requirements-test.txt constraints.txt scripts/setup-venv.sh scripts/venv/aic_zipimport_cache.py \
		scripts/venv/aic_zipimport_cache.pth
	scripts/setup-venv.sh $(VENV)

.collections/ansible_collections/aic/stack:
	mkdir -p .collections/ansible_collections/aic
	ln -sfn ../../.. .collections/ansible_collections/aic/stack

## deploy: install what is missing (Docker engine, debootstrap, zstd), build the images, run and check the stack
deploy: setup
	$(PLAYBOOK) deploy.yml

## build: build the images only (base + stack) and save the stack image as tarball + sha256 + manifest
build: setup
	$(PLAYBOOK) playbooks/build.yml

## lock-wheels: resolve the cpu image's pins afresh and write their lock (roles/image_build/files/cpu-wheels.lock)
lock-wheels: setup
	$(BIN)/python scripts/lock-wheels.py

## down: remove the stack's containers and network (images and data volumes are kept)
down: setup
	$(PLAYBOOK) playbooks/teardown.yml

## test: everything CI runs (lint, unit, integration on the real local stack, molecule)
test: setup
	scripts/run-tests.sh

## lint: ansible-lint (production profile) and ruff
lint: setup
	$(BIN)/ansible-lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check plugins tests bench

## sanity: ansible-test sanity with the venv's python, no Docker (scripts/sanity.sh: a copy of the checkout as
## ansible_collections/aic/stack; tests/sanity/ignore-2.19.txt); SANITY_ARGS=--test pep8 picks tests or files
SANITY_ARGS ?=
sanity: setup
	VENV=$(VENV) scripts/sanity.sh $(SANITY_ARGS)

unit: setup
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q -m integration tests/integration

molecule: setup
	molecule/run.sh

## cliff-kvd / cliff-spur-l2: the KV-cache cliff benchmark (playbooks/bench.yml) on INVENTORY's stack. Every
## override is explicit and an empty one means the profile's default: CLIFF_CONCURRENCY=1,2,4 CLIFF_ITERATIONS=1
## CLIFF_ARMS=dram,nvme CLIFF_ISL= CLIFF_PREFIX_TOKENS= CLIFF_JOB=<results dir name under logs/>
## CLIFF_WHERE=slurm runs it as a Slurm/SPUR batch job and follows it (empty: the inventory's cliff_bench_where - slurm
## for inventories/spur - else host, from here); the job's output is in
## logs/<Slurm job id>/, the results in logs/<CLIFF_JOB, else the Slurm job id>/results. CLIFF_SLURM_DIALECT=spur
## submits with SPUR's sbatch (empty: slurm_job_dialect of the inventory, else slurm).
CLIFF_CONCURRENCY ?=
CLIFF_ITERATIONS ?=
CLIFF_ARMS ?=
CLIFF_ISL ?=
CLIFF_PREFIX_TOKENS ?=
CLIFF_JOB ?=
CLIFF_WHERE ?=
CLIFF_SLURM_DIALECT ?=
# The inventory host a Slurm/SPUR benchmark job runs as, on that host's node (empty: the first of aic_nodes).
CLIFF_NODE ?=
# CLIFF_TARGET=router sends the ladder through the job's vllm-router (each arm runs it) instead of to one vLLM
CLIFF_TARGET ?=
CLIFF_VARS = -e '{"cliff_bench_job_id": "$(CLIFF_JOB)", "cliff_bench_overrides": {"concurrency": "$(CLIFF_CONCURRENCY)", "iterations": "$(CLIFF_ITERATIONS)", "arms": "$(CLIFF_ARMS)", "isl": "$(CLIFF_ISL)", "prefix_tokens": "$(CLIFF_PREFIX_TOKENS)"}}' $(addprefix -e cliff_bench_where=,$(CLIFF_WHERE)) $(addprefix -e slurm_job_dialect=,$(CLIFF_SLURM_DIALECT)) $(addprefix -e cliff_bench_slurm_limit=,$(CLIFF_NODE)) $(addprefix -e cliff_bench_target=,$(CLIFF_TARGET))

cliff-kvd: setup
	$(PLAYBOOK) playbooks/bench.yml -e cliff_bench_profile=cliff_kvd $(CLIFF_VARS)

cliff-spur-l2: setup
	$(PLAYBOOK) playbooks/bench.yml -e cliff_bench_profile=cliff_spur_l2 $(CLIFF_VARS)

## rehearsal: the SPUR rollout on this machine. A SPUR-like cluster of real parts (scripts/rehearsal.sh: REHEARSAL_NODES
## network-namespace nodes with sshd, their own Docker engine behind an authz plugin refusing --pid=host, Slurm across
## them with fake AMD GPUs, a sudo deploy user), a job on it (one GPU per node), then the operator's command
## deploy.yml -i inventories/spur with the stand-in overlay inventories/rehearsal. The stand-ins come from the local
## build (make deploy). Then: eval "$$(scripts/rehearsal.sh env)" and run any playbook with $$REHEARSAL_INVENTORY.
REHEARSAL_NODES ?= 3
rehearsal: deploy
	scripts/rehearsal.sh up $(REHEARSAL_NODES)
	scripts/rehearsal.sh alloc $(REHEARSAL_NODES) 1
	eval "$$(scripts/rehearsal.sh env)" && $(BIN)/ansible-playbook $$REHEARSAL_INVENTORY deploy.yml

## rehearsal-down: cancel the job, stop the rehearsal cluster (Slurm, nodes, their engines) and remove it
rehearsal-down:
	-eval "$$(scripts/rehearsal.sh env 2>/dev/null)" && scancel $$SLURM_JOB_ID
	scripts/rehearsal.sh down
