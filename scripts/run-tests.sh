#!/usr/bin/env bash
# Everything CI runs, in order of cost: lint, unit tests, the real local stack (integration deploys it), molecule.
# Needs: the venv (make setup) and Prometheus's promtool (scripts/host-deps.sh). The Docker engine is started here by
# the collection's own docker_host role (playbooks/host.yml), exactly as `make deploy` starts it.
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
for f in plugins/modules/*.py; do
  ansible-doc "aic.stack.$(basename "$f" .py)" >/dev/null
done
step "start the Docker engine (playbooks/host.yml, role docker_host)"
ansible-playbook -i inventories/local playbooks/host.yml
step "unit tests"
pytest -q tests/unit --durations=10
step "integration tests on the real local stack"
# They end with the default local stack deployed and healthy (tests/integration/conftest.py: the last stack module
# deploys it; AIC_TEST_LEAVE_DEFAULT_STACK=1 deploys it at the end only when that did not happen). Molecule's health
# scenario runs against it.
AIC_TEST_LEAVE_DEFAULT_STACK=1 pytest -q tests/integration --durations=40
step "molecule"
molecule/run.sh
step "done"
