#!/usr/bin/env bash
# Create the controller venv with the pinned requirements. Installs python3-venv from the distribution when the
# interpreter cannot create a venv (Debian/Ubuntu ship it separately).
set -euo pipefail
VENV=${1:-.venv}
PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

if ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup: installing python3-venv" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-test.txt -c constraints.txt
# The venv's compiled-code cache for modules imported from zip archives (every Ansible module's payload runs that way
# on the nodes whose interpreter is this venv's: scripts/venv/aic_zipimport_cache.py says why and how).
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
install -m 0644 scripts/venv/aic_zipimport_cache.py scripts/venv/aic_zipimport_cache.pth "$site/"
touch "$VENV/.installed"
