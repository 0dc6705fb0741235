"""aic.stack.vllm_health's container watch: waiting stops as soon as the watched container exited or restarted.

Pure parts (why_down, tail, wait_until's abort) with data; the watch and the module against an engine stand-in (what
they ask the engine, its multiplexed log stream); the module itself against the real Docker engine with a
container of the local base image that prints a line and exits (a bad image's vLLM), and one that keeps running.
"""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.aic.stack.plugins.module_utils.container_watch import (
    ContainerWatch,
    describe_health,
    tail,
    why_down,
)
from ansible_collections.aic.stack.plugins.module_utils.docker_api import DockerAPIError
from ansible_collections.aic.stack.plugins.module_utils.http import wait_until
from ansible_collections.aic.stack.plugins.modules import vllm_health


def test_a_running_container_that_never_restarted_may_still_come_up():
    assert why_down({"State": {"Status": "running", "ExitCode": 0}, "RestartCount": 2}, 2) is None
    assert why_down({"State": {"Status": "created"}, "RestartCount": 0}, 0) is None


def test_an_exited_container_names_its_exit_code():
    assert why_down({"State": {"Status": "exited", "ExitCode": 3}, "RestartCount": 0}, 0) == (
        "its container exited (exit code 3)"
    )


def test_a_restart_since_the_check_began_is_down_even_while_running_again():
    attrs = {"State": {"Status": "running", "ExitCode": 0}, "RestartCount": 4}
    assert why_down(attrs, 1) == "its container restarted 3 time(s) since the check began"
    restarting = {"State": {"Status": "restarting", "Restarting": True, "ExitCode": 1}}
    assert why_down(restarting, 0) == "its container restarted 1 time(s) since the check began (last exit code 1)"


def test_describe_health_names_the_status_the_streak_and_the_last_probe():
    assert describe_health({"State": {"Status": "running"}}) is None
    attrs = {
        "State": {
            "Health": {
                "Status": "unhealthy",
                "FailingStreak": 3,
                "Log": [
                    {"ExitCode": 0, "Output": ""},
                    {"ExitCode": 1, "Output": "Traceback\nTimeoutError: timed out\n"},
                ],
            }
        }
    }
    assert describe_health(attrs) == (
        "its container healthcheck says unhealthy (3 failed probe(s) in a row); "
        "last probe: exit code 1, Traceback | TimeoutError: timed out"
    )
    assert describe_health({"State": {"Health": {"Status": "starting", "FailingStreak": 0, "Log": []}}}) == (
        "its container healthcheck says starting"
    )


def test_tail_keeps_the_last_non_empty_lines_on_one_line():
    assert tail("a\n\nb\nc\n", lines=2) == "b | c"


def test_wait_until_stops_at_the_first_abort_reason():
    clock = iter(float(i) for i in range(100))
    answers = iter([None, None, "gone"])
    result = wait_until(
        lambda remaining: (False, None, "refused"),
        timeout=60,
        clock=lambda: next(clock),
        sleep=lambda s: None,
        abort=lambda: next(answers),
    )
    assert not result.ok and result.aborted == "gone" and result.attempts == 3 and result.last_error == "refused"


# -- against an engine stand-in (the unit tests' HTTP server on a unix socket, answering as the engine would) --------


def frame(stream, payload):
    """One frame of the engine's multiplexed log stream (stdout 1, stderr 2)."""
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


RUNNING = {"State": {"Status": "running", "ExitCode": 0}, "RestartCount": 1}
EXITED = {"State": {"Status": "exited", "ExitCode": 3}, "RestartCount": 1}
LOGS = frame(1, b"INFO starting vLLM\n") + frame(2, b"ModuleNotFoundError: vllm.entrypoints\n")


def test_the_watch_asks_the_engine_and_takes_its_log_stream_apart(unix_http_server):
    unix_http_server.sequence_route(
        "/containers/aic-vllm/json", [(200, json.dumps(RUNNING)), (200, json.dumps(EXITED))]
    )
    unix_http_server.route("/containers/aic-vllm/logs", body=LOGS, content_type="application/vnd.docker.raw-stream")
    watch = ContainerWatch("aic-vllm", docker_host=unix_http_server.docker_host)
    assert watch.restarts_at_start == 1
    assert watch.check() == (
        "its container exited (exit code 3); its last log lines: INFO starting vLLM | "
        "ModuleNotFoundError: vllm.entrypoints"
    )
    (req,) = unix_http_server.calls("/containers/aic-vllm/logs")
    assert sorted(req.query.split("&")) == ["stderr=1", "stdout=1", "tail=60"]
    assert watch.health() is None


def test_a_running_container_is_not_down_and_its_logs_are_not_asked_for(unix_http_server):
    unix_http_server.json_route("/containers/aic-vllm/json", RUNNING)
    watch = ContainerWatch("aic-vllm", docker_host=unix_http_server.docker_host)
    assert watch.check() is None
    assert unix_http_server.calls("/containers/aic-vllm/logs") == []


def test_an_unknown_container_is_an_error_naming_it(unix_http_server):
    with pytest.raises(DockerAPIError, match="no such container: aic-gone") as err:
        ContainerWatch("aic-gone", docker_host=unix_http_server.docker_host)
    assert err.value.status == 404


