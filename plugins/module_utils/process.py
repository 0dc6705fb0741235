# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Processes on the node: whether one is alive (the daemons of image_relay, the log streamers deploy_state watches).

(roles/log_stream/files/aic_log_stream.py, a script copied to nodes that imports nothing of the collection, keeps its
own copy of pid_alive.)
"""

from __future__ import annotations

import os


def pid_alive(pid):
    """True while ``pid`` is a live process (a zombie counts as gone; one of another user counts as alive)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
