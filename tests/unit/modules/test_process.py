"""module_utils/process: pid_alive with real processes: this one, a running child, a zombie, a reaped one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ansible_collections.aic.stack.plugins.module_utils.process import pid_alive


def test_a_running_process_is_alive_and_no_pid_is_not():
    assert pid_alive(os.getpid()) is True
    assert pid_alive(0) is False and pid_alive(None) is False


def test_a_zombie_and_a_reaped_process_are_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    # Exited but not waited for: a zombie until it is reaped.
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat", encoding="utf-8") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    assert pid_alive(child.pid) is False
    child.wait()
    assert pid_alive(child.pid) is False
