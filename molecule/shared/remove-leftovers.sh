#!/usr/bin/env bash
# Remove what a killed molecule run may have left on the Docker engine: instances (aic-molecule-*) and the scenarios'
# stacks (aicmol*: every scenario's aic_stack_name), with their networks and volumes. A leftover stack restarts with
# the engine (its restart policy) and keeps its LMCache and vLLM busy-polling for as long as nobody removes it.
set -euo pipefail
leftover=$(docker ps -aq --filter name=^aic-molecule- --filter name=^aicmol)
[[ -z "$leftover" ]] || docker rm -f $leftover >/dev/null
for network in $(docker network ls -q --filter name=aicmol); do docker network rm "$network" >/dev/null || true; done
for volume in $(docker volume ls -q --filter name=aicmol); do docker volume rm "$volume" >/dev/null || true; done
