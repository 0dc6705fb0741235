#!/usr/bin/env bash
# Everything CI runs: the Docker engine, the real local stack, then the integration tests in parts (the rehearsal
# cluster beside the engine's unit tests, the light modules and the light molecule scenarios; the faults beside the
# other unit tests; then the local stack's beside the other molecule scenarios), with lint at nice 19 all along.
# Needs: the venv (make setup) and Prometheus's promtool (scripts/host-deps.sh). The Docker engine is started here by
# the collection's own docker_host role (playbooks/host.yml), exactly as `make deploy` starts it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
export PATH="$PWD/$BIN:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
# The checkout's own plugins, module_utils and tests are imported by some 500 ansible-playbook, molecule and pytest
# processes: Python caches their bytecode (__pycache__, ignored by git) instead of compiling them in each one, which an
# environment with PYTHONDONTWRITEBYTECODE set would make it do.
unset PYTHONDONTWRITEBYTECODE

# Each step's header also says how long the steps since the last header took and how busy the CPUs were meanwhile
# (/proc/stat: everything but idle and iowait), which tells a part that waits from a part that computes.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat; }
read -r last_total last_idle < <(cpu_ticks)
last_time=$SECONDS
step() {
  local total idle since=""
  read -r total idle < <(cpu_ticks)
  if ((total > last_total)); then
    since=", since the last: $((SECONDS - last_time)) s, CPU busy $((100 - 100 * (idle - last_idle) / (total - last_total)))%"
  fi
  last_total=$total last_idle=$idle last_time=$SECONDS
  printf '\n=== %s (%s%s) ===\n' "$1" "$(date -u +%H:%M:%S)" "$since"
}
# join PID LOG WHAT RC_BESIDE: wait for a part that ran in the background, print its output in one piece, and stop
# when it or the part beside it (its exit status RC_BESIDE) failed.
join() {
  local pid=$1 log=$2 what=$3 rc_beside=$4 rc=0
  wait "$pid" || rc=$?
  step "$what (ran in the background; rc $rc)"
  cat "$log"
  if [[ $rc -ne 0 || $rc_beside -ne 0 ]]; then
    # The cause, last, where the tail of a CI log shows it (a playbook's profile and recap come after its failure).
    if [[ $rc -ne 0 ]]; then
      step "$what: what failed"
      grep -E -A3 'fatal: \[|failed: \[|FAILED!|ERROR!|^(E|FAILED) ' "$log" | cut -c1-600 | tail -60 || true
    fi
    echo "$what: rc $rc; the part beside it: rc $rc_beside" >&2
    # Nothing left running behind the run (lint, when the deploy failed).
    wait || true
    exit 1
  fi
}

