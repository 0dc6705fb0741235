#!/usr/bin/env bash
# Keep the local build's outputs between test runs on this machine, as the Docker engine keeps the images they were
# made from: the stack image's artifacts (tarball, .sha256 and manifest, named by the image's content tag) and the
# wheelhouse (one directory per pin set and lock). A fresh checkout (every CI run) otherwise writes the 1.6 GB
# tarball again through zstd (about two CPU-minutes) and downloads the wheelhouse again, for an image the engine has.
#
#   scripts/build-cache.sh seed WORK_DIR   before the deploy: copy what the cache has into WORK_DIR/artifacts and
#                                          WORK_DIR/wheelhouse, never over a file there. The build then finds the
#                                          artifact of the same image id complete (aic.stack.image_artifact checks the
#                                          id and writes nothing; it writes the release pointer itself) and the
#                                          wheelhouse of its pin set (the download task `creates:` it).
#   scripts/build-cache.sh keep WORK_DIR   after the deploy: the cache becomes what WORK_DIR has (older outputs go).
#
# Copies (reflinks where the file system has them), never hard links: tests corrupt artifacts on purpose; a tarball
# enters the cache only when it matches its .sha256 (checked once, when kept). Release
# pointers (<image>.current.json) are never cached: each deploy writes its own. AIC_BUILD_CACHE: the cache directory
# (default $XDG_CACHE_HOME/aic-stack/build-outputs, else ~/.cache/aic-stack/build-outputs), or "off".
set -euo pipefail
action=${1:-}
work=${2:-}
if [[ -z "$work" || ("$action" != seed && "$action" != keep) ]]; then
  echo "usage: $0 seed|keep WORK_DIR" >&2
  exit 2
fi
cache=${AIC_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aic-stack/build-outputs}
[[ "$cache" == off ]] && exit 0

# The artifacts of content-tagged images: <image>-<12 hex>.tar.zst, .tar.zst.sha256 and .manifest.json.
artifacts() { find "$1" -maxdepth 1 -type f -regextype posix-extended \
  -regex '.*-[0-9a-f]{12}\.(tar\.zst|tar\.zst\.sha256|manifest\.json)' -printf '%f\n' 2>/dev/null | sort; }
wheelhouses() { find "$1" -mindepth 1 -maxdepth 1 -type d ! -name '*.partial' -printf '%f\n' 2>/dev/null | sort; }
copy() { cp -a --reflink=auto "$1" "$2"; }

# intact DIR NAME: the artifact NAME belongs to (its tarball, .sha256 or manifest) has a tarball that matches its
# .sha256 in DIR (the cache takes only verified artifacts; each tarball is read once).
declare -A checked=()
intact() {
  local base=${2%.manifest.json}
  base=${base%.tar.zst.sha256}
  base=${base%.tar.zst}
  if [[ -z "${checked[$base]:-}" ]]; then
    checked[$base]=bad
    if [[ -f "$1/$base.tar.zst" && -f "$1/$base.tar.zst.sha256" ]] &&
      (cd "$1" && sha256sum --quiet --status -c "$base.tar.zst.sha256"); then
      checked[$base]=ok
    fi
  fi
  [[ "${checked[$base]}" == ok ]]
}

# copy_new FROM TO [verify]: every artifact and wheelhouse of FROM that TO lacks, each complete or not at all; with
# verify, a tarball only when it matches its .sha256.
copy_new() {
  local from=$1 to=$2 verify=${3:-} name
  mkdir -p "$to/artifacts" "$to/wheelhouse"
  while read -r name; do
    [[ -n "$name" && ! -e "$to/artifacts/$name" ]] || continue
    if [[ -n "$verify" ]] && ! intact "$from/artifacts" "$name"; then
      echo "build-cache: $name: its tarball is missing or does not match its .sha256: not cached"
      continue
    fi
    copy "$from/artifacts/$name" "$to/artifacts/.$name.partial"
    mv "$to/artifacts/.$name.partial" "$to/artifacts/$name"
    echo "build-cache: $name -> $to/artifacts"
  done < <(artifacts "$from/artifacts")
  while read -r name; do
    [[ -n "$name" && ! -e "$to/wheelhouse/$name" ]] || continue
    rm -rf "$to/wheelhouse/.$name.partial"
    copy "$from/wheelhouse/$name" "$to/wheelhouse/.$name.partial"
    mv "$to/wheelhouse/.$name.partial" "$to/wheelhouse/$name"
    echo "build-cache: wheelhouse $name -> $to/wheelhouse"
  done < <(wheelhouses "$from/wheelhouse")
}

if [[ "$action" == seed ]]; then
  [[ -d "$cache" ]] || exit 0
  copy_new "$cache" "$work"
  exit 0
fi

copy_new "$work" "$cache" verify
# What this run did not use goes (one generation: the cache never grows past one build's outputs).
while read -r name; do
  [[ -n "$name" && ! -e "$work/artifacts/$name" ]] || continue
  rm -f "$cache/artifacts/$name"
  echo "build-cache: $name dropped (not this run's)"
done < <(artifacts "$cache/artifacts")
while read -r name; do
  [[ -n "$name" && ! -e "$work/wheelhouse/$name" ]] || continue
  rm -rf "$cache/wheelhouse/$name"
  echo "build-cache: wheelhouse $name dropped (not this run's)"
done < <(wheelhouses "$cache/wheelhouse")
