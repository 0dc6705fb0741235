# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Watch the container of a service while a health check waits for it: a container that exited or restarted
cannot come up by waiting, so the wait stops at once with the container's exit code and last log lines instead of
running into its timeout (a bad image fails the canary in seconds, not minutes).

The Docker Engine is asked through the collection's own client (module_utils/docker_api): nothing on the node but
Python.
"""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError

LOG_LINES = 15


def why_down(attrs, restarts_at_start):
    """Why the container described by ``attrs`` (``docker inspect``) cannot answer by waiting longer, or None while
    it runs (or is being created) without having restarted since ``restarts_at_start``."""
    state = attrs.get("State") or {}
    restarts = int(attrs.get("RestartCount") or 0) - int(restarts_at_start or 0)
    code = state.get("ExitCode")
    if state.get("Status") in ("exited", "dead"):
        return f"its container exited (exit code {code})"
    if state.get("Restarting") or restarts > 0:
        # A container running again after its restart reports exit code 0: the code only means something while down.
        last = "" if state.get("Status") == "running" else f" (last exit code {code})"
        return f"its container restarted {max(restarts, 1)} time(s) since the check began{last}"
    return None


def describe_health(attrs):
    """The container's own healthcheck verdict from ``docker inspect`` (State.Health), in one line: its status, the
    failed probes in a row and the last probe's output; None when the container has no healthcheck."""
    health = (attrs.get("State") or {}).get("Health")
    if not health:
        return None
    text = f"its container healthcheck says {health.get('Status')}"
    streak = int(health.get("FailingStreak") or 0)
    if streak:
        text += f" ({streak} failed probe(s) in a row)"
    probes = health.get("Log") or []
    if probes:
        last = probes[-1]
        output = tail(last.get("Output") or "", 3)
        text += f"; last probe: exit code {last.get('ExitCode')}" + (f", {output}" if output else "")
    return text


def tail(text, lines=LOG_LINES):
    """The last ``lines`` non-empty lines of a log, joined with ' | ' (one line in Ansible's output)."""
    kept = [line.rstrip() for line in str(text).splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


class ContainerWatch:
    """``check()`` returns None while container ``name`` may still come up, else the reason (with its logs)."""

    def __init__(self, name, api=None, docker_host=None):
        self.name = name
        self.api = api or DockerAPI(docker_host or None)
        self.restarts_at_start = int(self._inspect().get("RestartCount") or 0)

    def _inspect(self):
        attrs = self.api.inspect("containers", self.name)
        if attrs is None:
            raise DockerAPIError(404, f"no such container: {self.name}")
        return attrs

    def check(self):
        attrs = self._inspect()
        reason = why_down(attrs, self.restarts_at_start)
        if reason is None:
            return None
        logs = tail(self.api.container_logs(self.name, tail=LOG_LINES * 4))
        return f"{reason}; its last log lines: {logs}" if logs else reason

    def health(self):
        """The container healthcheck's verdict (describe_health), or None without one."""
        return describe_health(self._inspect())
