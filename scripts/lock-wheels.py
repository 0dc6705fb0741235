#!/usr/bin/env python3
"""Write the lock of the cpu image's wheelhouse: pip constraints (project==version) for every wheel that the pins
of the plan (aic_pip_packages, aic_pip_nodeps_packages) pull in, except the pinned projects themselves.

    scripts/lock-wheels.py [--from WHEELHOUSE] [--output LOCK]

Without --from it resolves the pins afresh with pip download (the newest versions the pins allow) into a temporary
directory; with --from it locks an existing wheelhouse (e.g. .work/wheelhouse/<tag>, what the last build used).
The image_build role passes the lock to pip (-c), so every checkout and every CI run resolves the same wheels and
the images' content tags, which hash the wheel names, stay the same: cached images are reused, builds reproduce.
Run it (make lock-wheels) after changing the pins; commit the lock.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.aic.stack.plugins.filter.wheels import wheel_lock  # noqa: E402
from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS  # noqa: E402

LOCK = REPO / "roles" / "image_build" / "files" / "cpu-wheels.lock"
HEADER = """\
# The lock of the cpu image's wheelhouse (pip constraints), written by scripts/lock-wheels.py (make lock-wheels)
# from the pins {pins}.
# Every project those pins pull in, at the version the image was built with; the pinned projects are left to the pins.
"""


def download(directory, pins, nodeps):
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(directory)]
    subprocess.run([*pip, *pins], check=True)
    if nodeps:
        subprocess.run([*pip, "--no-deps", *nodeps], check=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=pathlib.Path, help="an existing wheelhouse to lock")
    parser.add_argument("--output", type=pathlib.Path, default=LOCK, help=f"the lock file (default {LOCK})")
    args = parser.parse_args(argv)
    pins, nodeps = DEFAULTS["aic_pip_packages"], DEFAULTS["aic_pip_nodeps_packages"]
    with tempfile.TemporaryDirectory() as tmp:
        source = args.source or pathlib.Path(tmp)
        if args.source is None:
            download(source, pins, nodeps)
        wheels = sorted(p.name for p in source.glob("*.whl"))
        if not wheels:
            parser.error(f"no wheels in {source}")
        lines = wheel_lock(wheels, [*pins, *nodeps])
    args.output.write_text(HEADER.format(pins=", ".join([*pins, *nodeps])) + "\n".join(lines) + "\n")
    print(f"{args.output}: {len(lines)} projects locked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
