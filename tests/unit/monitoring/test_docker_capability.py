"""Unit tests of the host-PID probe (aic.stack.docker_capability) against a fake engine client.

The real engine, with and without an authorization plugin, is exercised by tests/integration/test_monitoring_authz.py.
"""

from __future__ import annotations

import pytest
from ansible_collections.community.docker.plugins.module_utils._api.errors import APIError

from ansible_collections.aic.stack.plugins.modules import docker_capability


class FakeResponse:
    def __init__(self, status_code):
        self.status_code = status_code
        self.url = "http+docker://localhost/v1.41/containers/create"
        self.reason = "Forbidden" if status_code == 403 else "Error"


class FakeClient:
    def __init__(self, create_error=None, delete_error=None):
        self.create_error = create_error
        self.delete_error = delete_error
        self.created = []
        self.deleted = []

    def post_json_to_json(self, path, data=None, params=None):
        assert path == "/containers/create"
        if self.create_error:
            raise self.create_error
        self.created.append((params["name"], data))
        return {"Id": "abc123", "Warnings": []}

    def delete_call(self, path, *args, params=None):
        self.deleted.append((path.format(*args), params))
        if self.delete_error:
            raise self.delete_error


def api_error(status, explanation):
    return APIError("refused", response=FakeResponse(status), explanation=explanation)


def test_allowed_creates_a_host_pid_container_and_removes_it():
    client = FakeClient()
    result = docker_capability.probe_pid_host(client, "aic-prometheus:1", "aic-probe")
    assert result == {"pid_host": "allowed", "message": "", "status_code": None}
    ((name, body),) = client.created
    assert name.startswith("aic-probe-")
    assert body["HostConfig"]["PidMode"] == "host"
    assert body["Image"] == "aic-prometheus:1"
    assert body["Labels"] == {"ai.aic.probe": "pid-host"}
    assert client.deleted == [("/containers/abc123", {"force": "1", "v": "1"})]


def test_authz_refusal_is_denied_with_the_daemons_message():
    msg = "authorization denied by plugin aic-authz: host PID namespace is not allowed"
    client = FakeClient(create_error=api_error(403, msg))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result == {"pid_host": "denied", "message": msg, "status_code": 403}
    assert client.deleted == []


def test_other_refusals_are_errors():
    client = FakeClient(create_error=api_error(404, "No such image: img:1"))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result["pid_host"] == "error"
    assert result["message"] == "No such image: img:1"
    assert result["status_code"] == 404


def test_a_failed_removal_is_a_warning_not_a_failure():
    client = FakeClient(delete_error=api_error(500, "device busy"))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result["pid_host"] == "allowed"
    assert "device busy" in result["warnings"][0]


@pytest.mark.parametrize(
    "status, message, expected",
    [
        (403, "anything", "denied"),
        (500, "Error: authorization denied by plugin x: no", "denied"),
        (400, "invalid reference format", "error"),
        (None, "connection reset", "error"),
    ],
)
def test_classify(status, message, expected):
    assert docker_capability.classify(status, message) == expected
