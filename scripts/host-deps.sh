#!/usr/bin/env bash
# System packages the test suite needs on a fresh Debian/Ubuntu machine (CI calls this before `make test`).
# The Docker engine itself is installed and started by the docker_host role (make deploy / the integration tests).
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
PKGS=(docker.io debootstrap zstd prometheus prometheus-node-exporter iproute2 openssl slurm-wlm munge openssh-server sshfs sudo acl)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
