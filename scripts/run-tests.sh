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
step "the local stack, deployed as make deploy deploys it"
# The integration modules start from it; the rehearsal cluster takes its stand-ins from it (the cpu stack image's
# artifact, the locally built monitoring images), so it must exist before the two lanes below start.
ansible-playbook -i inventories/local deploy.yml
step "integration tests: the test beds' modules beside the local stack's"
# Two lanes, side by side (one per core; each is mostly one busy process): the modules on the test beds, which have
# their own Docker engines, sshd's, Slurm and ports (scripts/testbed.sh, scripts/rehearsal.sh, a second dockerd), and
# every other module, on the host's engine and the local stack. The bed lane's output comes in one piece when both
# lanes ended. The local lane ends with the default local stack deployed and healthy (tests/integration/conftest.py:
# the last stack module deploys it; AIC_TEST_LEAVE_DEFAULT_STACK=1 deploys it at the end only when that did not
# happen): molecule's health scenario runs against it.
beds=(
  tests/integration/test_rehearsal_bed.py
  tests/integration/test_rehearsal.py
  tests/integration/test_distribute.py
  tests/integration/test_monitoring_authz.py
)
lanes=$(mktemp -d)
trap 'rm -rf "$lanes"' EXIT
pytest -q -p no:cacheprovider --basetemp="$lanes/beds-tmp" --durations=20 "${beds[@]}" >"$lanes/beds.log" 2>&1 &
beds_pid=$!
local_rc=0
AIC_TEST_LEAVE_DEFAULT_STACK=1 pytest -q tests/integration "${beds[@]/#/--ignore=}" --durations=30 || local_rc=$?
beds_rc=0
wait "$beds_pid" || beds_rc=$?
step "integration tests on the test beds (ran beside the local lane; rc $beds_rc)"
cat "$lanes/beds.log"
if [[ $local_rc -ne 0 || $beds_rc -ne 0 ]]; then
  echo "integration tests failed: local lane rc $local_rc, test-bed lane rc $beds_rc" >&2
  exit 1
fi
step "molecule"
molecule/run.sh
step "done"
