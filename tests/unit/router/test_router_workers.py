"""aic.stack.router_workers and module_utils/router_api.py against the real vllm-router binary (the router image's
pin, installed in the test venv) in front of stand-in vLLM workers (local HTTP servers answering /health, /v1/models,
/v1/completions and vLLM's in-flight gauges on /metrics)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.aic.stack.plugins.module_utils import router_api
from ansible_collections.aic.stack.plugins.modules import router_workers


class StandInVllm:
    """A vLLM stand-in: healthy, one model, completions that take ``delay`` seconds, and vLLM's in-flight gauges
    (``running``: what its /metrics says, or None for the real count of completions being answered)."""

    def __init__(self, server):
        self.server = server
        self.delay = 0.0
        self.running = None
        self.busy = 0
        self.served = 0
        self.lock = threading.Lock()
        server.route("/health", 200, "")
        server.json_route("/v1/models", {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        server.handler_route("/v1/completions", self.complete, method="POST")
        server.handler_route("/metrics", self.metrics)

    @property
    def url(self):
        return self.server.url

    def complete(self, _req):
        with self.lock:
            self.busy += 1
        time.sleep(self.delay)
        with self.lock:
            self.busy -= 1
            self.served += 1
        body = {"object": "text_completion", "choices": [{"index": 0, "text": f" from {self.url}"}]}
        return 200, json.dumps(body), "application/json"

    def metrics(self, _req):
        running = self.busy if self.running is None else self.running
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0\n'
        )
        return 200, text, "text/plain; version=0.0.4"


@pytest.fixture
def workers(http_server_factory):
    return [StandInVllm(http_server_factory()) for _dummy in range(2)]


@pytest.fixture
def router(workers, vllm_router):
    """The real vllm-router, round robin over the two stand-ins, probing them every second; ready when it answers."""
    return vllm_router([w.url for w in workers])


def complete(base, timeout=30):
    body = json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": 2}).encode()
    request = urllib.request.Request(  # noqa: S310 - a local URL
        base + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310
        return resp.status, json.loads(resp.read())


def args(router, workers, **extra):
    return {"url": router, "workers": [w.url for w in workers], **extra}


def test_absent_takes_only_the_named_workers_out_and_new_requests_go_to_the_others(run_module, router, workers):
    gone, kept = workers
    result = run_module(router_workers, args(router, [gone], state="absent"))
    assert not result.failed, result
    assert result["changed"] and result["removed"] == [gone.url] and result["workers"] == [kept.url]
    assert router_api.Router(router).workers() == [kept.url]
    before = gone.served
    for _dummy in range(4):
        assert complete(router)[0] == 200
    assert gone.served == before and kept.served >= 4
    # Again: nothing left to take out.
    again = run_module(router_workers, args(router, [gone], state="absent"))
    assert not again["changed"] and again["removed"] == [] and again["workers"] == [kept.url]


def test_a_request_in_flight_when_its_worker_is_taken_out_finishes_and_the_drain_waits_for_it(
    run_module, router, workers
):
    gone, kept = workers
    gone.delay = kept.delay = 3.0
    answers = []
    # Round robin: of two requests sent at once, one is on each worker.
    threads = [threading.Thread(target=lambda: answers.append(complete(router))) for _dummy in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while gone.busy == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone.busy == 1
    result = run_module(
        router_workers, args(router, [gone], state="absent", drain_metrics=[gone.url + "/metrics"], drain_timeout=30)
    )
    for thread in threads:
        thread.join(timeout=30)
    assert result["changed"] and result["drained"] and result["in_flight"] == {}
    # It waited for the request in flight (3 s from its start), which then completed.
    assert result["drain_waited"] > 1.0 and gone.busy == 0
    assert [status for status, _body in answers] == [200, 200]
    assert any(gone.url in body["choices"][0]["text"] for _status, body in answers)


def test_a_drain_that_runs_out_of_time_says_what_is_left_and_does_not_fail(run_module, router, workers, warned):
    gone = workers[0]
    gone.running = 2  # a vLLM that keeps two requests running
    result = run_module(
        router_workers, args(router, [gone], state="absent", drain_metrics=[gone.url + "/metrics"], drain_timeout=2)
    )
    assert not result.failed and result["changed"]
    assert result["drained"] is False and result["in_flight"] == {gone.url + "/metrics": 2}
    assert result["drain_waited"] >= 2
    assert any("ran out of time" in w for w in warned), warned


def test_present_puts_a_worker_back_once_and_check_mode_changes_nothing(run_module, router, workers):
    gone, kept = workers
    router_api.Router(router).remove(gone.url)
    checked = run_module(router_workers, args(router, [gone, kept]), check_mode=True)
    assert checked["changed"] and checked["added"] == [gone.url]
    assert router_api.Router(router).workers() == [kept.url]  # check mode: still out
    result = run_module(router_workers, args(router, [gone, kept]))
    assert result["changed"] and result["added"] == [gone.url]
    assert sorted(router_api.Router(router).workers()) == sorted([gone.url, kept.url])
    again = run_module(router_workers, args(router, [gone, kept]))
    assert not again["changed"] and again["added"] == []
    # The router sends to it again.
    before = gone.served
    for _dummy in range(4):
        complete(router)
    assert gone.served > before


def test_check_mode_absent_reports_the_change_and_leaves_the_router_alone(run_module, router, workers):
    result = run_module(router_workers, args(router, workers[:1], state="absent"), check_mode=True)
    assert result["changed"] and result["removed"] == [workers[0].url]
    assert sorted(router_api.Router(router).workers()) == sorted(w.url for w in workers)


def test_a_router_that_does_not_answer_fails_naming_its_url(run_module, closed_port):
    result = run_module(router_workers, {"url": f"http://127.0.0.1:{closed_port}", "workers": ["http://w:8000"]})
    assert result.failed and f"the router at http://127.0.0.1:{closed_port}: GET /list_workers" in result["msg"]


def test_in_flight_reads_vllms_gauges_and_names_a_url_that_is_not_vllm(http_server, closed_port):
    stand_in = StandInVllm(http_server)
    stand_in.running = 3
    assert router_api.in_flight(stand_in.url + "/metrics") == 3
    http_server.route("/other", 200, "# TYPE up gauge\nup 1\n")
    with pytest.raises(router_api.RouterApiError, match=r"/other: no vllm:num_requests_running"):
        router_api.in_flight(stand_in.url + "/other")
    # An instance nobody can reach any more has nothing in flight that the drain could wait for.
    url = f"http://127.0.0.1:{closed_port}/metrics"
    assert router_api.drain([url], timeout=5) == (True, {}, pytest.approx(0, abs=1))


def test_the_drain_is_bounded_by_its_timeout_on_a_fake_clock():
    now = [0.0]
    counts = iter([2, 2, 1, 0])
    result = router_api.drain(
        ["m"], timeout=10, interval=1, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s),
        count=lambda _u: next(counts),
    )  # fmt: skip
    assert result == (True, {}, 3.0)
    now[0] = 0.0
    result = router_api.drain(
        ["m"], timeout=2.5, interval=1, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s),
        count=lambda _u: 4,
    )  # fmt: skip
    assert result == (False, {"m": 4}, 2.5)


def test_a_router_not_started_yet_is_accepted_when_not_required_and_nothing_is_done(run_module, closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    for state in ("absent", "present"):
        result = run_module(
            router_workers, {"url": url, "workers": ["http://w:8000"], "state": state, "router_required": False}
        )
        assert not result.failed and result["changed"] is False and result["router_up"] is False
        assert result["removed"] == result["added"] == [] and url in result["msg"]


def test_a_router_that_answers_wrongly_fails_even_when_not_required(run_module, http_server):
    http_server.route("/list_workers", 500, "boom")
    result = run_module(
        router_workers, {"url": http_server.url, "workers": ["http://w:8000"], "router_required": False}
    )
    assert result.failed and "GET /list_workers: expected 200" in result["msg"] and "500: boom" in result["msg"]


def test_listed_checks_the_routers_workers_exactly_and_changes_nothing(run_module, router, workers):
    urls = [w.url for w in workers]
    ok = run_module(router_workers, {"url": router, "workers": urls, "state": "listed"})
    assert not ok.failed and ok["changed"] is False and sorted(ok["workers"]) == sorted(urls)
    router_api.Router(router).remove(urls[1])
    missing = run_module(router_workers, {"url": router, "workers": urls, "state": "listed"})
    assert missing.failed and f"missing: {urls[1]}" in missing["msg"] and "not expected" not in missing["msg"]
    extra = run_module(router_workers, {"url": router, "workers": [], "state": "listed"})
    assert extra.failed and f"not expected: {urls[0]}" in extra["msg"]
    assert router_api.Router(router).workers() == [urls[0]]
