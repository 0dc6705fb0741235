# Copyright: aic.stack contributors
# Apache-2.0
"""Waiting for counters to settle: the drain wait after warm-up and around each measured burst."""

from __future__ import annotations

import time
from collections import namedtuple

DrainResult = namedtuple("DrainResult", "drained waited_s samples")


def wait_drained(read_counters, interval=2.0, settle=10.0, bound=300.0, clock=time.monotonic, sleep=time.sleep):
    """Poll ``read_counters()`` (a dict of counter values) until the values stop moving.

    Returns ``DrainResult(drained, waited_s, samples)`` as soon as the same values have been read for ``settle``
    seconds (``drained`` True), or once ``bound`` seconds have passed (``drained`` False). ``samples`` is a list
    of ``(elapsed_s, values)``. A read that raises is recorded as ``(elapsed_s, {"error": message})`` and restarts
    the settle period. Never sleeps past the bound. ``settle`` must be longer than the delay before the first
    store shows up: counters that have not moved yet look exactly like counters that stopped.
    """
    start = clock()
    samples = []
    last = None
    stable_since = None
    while True:
        now = clock()
        elapsed = now - start
        try:
            values = dict(read_counters())
        except Exception as exc:  # noqa: BLE001 - a transient scrape failure must not end a long run
            values = {"error": f"{exc.__class__.__name__}: {exc}"}
            last, stable_since = None, None
        else:
            if last is not None and values == last:
                if now - stable_since >= settle:
                    samples.append((elapsed, values))
                    return DrainResult(True, elapsed, samples)
            else:
                last, stable_since = values, now
        samples.append((elapsed, values))
        if elapsed >= bound:
            return DrainResult(False, elapsed, samples)
        sleep(max(0.0, min(float(interval), bound - elapsed)))
