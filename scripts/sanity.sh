#!/usr/bin/env bash
# ansible-test sanity for the collection, on this machine: no Docker, no network but the pip index.
# ansible-test wants the collection at .../ansible_collections/aic/stack in a git repository, so the checkout's files
# (tracked and untracked-not-ignored: git ls-files -co --exclude-standard, as they are in the work tree) are copied
# into a temporary one and committed there. The collections it depends on (galaxy.yml) come from the venv's pinned
# `ansible` package, linked beside it. ansible-test puts each sanity test in a venv of its own (~/.ansible/test/venv,
# kept between runs) and puts pip into it with a get-pip script it downloads from ci-files.testing.ansible.com;
# here that script is written from the venv's own pip instead (~/.ansible/test/cache/get_pip_<version>.py).
# Usage: scripts/sanity.sh [ansible-test sanity options, e.g. --test pep8 or plugins/modules/plan.py]
# Env: VENV (default .venv), KEEP=1 keeps the temporary tree (its path is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-.venv}
case $VENV in /*) ;; *) VENV=$ROOT/$VENV ;; esac
PY=$VENV/bin/python
ANSIBLE_TEST=$VENV/bin/ansible-test
# The tests whose tool is not installed (ansible-test would only warn and skip them): shellcheck, pslint (pwsh).
SKIP=()
command -v shellcheck >/dev/null || SKIP+=(--skip-test shellcheck)
command -v pwsh >/dev/null || SKIP+=(--skip-test pslint)
start=$SECONDS

[ -x "$ANSIBLE_TEST" ] || { echo "sanity: $ANSIBLE_TEST missing (make setup)" >&2; exit 2; }
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

work=$(mktemp -d "${TMPDIR:-/tmp}/aic-sanity.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then
  echo "sanity: keeping $work" >&2
else
  trap 'rm -rf "$work"' EXIT
fi
dest=$work/ansible_collections/aic/stack
mkdir -p "$dest"

# The work tree's files; a tracked file deleted in the work tree is left out.
git ls-files -co --exclude-standard -z --deduplicate \
  | while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done \
  | tar -C "$ROOT" --null --no-recursion -T - -cf - | tar -C "$dest" -xf -
git -C "$dest" init -q
git -C "$dest" add -A
git -C "$dest" -c user.name=sanity -c user.email=sanity@localhost -c commit.gpgsign=false commit -q -m sanity

# The dependencies (galaxy.yml), from the venv's ansible package, where ansible-test looks for them: beside aic.
site=$("$PY" -c 'import ansible_collections, os; print(os.path.dirname(ansible_collections.__file__))' 2>/dev/null ||
  "$PY" -c 'import ansible_collections; print(list(ansible_collections.__path__)[0])')
for dep in community/docker community/general ansible/posix; do
  mkdir -p "$work/ansible_collections/${dep%/*}"
  ln -s "$site/$dep" "$work/ansible_collections/$dep"
done

# ansible-test's pip bootstrap (its python_requirements.get_venv_packages names the pip version), written from the
# venv's pip: like get-pip.py it carries pip as a zip, runs `pip install --upgrade --force-reinstall <args>` with it
# and drops get-pip's own --no-setuptools/--no-wheel.
pip_version=$("$PY" -c '
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$pyver"'"))["pip"])')
bootstrap=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -s "$bootstrap" ]; then
  mkdir -p "$(dirname "$bootstrap")"
  "$PY" - "$bootstrap" <<'EOF'
import base64, io, os, sys, zipfile
import pip

top = os.path.dirname(os.path.dirname(pip.__file__))
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    for d, dirs, files in os.walk(os.path.dirname(pip.__file__)):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            z.write(os.path.join(d, f), os.path.relpath(os.path.join(d, f), top))
blob = base64.b85encode(buf.getvalue()).decode()
script = '''# A stand-in for get-pip.py, written by aic.stack's scripts/sanity.sh from pip %s.
import base64, os, shutil, sys, tempfile, zipfile, io

DATA = "%s"


def main():
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    if not any(a.split("=")[0].split("<")[0].split(">")[0].strip() == "pip" for a in args):
        args.append("pip")
    tmp = tempfile.mkdtemp(prefix="get-pip-")
    try:
        zipfile.ZipFile(io.BytesIO(base64.b85decode(DATA))).extractall(tmp)
        sys.path.insert(0, tmp)
        from pip._internal.cli.main import main as pip_main
        rc = pip_main(["install", "--upgrade", "--force-reinstall"] + args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
''' % (pip.__version__, blob)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(script)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
EOF
  echo "sanity: wrote the pip bootstrap $bootstrap from pip $("$PY" -c 'import pip; print(pip.__version__)')" >&2
fi

rc=0
(cd "$dest" && "$ANSIBLE_TEST" sanity --local --python "$pyver" --color no "${SKIP[@]}" "$@") || rc=$?
echo "sanity: ansible-test sanity --python $pyver: rc $rc in $((SECONDS - start)) s" >&2
exit $rc
