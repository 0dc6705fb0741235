#!/usr/bin/env bash
# Run the molecule scenarios of aic.stack: molecule/run.sh [scenario...] (default: every molecule/*/ scenario).
# The instances are containers of the local instance image (aic-base and the scenarios' packages, built below; no
# registry); the tools come from the checkout's venv.
#
# Scenarios share nothing (own instances, own ephemeral directories), so MOLECULE_JOBS of them (default 2, one per
# core of the CI machine) run side by side; each one's output is printed in one piece when it ends. A failure starts
# no further scenario and fails the run once the running ones ended. Timing-sensitive scenarios (ALONE: the relay's
# stall timeouts are seconds) run afterwards, by themselves. MOLECULE_JOBS=1: one after the other, output as it comes.
# MOLECULE_BESIDE_PID (below) runs one at a time while another heavy process shares the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
source "${VENV:-.venv}/bin/activate"

tag=$(docker images aic-base --format '{{.Tag}}' | grep -vx '<none>' | head -n 1 || true)
if [[ -z "$tag" ]]; then
  echo "molecule/run.sh: no aic-base image on this Docker engine; build it first (make deploy)" >&2
  exit 2
fi
export AIC_BASE_IMAGE="aic-base:$tag"
# The instances' image: the base image with the packages the scenarios' prepare steps need (shared/instance/), built
# once per base image and tagged by content.
build_log=$(mktemp)
instance=$(ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$(command -v python)" \
  -e molecule_base_image="$AIC_BASE_IMAGE" molecule/shared/instance_image.yml 2>&1 | tee "$build_log" |
  sed -n 's/^ *msg: \(aic-molecule-instance:[0-9a-f]*\)$/\1/p' | tail -n 1) || true
if [[ -z "$instance" ]]; then
  cat "$build_log" >&2
  echo "molecule/run.sh: could not build the instances' image (molecule/shared/instance_image.yml, output above)" >&2
  exit 2
fi
rm -f "$build_log"
export AIC_MOLECULE_IMAGE="$instance"
# The cpu stack image (the newest on the engine) for the scenarios that run LMCache or vLLM from it.
stack_tag=$(docker images aic-stack-cpu --format '{{.Tag}}' | grep -vx '<none>' | head -n 1 || true)
export AIC_STACK_IMAGE="aic-stack-cpu:${stack_tag:-missing}"
# Scenarios live in molecule/, not in the collection layout's extensions/molecule/.
export MOLECULE_GLOB="molecule/*/molecule.yml"

scenarios=("$@")
if [[ ${#scenarios[@]} -eq 0 ]]; then
  for file in molecule/*/molecule.yml; do
    scenarios+=("$(basename "$(dirname "$file")")")
  done
fi

# Check preconditions before spending minutes on the other scenarios.
NEEDS_STACK_IMAGE=" lmcache vllm teardown health cliff_bench "
for scenario in "${scenarios[@]}"; do
  if [[ "$NEEDS_STACK_IMAGE" == *" $scenario "* && -z "$stack_tag" ]]; then
    echo "molecule/run.sh: scenario $scenario runs the cpu stack image, but no aic-stack-cpu image is on this engine." >&2
    echo "molecule/run.sh: build it first: make deploy (or .venv/bin/ansible-playbook deploy.yml)" >&2
    exit 3
  fi
done

# What a run that was killed may have left on the engine (instances, the scenarios' stacks): removed once here, so
# the scenarios' sequences start at create instead of a cleanup and a destroy each (each scenario destroys its
# instance and removes its stack at its end, passed or failed).
molecule/shared/remove-leftovers.sh

ALONE=" image_distribute "
jobs_max=${MOLECULE_JOBS:-2}
# MOLECULE_BESIDE_PID: a process that shares this machine's cores (scripts/run-tests.sh: the rehearsal cluster's
# tests). While it runs, one scenario at a time; once it ended, MOLECULE_JOBS of them; the ALONE ones wait for it.
beside=${MOLECULE_BESIDE_PID:-}
beside_running() { # a zombie (ended, not yet reaped by its parent) counts as ended
  local state
  [[ -n "$beside" ]] && state=$(ps -o stat= -p "$beside") && [[ $state != Z* ]]
}
jobs_now() { if beside_running; then echo 1; else echo "$jobs_max"; fi; }

run_one() {
  local scenario=$1 start=$SECONDS
  echo "=== molecule test -s $scenario (instance image $AIC_MOLECULE_IMAGE)"
  molecule test -s "$scenario"
  echo "=== molecule scenario $scenario passed in $((SECONDS - start)) s"
}

side_by_side=() alone=()
for scenario in "${scenarios[@]}"; do
  if [[ "$jobs_max" -gt 1 && "$ALONE" != *" $scenario "* ]]; then side_by_side+=("$scenario"); else alone+=("$scenario"); fi
done

failed=()
if [[ ${#side_by_side[@]} -gt 0 ]]; then
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  declare -A running=() # pid -> scenario
  collect() {           # print the output of every scenario that ended (each in one piece); 1 when none had
    local pid rc ended=1
    for pid in "${!running[@]}"; do
      kill -0 "$pid" 2>/dev/null && continue
      rc=0
      wait "$pid" || rc=$?
      local scenario=${running[$pid]}
      unset "running[$pid]"
      ended=0
      cat "$logs/$scenario.log"
      if [[ $rc -ne 0 ]]; then
        echo "=== molecule scenario $scenario FAILED (rc $rc)"
        failed+=("$scenario")
      fi
    done
    return $ended
  }
  echo "=== molecule: ${side_by_side[*]} (at most $jobs_max at a time${beside:+; one at a time while process $beside runs}), then: ${alone[*]:-nothing}"
  for scenario in "${side_by_side[@]}"; do
    while [[ ${#running[@]} -ge $(jobs_now) ]]; do collect || sleep 2; done
    [[ ${#failed[@]} -eq 0 ]] || break
    run_one "$scenario" >"$logs/$scenario.log" 2>&1 &
    running[$!]=$scenario
  done
  while [[ ${#running[@]} -gt 0 ]]; do collect || sleep 2; done
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "molecule/run.sh: failed: ${failed[*]}" >&2
  exit 1
fi

if [[ ${#alone[@]} -gt 0 ]] && beside_running; then
  echo "=== molecule: ${alone[*]} wait for process $beside to end"
  while beside_running; do sleep 5; done
fi
for scenario in "${alone[@]}"; do
  run_one "$scenario"
done