def test_the_module_fails_at_once_naming_the_exit_the_engine_reports(unix_http_server, closed_port, run_module):
    unix_http_server.sequence_route(
        "/containers/aic-vllm/json", [(200, json.dumps(RUNNING)), (200, json.dumps(EXITED))]
    )
    unix_http_server.route("/containers/aic-vllm/logs", body=LOGS, content_type="application/vnd.docker.raw-stream")
    args = {"url": f"http://127.0.0.1:{closed_port}", "model": "m", "wait_timeout": 60, "container": "aic-vllm"}
    start = time.monotonic()
    result = run_module(vllm_health, {**args, "docker_host": unix_http_server.docker_host})
    assert result.failed
    assert "waiting cannot help: its container exited (exit code 3)" in result["msg"], result["msg"]
    assert "ModuleNotFoundError: vllm.entrypoints" in result["msg"]
    assert time.monotonic() - start < 20


def test_the_module_names_a_container_the_engine_does_not_know(unix_http_server, closed_port, run_module):
    args = {"url": f"http://127.0.0.1:{closed_port}", "model": "m", "container": "aic-gone"}
    result = run_module(vllm_health, {**args, "docker_host": unix_http_server.docker_host})
    assert result.failed
    assert "cannot inspect its container 'aic-gone': no such container: aic-gone" in result["msg"], result["msg"]


# -- against the real engine ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(docker_client):
    return docker_client


@pytest.fixture
def container(client, base_image):
    made = []

    def start(command, **kwargs):
        c = client.containers.run(base_image, command, detach=True, name=f"aic-unit-watch-{time.time_ns()}", **kwargs)
        made.append(c)
        return c

    yield start
    for c in made:
        c.remove(force=True)


def test_the_module_fails_at_once_when_the_container_exits(container, closed_port, run_module):
    c = container(["sh", "-c", "echo 'ModuleNotFoundError: vllm.entrypoints'; sleep 2; exit 3"])
    url = f"http://127.0.0.1:{closed_port}"
    start = time.monotonic()
    result = run_module(vllm_health, {"url": url, "model": "m", "wait_timeout": 60, "container": c.name})
    took = time.monotonic() - start
    assert result.failed
    msg = result["msg"]
    assert msg.startswith(f"vLLM at {url}/health: not up after "), msg
    assert "waiting cannot help: its container exited (exit code 3)" in msg
    assert "ModuleNotFoundError: vllm.entrypoints" in msg
    assert took < 20, f"the check waited {took:.0f} s for a container that had exited"


def test_a_container_in_a_restart_loop_fails_the_check(container, closed_port, run_module):
    c = container(["sh", "-c", "echo crash; exit 1"], restart_policy={"Name": "always"})
    result = run_module(
        vllm_health, {"url": f"http://127.0.0.1:{closed_port}", "model": "m", "wait_timeout": 60, "container": c.name}
    )
    assert result.failed
    assert "waiting cannot help: its container" in result["msg"] and "crash" in result["msg"]


def test_a_running_container_waits_out_the_timeout(container, closed_port, run_module):
    c = container(["sleep", "60"])
    result = run_module(
        vllm_health, {"url": f"http://127.0.0.1:{closed_port}", "model": "m", "wait_timeout": 3, "container": c.name}
    )
    assert result.failed
    assert "timed out after 3s waiting for GET /health" in result["msg"]


def test_an_unknown_container_is_named(closed_port, run_module):
    result = run_module(
        vllm_health, {"url": f"http://127.0.0.1:{closed_port}", "model": "m", "container": "aic-unit-no-such"}
    )
    assert result.failed
    assert "cannot inspect its container 'aic-unit-no-such'" in result["msg"]


def test_the_watch_sees_a_container_that_is_killed_while_it_waits(client, container):
    c = container(["sleep", "60"])
    watch = ContainerWatch(c.name)
    assert watch.check() is None
    c.kill()
    c.wait(timeout=10)
    assert watch.check().startswith("its container exited (exit code 137)")


def test_a_failed_completion_reports_the_containers_own_healthcheck(vllm, container, client, run_module):
    """A hung engine: /health and /v1/models answer, the completion does not within the request timeout. The failure
    says what the container's healthcheck (the 1-token probe of the vllm role) has been saying meanwhile."""

    def hang(req):
        time.sleep(4)
        return 500, "", "text/plain"

    vllm.server.handler_route("/v1/completions", hang, method="POST")
    c = container(
        ["sleep", "60"],
        healthcheck={
            "test": ["CMD-SHELL", "echo 'URLError: timed out'; exit 1"],
            "interval": 500_000_000,
            "retries": 1,
        },
    )
    deadline = time.monotonic() + 30
    while client.api.inspect_container(c.name)["State"]["Health"]["Status"] != "unhealthy":
        assert time.monotonic() < deadline, "the container never became unhealthy"
        time.sleep(0.5)
    result = run_module(
        vllm_health,
        {"url": vllm.url, "model": "tiny-llama", "request_timeout": 2, "container": c.name},
    )
    assert result.failed
    msg = result["msg"]
    assert f"vLLM at {vllm.url}/v1/completions: POST /v1/completions failed" in msg, msg
    assert "its container healthcheck says unhealthy" in msg and "failed probe(s) in a row" in msg, msg
    assert "last probe: exit code 1, URLError: timed out" in msg, msg


def test_a_healthy_check_says_nothing_of_the_container_health(vllm, container, run_module):
    c = container(["sleep", "60"], healthcheck={"test": ["CMD-SHELL", "exit 0"], "interval": 500_000_000})
    result = run_module(vllm_health, {"url": vllm.url, "model": "tiny-llama", "container": c.name})
    assert not result.failed, result["msg"]