step "start the Docker engine (playbooks/host.yml, role docker_host)"
ansible-playbook -i inventories/local playbooks/host.yml
# A molecule stack that a killed run left restarts with the engine and busy-polls until molecule/run.sh removes it.
molecule/shared/remove-leftovers.sh
lanes=$(mktemp -d)
trap 'rm -rf "$lanes"' EXIT
step "the local stack, deployed as make deploy deploys it (in the background; lint beside it, at the lowest CPU priority)"
# The integration modules start from it, the rehearsal cluster takes its stand-ins from it (the cpu stack image's
# artifact, the locally built monitoring images) and some unit tests run containers of its base image, so it comes
# first. Lint and ansible-test sanity need none of it and nothing waits for them: they start here at nice 19, so they
# take only what the parts leave idle (a deploy waits on containers and health; test_faults, alone, leaves a core
# idle) and never slow a part down; their output and verdict come at the end (3.5 CPU-minutes; they used to run at
# normal priority beside the deploy and the rehearsal lane, whose two lanes keep both cores busy).
# The build outputs of the last run on this machine (the stack image's tarball and the wheelhouse, named by content):
# the build finds them instead of writing them again (scripts/build-cache.sh).
scripts/build-cache.sh seed "$PWD/.work"
ansible-playbook -i inventories/local deploy.yml >"$lanes/deploy.log" 2>&1 &
deploy_pid=$!
# Every check runs and each failure counts (set -e would not: it is off in a subshell on the left of ||).
(
  renice -n 19 -p "$BASHPID" >/dev/null
  rc=0
  step "lint: ruff"
  ruff check . || rc=1
  ruff format --check plugins tests bench || rc=1
  step "lint: ansible-lint (production profile)"
  ansible-lint || rc=1
  step "ansible-doc renders every module"
  for f in plugins/modules/*.py; do
    ansible-doc "aic.stack.$(basename "$f" .py)" >/dev/null || rc=1
  done
  step "ansible-test sanity (scripts/sanity.sh; findings ignored only with a reason in tests/sanity/ignore-2.19.txt)"
  VENV="${VENV:-.venv}" scripts/sanity.sh || rc=1
  exit $rc
) >"$lanes/lint.log" 2>&1 &
lint_pid=$!
join "$deploy_pid" "$lanes/deploy.log" "the local stack's deploy" 0
scripts/build-cache.sh keep "$PWD/.work"
# Nothing in the next part uses the local stack's services, and an idle LMCache and vLLM are not idle: LMCache's
# server drains its completion queue every 5 ms, vLLM's engine runs a gloo TCP loop thread per process group, each
# waking every 10 ms. Stopped here, they are started again by the local stack part's first deploy (a deploy finds them
# stopped and starts them).
docker stop -t 60 aic-vllm >/dev/null && docker stop aic-lmcache >/dev/null
step "integration tests: the rehearsal cluster beside the unit tests, the light modules and molecule; then the local stack's"
# The rehearsal cluster's modules have their own engines, sshd's, Slurm and ports (scripts/rehearsal.sh), so they run in
# the background beside the light lane: the unit tests that use the Docker engine (the others run beside test_faults,
# below), the light modules, then the molecule scenarios that start no vLLM (each on its own stack name and ports, on
# this engine), one at a time while the rehearsal runs and two once it ended. The CPUs are busy all along (each step's
# header says how busy), so the two lanes share them. The local stack's part comes afterwards (below): its vLLMs and the
# rehearsal's would starve each other on two cores. (Measured on the 2-core CI machine: running test_faults first and
# alone, and the local stack's other modules beside the unit tests and molecule, took longer in all: the cores were as
# busy, the rehearsal's neighbours heavier.)
pytest -q -p no:cacheprovider --basetemp="$lanes/beds-tmp" --durations=20 tests/integration --part=beds \
  >"$lanes/beds.log" 2>&1 &
beds_pid=$!
light_rc=0
step "unit tests that use the Docker engine (beside the rehearsal; the others run beside test_faults)"
pytest -q tests/unit -m engine --durations=5 || light_rc=$?
step "integration tests: the light modules (beside the rehearsal)"
[[ $light_rc -eq 0 ]] && { pytest -q tests/integration --part=light --durations=15 || light_rc=$?; }
step "molecule: six scenarios that start no vLLM and build nothing, one at a time beside the rehearsal, two once it ended"
[[ $light_rc -eq 0 ]] && {
  MOLECULE_JOBS=2 MOLECULE_BESIDE_PID=$beds_pid molecule/run.sh \
    l2_dirs l2_dirs_nosudo release node_exporter log_stream slurm_job || light_rc=$?
}
join "$beds_pid" "$lanes/beds.log" "integration tests on the rehearsal cluster (beside the unit tests, the light modules and molecule)" \
  "$light_rc"
# The monitoring images' artifacts that the rehearsal's distribution saved, for the next run too.
scripts/build-cache.sh keep "$PWD/.work"
# The local stack's part: first test_faults (--part=alone: it restarts this engine, every container on it stops,
# molecule's instances too, and bounds recoveries in seconds, which a busy neighbour breaks; beside it only the unit
# tests that never reach the engine, at a lower priority); then the local stack's other modules in the background beside
# the other molecule scenarios (the two that build images first, five that start vLLM): one scenario at a time while
# those modules run, two once they ended, image_distribute last and alone (its relay's timeouts are seconds). Alone, the
# local stack's modules keep the cores half idle (50-60 %: they mostly wait for vLLM and LMCache to start and for
# health), which the scenarios use: in CI1 of 2026-12-05 they ran 1000 s and the fourteen scenarios beside them 670 s,
# while the rehearsal lane was CPU-bound (the rehearsal alone 1015 s at 63 % busy, beside the light lane 1334 s), so
# base_image and image_build (333 s there, two real builds) moved here.
step "integration tests on the real local stack: the faults (the Docker engine's restart among them), beside the unit tests that need no engine (nice 10)"
# test_faults keeps one core idle (47 % busy alone): the unit tests that never reach the Docker engine (which it
# restarts) take it, at a lower priority than the faults' own processes (their recoveries are bounded in seconds), and
# end before the next part starts (some of them bound their own waits in seconds too).
nice -n 10 pytest -q -p no:cacheprovider --basetemp="$lanes/unit-tmp" tests/unit -m "not engine" --durations=10 \
  >"$lanes/unit.log" 2>&1 &
unit_pid=$!
faults_rc=0
pytest -q tests/integration --part=alone --durations=10 || faults_rc=$?
join "$unit_pid" "$lanes/unit.log" "the unit tests that need no engine (beside the faults)" "$faults_rc"
pytest -q -p no:cacheprovider --basetemp="$lanes/stack-tmp" --durations=30 tests/integration --part=stack \
  >"$lanes/stack.log" 2>&1 &
stack_pid=$!
molecule_rc=0
step "molecule: the other scenarios (two build images, five start vLLM), one at a time beside the local stack's modules, then image_distribute alone"
MOLECULE_JOBS=2 MOLECULE_BESIDE_PID=$stack_pid molecule/run.sh base_image image_build prometheus monitoring lmcache vllm router health teardown \
  cliff_bench amd_metrics_exporter grafana preflight rollout_lock docker_host image_distribute || molecule_rc=$?
join "$stack_pid" "$lanes/stack.log" "integration tests on the real local stack (beside molecule)" "$molecule_rc"
lint_rc=0
wait "$lint_pid" || lint_rc=$?
step "lint (ran in the background at nice 19 from the deploy on; rc $lint_rc)"
cat "$lanes/lint.log"
if [[ $lint_rc -ne 0 ]]; then
  echo "lint: rc $lint_rc (its output above)" >&2
  exit 1
fi
step "done"
