"""aic.stack.prometheus_targets against a fake targets API and against the real Prometheus binary."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.request

import pytest

from ansible_collections.aic.stack.plugins.modules import prometheus_targets

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PROMETHEUS_BIN = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


# -- fake /api/v1/targets ---------------------------------------------------------------------


def target(job, url, health="up", error="", pool=None):
    """One entry of ``data.activeTargets`` as Prometheus 2.x returns it."""
    instance = url.split("/")[2]
    return {
        "discoveredLabels": {
            "__address__": instance,
            "__metrics_path__": "/metrics",
            "__scheme__": "http",
            "__scrape_interval__": "15s",
            "__scrape_timeout__": "10s",
            "job": job,
        },
        "labels": {"instance": instance, "job": job},
        "scrapePool": pool or job,
        "scrapeUrl": url,
        "globalUrl": url,
        "lastError": error,
        "lastScrape": "2026-11-29T22:19:22.859764074Z" if health != "unknown" else "0001-01-01T00:00:00Z",
        "lastScrapeDuration": 0.0021 if health != "unknown" else 0,
        "health": health,
        "scrapeInterval": "15s",
        "scrapeTimeout": "10s",
    }


def targets_doc(*targets):
    return {"status": "success", "data": {"activeTargets": list(targets), "droppedTargets": []}}


REFUSED = 'Get "http://10.0.0.5:8080/metrics": dial tcp 10.0.0.5:8080: connect: connection refused'


def test_fake_all_up(http_server, run_module):
    http_server.json_route(
        "/api/v1/targets",
        targets_doc(
            target("vllm", "http://10.0.0.5:8000/metrics"),
            target("lmcache", "http://10.0.0.5:8080/metrics"),
            target("node", "http://10.0.0.5:9100/metrics", "down", "context deadline exceeded"),
        ),
    )
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm", "lmcache"]})
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert result["url"] == http_server.url
    assert result["jobs"] == {
        "vllm": {"health": "up", "scrape_urls": ["http://10.0.0.5:8000/metrics"], "last_error": ""},
        "lmcache": {"health": "up", "scrape_urls": ["http://10.0.0.5:8080/metrics"], "last_error": ""},
    }
    assert result["up_jobs"] == ["lmcache", "vllm"]
    assert result["down_jobs"] == []
    (call,) = http_server.calls("/api/v1/targets")
    assert call.query == "state=active"


def test_fake_check_mode(http_server, run_module):
    http_server.json_route("/api/v1/targets", targets_doc(target("vllm", "http://10.0.0.5:8000/metrics")))
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm"]}, check_mode=True)
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert len(http_server.calls("/api/v1/targets")) == 1


def test_fake_job_down_and_missing(http_server, run_module):
    http_server.json_route(
        "/api/v1/targets",
        targets_doc(
            target("vllm", "http://10.0.0.5:8000/metrics"),
            target("lmcache", "http://10.0.0.5:8080/metrics", "down", REFUSED),
        ),
    )
    start = time.monotonic()
    result = run_module(
        prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm", "lmcache", "nixl"], "wait_timeout": 2}
    )
    took = time.monotonic() - start
    assert result.failed and result.rc == 1
    assert result["changed"] is False
    assert result["msg"] == (
        f"Prometheus at {http_server.url}: 2 of 3 expected jobs not up after 2s: "
        f"job 'lmcache' is down (http://10.0.0.5:8080/metrics health=down lastError={REFUSED!r}); "
        "job 'nixl': no target configured"
    )
    assert result["jobs"]["lmcache"] == {
        "health": "down",
        "scrape_urls": ["http://10.0.0.5:8080/metrics"],
        "last_error": REFUSED,
    }
    assert result["jobs"]["nixl"] == {"health": "missing", "scrape_urls": [], "last_error": ""}
    assert result["up_jobs"] == ["vllm"]
    assert result["down_jobs"] == ["lmcache", "nixl"]
    assert 1.9 <= took < 5
    assert len(http_server.calls("/api/v1/targets")) >= 2  # kept polling until the deadline


def test_fake_unknown_until_first_scrape_then_up(http_server, run_module):
    unknown = targets_doc(target("vllm", "http://10.0.0.5:8000/metrics", "unknown"))
    up = targets_doc(target("vllm", "http://10.0.0.5:8000/metrics"))
    http_server.sequence_route(
        "/api/v1/targets", [(200, json.dumps(unknown)), (200, json.dumps(unknown)), (200, json.dumps(up))]
    )
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm"], "wait_timeout": 10})
    assert result.rc == 0, result.get("msg")
    assert result["jobs"]["vllm"]["health"] == "up"
    assert len(http_server.calls("/api/v1/targets")) == 3


def test_fake_unknown_times_out(http_server, run_module):
    http_server.json_route("/api/v1/targets", targets_doc(target("vllm", "http://10.0.0.5:8000/metrics", "unknown")))
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm"], "wait_timeout": 1})
    assert result.failed
    assert result["msg"] == (
        f"Prometheus at {http_server.url}: 1 of 1 expected jobs not up after 1s: "
        "job 'vllm' is unknown (http://10.0.0.5:8000/metrics health=unknown lastError='none')"
    )
    assert result["jobs"]["vllm"]["health"] == "unknown"


def test_fake_one_healthy_target_is_enough(http_server, run_module):
    http_server.json_route(
        "/api/v1/targets",
        targets_doc(
            target("vllm", "http://10.0.0.5:8000/metrics", "down", REFUSED),
            target("vllm", "http://10.0.0.6:8000/metrics"),
        ),
    )
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm"], "wait_timeout": 0})
    assert result.rc == 0, result.get("msg")
    assert result["jobs"]["vllm"] == {
        "health": "up",
        "scrape_urls": ["http://10.0.0.5:8000/metrics", "http://10.0.0.6:8000/metrics"],
        "last_error": REFUSED,
    }


def test_fake_job_label_differs_from_scrape_pool(http_server, run_module):
    http_server.json_route(
        "/api/v1/targets",
        targets_doc(
            target("vllm", "http://10.0.0.5:8000/metrics", pool="vllm-static"),
        ),
    )
    result = run_module(
        prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm", "vllm-static"], "wait_timeout": 0}
    )
    assert result.rc == 0, result.get("msg")
    assert result["up_jobs"] == ["vllm", "vllm-static"]


def test_fake_api_error(http_server, run_module):
    http_server.json_route("/api/v1/targets", {"status": "error", "errorType": "internal", "error": "boom"})
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm"], "wait_timeout": 0})
    assert result.failed
    assert result["msg"].startswith(
        f"Prometheus at {http_server.url}/api/v1/targets?state=active: "
        "GET /api/v1/targets?state=active answered status 'error'"
    )
    assert "boom" in result["msg"]
    assert "jobs" not in result


def test_fake_not_prometheus(http_server, run_module):
    http_server.route("/api/v1/targets", 200, "<html>Grafana</html>", "text/html")
    result = run_module(prometheus_targets, {"url": http_server.url, "expected_jobs": ["vllm"], "wait_timeout": 0})
    assert result.failed
    assert "unexpected /api/v1/targets?state=active response: <html>Grafana</html>" in result["msg"]


def test_prometheus_unreachable(closed_port, run_module):
    url = f"http://127.0.0.1:{closed_port}"
    result = run_module(prometheus_targets, {"url": url, "expected_jobs": ["vllm"], "wait_timeout": 1})
    assert result.failed
    assert result["msg"].startswith(
        f"Prometheus at {url}/api/v1/targets?state=active: GET /api/v1/targets?state=active failed: "
    )
    assert "refused" in result["msg"].lower()
    assert "(waited 1s, 2 attempts)" in result["msg"]


# -- the real Prometheus binary ---------------------------------------------------------------


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url):
    with urllib.request.urlopen(url, timeout=2) as resp:
        return json.loads(resp.read())


class PrometheusProcess:
    """``/usr/bin/prometheus`` on a free loopback port, with its config and TSDB under ``tmp_path``."""

    def __init__(self, tmp_path, jobs):
        if not (os.path.isfile(PROMETHEUS_BIN) and os.access(PROMETHEUS_BIN, os.X_OK)):
            pytest.fail(
                f"the Prometheus binary {PROMETHEUS_BIN} is missing: install the Debian package `prometheus` "
                "(apt-get install prometheus) or set PROMETHEUS_BIN; these tests need the real server",
                pytrace=False,
            )
        self.dir = tmp_path
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [address]}]} for job, address in jobs.items()
            ],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        self.log_path = tmp_path / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                PROMETHEUS_BIN,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=info",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        self.wait_ready()

    def log_tail(self, lines=20):
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"prometheus at {self.url} not ready after {timeout}s:\n{self.log_tail()}")

    def active_targets(self):
        return _get_json(self.url + "/api/v1/targets?state=active")["data"]["activeTargets"]

    def wait_scraped(self, jobs, timeout=20):
        """Wait until every job has targets that were scraped at least once (health up or down)."""
        deadline = time.monotonic() + timeout
        targets = []
        while time.monotonic() < deadline:
            targets = self.active_targets()
            health = {t["scrapePool"]: t["health"] for t in targets}
            if all(health.get(job) in ("up", "down") for job in jobs):
                return targets
            time.sleep(0.2)
        pytest.fail(f"prometheus targets not scraped after {timeout}s: {targets!r}\n{self.log_tail()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def exporters(http_server_factory):
    """Two local metrics endpoints (vLLM-like and LMCache-like) for Prometheus to scrape."""
    vllm = http_server_factory()
    vllm.route("/metrics", 200, (FIXTURES / "vllm_metrics.txt").read_text(), PROMETHEUS_TEXT)
    lmcache = http_server_factory()
    lmcache.route("/metrics", 200, (FIXTURES / "lmcache_metrics.txt").read_text(), PROMETHEUS_TEXT)
    return {"vllm": vllm, "lmcache": lmcache}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, exporters, module_closed_port):
    """Real Prometheus scraping both exporters (up) and a closed port (job ``dead``, down)."""
    jobs = {
        "vllm": f"127.0.0.1:{exporters['vllm'].port}",
        "lmcache": f"127.0.0.1:{exporters['lmcache'].port}",
        "dead": f"127.0.0.1:{module_closed_port}",
    }
    prom = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), jobs)
    try:
        # Prometheus applies new targets on its 5 s scrape-manager reload tick, then scrapes them.
        prom.wait_scraped(jobs)
        yield prom
    finally:
        prom.stop()


def test_real_prometheus_all_up(prometheus, exporters, run_module):
    result = run_module(
        prometheus_targets, {"url": prometheus.url, "expected_jobs": ["vllm", "lmcache"], "wait_timeout": 10}
    )
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert result["jobs"] == {
        "vllm": {"health": "up", "scrape_urls": [exporters["vllm"].url + "/metrics"], "last_error": ""},
        "lmcache": {"health": "up", "scrape_urls": [exporters["lmcache"].url + "/metrics"], "last_error": ""},
    }
    assert result["up_jobs"] == ["lmcache", "vllm"]
    assert result["down_jobs"] == []
    # Prometheus really scraped the vLLM-like endpoint.
    assert exporters["vllm"].calls("/metrics")


def test_real_prometheus_job_down_and_missing(prometheus, exporters, module_closed_port, run_module):
    dead_url = f"http://127.0.0.1:{module_closed_port}/metrics"
    start = time.monotonic()
    result = run_module(
        prometheus_targets, {"url": prometheus.url, "expected_jobs": ["vllm", "dead", "ghost"], "wait_timeout": 2}
    )
    took = time.monotonic() - start

    assert result.failed and result.rc == 1
    assert result["changed"] is False
    msg = result["msg"]
    assert msg.startswith(f"Prometheus at {prometheus.url}: 2 of 3 expected jobs not up after 2s: ")
    assert f"job 'dead' is down ({dead_url} health=down lastError=" in msg
    assert "connection refused" in msg
    assert "job 'ghost': no target configured" in msg
    assert "job 'vllm'" not in msg
    assert result["jobs"]["dead"]["health"] == "down"
    assert result["jobs"]["dead"]["scrape_urls"] == [dead_url]
    assert result["jobs"]["dead"]["last_error"] == (
        f'Get "{dead_url}": dial tcp 127.0.0.1:{module_closed_port}: connect: connection refused'
    )
    assert result["jobs"]["ghost"] == {"health": "missing", "scrape_urls": [], "last_error": ""}
    assert result["up_jobs"] == ["vllm"]
    assert result["down_jobs"] == ["dead", "ghost"]
    assert took < 6


def test_real_prometheus_module_waits_for_new_targets(tmp_path, exporters, run_module):
    """Right after startup Prometheus lists no target yet; the module keeps polling until the job is up."""
    prom = PrometheusProcess(tmp_path, {"vllm": f"127.0.0.1:{exporters['vllm'].port}"})
    try:
        assert prom.active_targets() == []
        result = run_module(prometheus_targets, {"url": prom.url, "expected_jobs": ["vllm"], "wait_timeout": 20})
    finally:
        prom.stop()
    assert result.rc == 0, result.get("msg")
    assert result["jobs"]["vllm"]["health"] == "up"
    assert result["elapsed"] > 1
