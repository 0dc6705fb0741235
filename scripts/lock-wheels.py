#!/usr/bin/env python3
"""Write the lock of an image's wheelhouse: pip constraints (project==version) for every wheel that the pins pull in,
except the pinned projects themselves. The cpu stack image's pins are the plan's aic_pip_packages and
aic_pip_nodeps_packages; the router image's (--image router) vllm-router==aic_router_version.

    scripts/lock-wheels.py [--image cpu|router] [--from WHEELHOUSE] [--output LOCK]

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

LOCKS = {
    "cpu": REPO / "roles" / "image_build" / "files" / "cpu-wheels.lock",
    "router": REPO / "roles" / "router" / "files" / "router-wheels.lock",
}
HEADER = """\
# The lock of the {image} image's wheelhouse (pip constraints), written by scripts/lock-wheels.py (make lock-wheels)
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
    parser.add_argument("--image", choices=sorted(LOCKS), default="cpu", help="whose pins to lock (default cpu)")
    parser.add_argument("--from", dest="source", type=pathlib.Path, help="an existing wheelhouse to lock")
    parser.add_argument("--output", type=pathlib.Path, help="the lock file (default: the image's, under roles/)")
    args = parser.parse_args(argv)
    if args.image == "router":
        pins, nodeps = [f"vllm-router=={DEFAULTS['aic_router_version']}"], []
    else:
        pins, nodeps = DEFAULTS["aic_pip_packages"], DEFAULTS["aic_pip_nodeps_packages"]
    output = args.output or LOCKS[args.image]
    with tempfile.TemporaryDirectory() as tmp:
        source = args.source or pathlib.Path(tmp)
        if args.source is None:
            download(source, pins, nodeps)
        wheels = sorted(p.name for p in source.glob("*.whl"))
        if not wheels:
            parser.error(f"no wheels in {source}")
        lines = wheel_lock(wheels, [*pins, *nodeps])
    output.write_text(HEADER.format(image=args.image, pins=", ".join([*pins, *nodeps])) + "\n".join(lines) + "\n")
    print(f"{output}: {len(lines)} projects locked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
