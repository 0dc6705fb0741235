#!/usr/bin/env bash
# Run the molecule scenarios of aic.stack: molecule/run.sh [scenario...] (default: every molecule/*/ scenario).
# The instances are containers from the local aic-base image (no registry); the tools come from the checkout's venv.
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
# Scenarios live in molecule/, not in the collection layout's extensions/molecule/.
export MOLECULE_GLOB="molecule/*/molecule.yml"

scenarios=("$@")
if [[ ${#scenarios[@]} -eq 0 ]]; then
  for file in molecule/*/molecule.yml; do
    scenarios+=("$(basename "$(dirname "$file")")")
  done
fi

# Check preconditions before spending minutes on the other scenarios.
if [[ " ${scenarios[*]} " == *" health "* ]] &&
   [[ "$(docker inspect --format '{{.State.Running}}' aic-vllm 2>/dev/null || true)" != true ]]; then
  echo "molecule/run.sh: scenario health needs the local stack, but container aic-vllm is not running." >&2
  echo "molecule/run.sh: deploy it first: make deploy (or .venv/bin/ansible-playbook deploy.yml)" >&2
  exit 3
fi

for scenario in "${scenarios[@]}"; do
  echo "=== molecule test -s $scenario (instance image $AIC_BASE_IMAGE)"
  start=$SECONDS
  molecule test -s "$scenario"
  echo "=== molecule scenario $scenario passed in $((SECONDS - start)) s"
done
