"""Unit tests of the host-PID probe (aic.stack.docker_capability): its engine client is the collection's own
(module_utils/docker_api), talking HTTP over a unix socket to an engine stand-in (the unit tests' LocalHTTPServer)
that answers as an authorization plugin or a daemon would, and to this machine's real engine where one runs.

The real engine behind a real authorization plugin is exercised by tests/integration/test_monitoring_authz.py.
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPI, DockerAPIError
from ansible_collections.aic.stack.plugins.modules import docker_capability


@pytest.fixture
def engine(unix_http_server):
    """``engine(create=(status, message), delete=(status, message))`` -> (DockerAPI client, the stand-in)."""

    def start(create=(201, ""), delete=(204, "")):
        status, message = create
        doc = {"Id": "abc123", "Warnings": []} if status == 201 else {"message": message}
        unix_http_server.json_route("/containers/create", doc, status=status, method="POST")
        status, message = delete
        if message:
            unix_http_server.json_route("/containers/abc123", {"message": message}, status=status, method="DELETE")
        else:
            unix_http_server.route("/containers/abc123", status=status, method="DELETE")
        return DockerAPI(unix_http_server.docker_host, timeout=5), unix_http_server

    return start


def test_allowed_creates_a_host_pid_container_and_removes_it(engine):
    client, server = engine()
    result = docker_capability.probe_pid_host(client, "aic-prometheus:1", "aic-probe")
    assert result == {"pid_host": "allowed", "message": "", "status_code": None}
    (create,) = server.calls("/containers/create", "POST")
    assert create.query.startswith("name=aic-probe-")
    body = create.json()
    assert body["HostConfig"]["PidMode"] == "host"
    assert body["Image"] == "aic-prometheus:1"
    assert body["Labels"] == {"ai.aic.probe": "pid-host"}
    assert [r.query for r in server.calls("/containers/abc123", "DELETE")] == ["force=1&v=1"]


def test_authz_refusal_is_denied_with_the_daemons_message(engine):
    msg = "authorization denied by plugin aic-authz: host PID namespace is not allowed"
    client, server = engine(create=(403, msg))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result == {"pid_host": "denied", "message": msg, "status_code": 403}
    assert server.calls("/containers/abc123") == []


def test_other_refusals_are_errors(engine):
    client, _dummy = engine(create=(404, "No such image: img:1"))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result["pid_host"] == "error"
    assert result["message"] == "No such image: img:1"
    assert result["status_code"] == 404


def test_a_failed_removal_is_a_warning_not_a_failure(engine):
    client, _dummy = engine(delete=(500, "device busy"))
    result = docker_capability.probe_pid_host(client, "img:1", "p")
    assert result["pid_host"] == "allowed"
    assert "device busy" in result["warnings"][0]


def test_an_engine_that_is_not_there_is_no_answer(tmp_path):
    with pytest.raises(DockerAPIError) as err:
        docker_capability.probe_pid_host(DockerAPI(f"unix://{tmp_path}/none.sock", timeout=2), "img:1", "p")
    assert err.value.status is None


@pytest.mark.skipif(not os.path.exists("/var/run/docker.sock"), reason="no Docker engine on this machine")
def test_this_machines_engine_allows_it_and_keeps_no_probe_container():
    client = DockerAPI("unix:///var/run/docker.sock", timeout=60)
    images = [
        i for i in client.call("GET", "/images/json") if i.get("RepoTags") and i["RepoTags"][0] != "<none>:<none>"
    ]
    if not images:
        pytest.skip("no tagged image on this engine")
    result = docker_capability.probe_pid_host(client, images[0]["RepoTags"][0], "aic-unit-probe")
    assert result == {"pid_host": "allowed", "message": "", "status_code": None}
    left = client.call(
        "GET", "/containers/json", params={"all": "1", "filters": json.dumps({"label": ["ai.aic.probe"]})}
    )
    assert not [c for c in left if any(n.startswith("/aic-unit-probe-") for n in c["Names"])]


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
