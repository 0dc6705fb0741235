#!/usr/bin/env bash
# Everything CI runs: the Docker engine, the real local stack (deployed beside lint), unit tests, the integration
# tests in parts (the rehearsal cluster beside the light modules, then the local stack's), molecule.
# Needs: the venv (make setup) and Prometheus's promtool (scripts/host-deps.sh). The Docker engine is started here by
# the collection's own docker_host role (playbooks/host.yml), exactly as `make deploy` starts it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
export PATH="$PWD/$BIN:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"

step() { printf '\n=== %s (%s) ===\n' "$1" "$(date -u +%H:%M:%S)"; }

step "start the Docker engine (playbooks/host.yml, role docker_host)"
ansible-playbook -i inventories/local playbooks/host.yml
lanes=$(mktemp -d)
trap 'rm -rf "$lanes"' EXIT
step "the local stack, deployed as make deploy deploys it (in the background, beside lint)"
# The integration modules start from it, the rehearsal cluster takes its stand-ins from it (the cpu stack image's
# artifact, the locally built monitoring images) and some unit tests run containers of its base image, so it comes
# first. Much of a deploy from a clean checkout waits on the network (the wheelhouse) and on the disk (the image's
# tarball): lint runs meanwhile; its output comes when it ended.
ansible-playbook -i inventories/local deploy.yml >"$lanes/deploy.log" 2>&1 &
deploy_pid=$!
lint_rc=0
(
  set -e
  step "lint: ruff"
  ruff check .
  ruff format --check plugins tests
  step "lint: ansible-lint (production profile)"
  ansible-lint
  step "ansible-doc renders every module"
  for f in plugins/modules/*.py; do
    ansible-doc "aic.stack.$(basename "$f" .py)" >/dev/null
  done
) || lint_rc=$?
deploy_rc=0
wait "$deploy_pid" || deploy_rc=$?
step "the local stack's deploy (ran beside lint; rc $deploy_rc)"
cat "$lanes/deploy.log"
if [[ $lint_rc -ne 0 || $deploy_rc -ne 0 ]]; then
  echo "lint rc $lint_rc, deploy of the local stack rc $deploy_rc" >&2
  exit 1
fi
step "unit tests"
pytest -q tests/unit --durations=10
step "integration tests: the rehearsal cluster beside the light modules, then the local stack's"
# The rehearsal cluster's modules have their own engines, sshd's, Slurm and ports (scripts/rehearsal.sh), so they
# run in the background beside the light modules (and the molecule scenarios that need no stack), which mostly wait
# on links, builds and jobs. The local stack's modules run afterwards, alone: their vLLMs and the rehearsal's would
# starve each other on two cores. The rehearsal's output comes in one piece when it ended. The local stack's part
# ends with the default local stack deployed and healthy (tests/integration/conftest.py: AIC_TEST_LEAVE_DEFAULT_STACK=1
# deploys it at the end when the last module did not leave it): molecule's health scenario runs against it.
pytest -q -p no:cacheprovider --basetemp="$lanes/beds-tmp" --durations=20 tests/integration --part=beds \
  >"$lanes/beds.log" 2>&1 &
beds_pid=$!
light_rc=0
pytest -q tests/integration --part=light --durations=15 || light_rc=$?
step "molecule: the scenarios that need no stack (beside the rehearsal)"
[[ $light_rc -eq 0 ]] && { MOLECULE_JOBS=1 molecule/run.sh base_image nvme_slab nvme_slab_nosudo || light_rc=$?; }
beds_rc=0
wait "$beds_pid" || beds_rc=$?
step "integration tests on the rehearsal cluster (ran beside the above; rc $beds_rc)"
cat "$lanes/beds.log"
if [[ $light_rc -ne 0 || $beds_rc -ne 0 ]]; then
  echo "integration tests failed: light modules and molecule rc $light_rc, rehearsal cluster rc $beds_rc" >&2
  exit 1
fi
step "integration tests on the real local stack"
AIC_TEST_LEAVE_DEFAULT_STACK=1 pytest -q tests/integration --part=stack --durations=30
step "molecule: the scenarios that need the local stack or run alone"
molecule/run.sh health image_distribute
step "done"
