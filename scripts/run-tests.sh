#!/usr/bin/env bash
# Everything CI runs, in order of cost: lint, unit tests, the real local stack (deploy + integration), molecule.
# Needs: the venv (make setup), a Docker engine (make deploy starts one), Prometheus's promtool (scripts/host-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
export PATH="$PWD/$BIN:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"

step() { printf '\n=== %s (%s) ===\n' "$1" "$(date -u +%H:%M:%S)"; }

step "lint: ruff"
ruff check .
ruff format --check plugins tests
step "lint: ansible-lint (production profile)"
ansible-lint
step "ansible-doc renders every module"
for m in plan vllm_health lmcache_health prometheus_targets; do
  ansible-doc "aic.stack.$m" >/dev/null
done
step "unit tests"
pytest -q tests/unit
step "integration tests on the real local stack"
pytest -q tests/integration
step "molecule"
molecule/run.sh
step "done"
