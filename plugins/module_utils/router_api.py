# Copyright: aic.stack contributors
# Apache-2.0
"""The job's vllm-router, driven through its HTTP API (vllm-router 0.1.17): which workers it routes to, taking
workers out (and waiting until the vLLM instances behind them have nothing in flight) and putting them back.

- ``GET /list_workers`` answers ``{"urls": [...]}``;
- ``POST /remove_worker?url=U`` stops routing new requests to U at once (requests already sent to it finish: the
  router does not cut them); removing a worker it does not have answers 200 as well;
- ``POST /add_worker?url=U`` returns once U passed the router's health check (bounded by the router's own
  ``--worker-startup-timeout-secs``), 400 ``already exists`` when it is there.

What is in flight on an instance is vLLM's own count (``vllm:num_requests_running`` + ``vllm:num_requests_waiting`` on
its ``/metrics``): it also counts requests a client sent to the instance directly, past the router.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from ansible_collections.aic.stack.plugins.module_utils import metrics
from ansible_collections.aic.stack.plugins.module_utils.http import HttpRequestError, excerpt, join_url, request

IN_FLIGHT_SAMPLES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


class RouterApiError(Exception):
    """The router (or an instance's metrics) did not answer as expected; the message names the URL. ``unreachable``:
    no HTTP answer at all (nothing listens there, or it timed out)."""

    def __init__(self, msg, unreachable=False):
        super().__init__(msg)
        self.unreachable = unreachable


class Router:
    """One vllm-router at ``base`` (``http://host:30000``); every request bounded by ``timeout`` seconds."""

    def __init__(self, base, timeout=10, send=request):
        self.base = base.rstrip("/")
        self.timeout = timeout
        self._send = send

    def _call(self, method, path, timeout=None):
        url = join_url(self.base, path)
        try:
            return self._send(url, method=method, timeout=timeout or self.timeout)
        except HttpRequestError as exc:
            raise RouterApiError(f"the router at {self.base}: {method} {path}: {exc.reason}", unreachable=True) from exc

    def workers(self):
        """The worker URLs the router routes to now."""
        resp = self._call("GET", "/list_workers")
        try:
            urls = resp.json()["urls"] if resp.status == 200 else None
        except (ValueError, KeyError, TypeError):
            urls = None
        if not isinstance(urls, list):
            raise RouterApiError(
                f'the router at {self.base}: GET /list_workers: expected 200 {{"urls": [...]}}, got '
                f"{resp.status}: {excerpt(resp.body)}"
            )
        return [str(u) for u in urls]

    def remove(self, worker):
        resp = self._call("POST", "/remove_worker?url=" + quote(worker, safe=""))
        if resp.status != 200:
            raise RouterApiError(
                f"the router at {self.base}: removing worker {worker}: {resp.status}: {excerpt(resp.body)}"
            )

    def add(self, worker, timeout):
        """Add ``worker``; the router answers once it passed its health check (``timeout`` bounds the wait)."""
        resp = self._call("POST", "/add_worker?url=" + quote(worker, safe=""), timeout=timeout)
        if resp.status == 200 or (resp.status == 400 and "already exists" in resp.body):
            return
        raise RouterApiError(f"the router at {self.base}: adding worker {worker}: {resp.status}: {excerpt(resp.body)}")


def in_flight(metrics_url, timeout=10, send=request):
    """The requests vLLM at ``metrics_url`` (its ``/metrics``) is running or holding: vLLM's own gauges."""
    try:
        resp = send(metrics_url, timeout=timeout)
    except HttpRequestError as exc:
        raise RouterApiError(f"{metrics_url}: {exc.reason}") from exc
    if resp.status != 200:
        raise RouterApiError(f"{metrics_url}: {resp.status}: {excerpt(resp.body)}")
    try:
        families = metrics.parse(resp.body)
        values = [metrics.sample_value(families, name) for name in IN_FLIGHT_SAMPLES]
    except metrics.MetricsParseError as exc:
        raise RouterApiError(f"{metrics_url}: not Prometheus text: {exc}") from exc
    if all(v is None for v in values):
        raise RouterApiError(f"{metrics_url}: no {' or '.join(IN_FLIGHT_SAMPLES)} sample (is it vLLM's /metrics?)")
    return int(sum(v or 0 for v in values))


def drain(metrics_urls, timeout, interval=1.0, clock=time.monotonic, sleep=time.sleep, count=in_flight):
    """Wait until no instance of ``metrics_urls`` has a request in flight, at most ``timeout`` seconds.

    Returns ``(drained, left, waited)``: whether they all reached 0, what was still in flight per URL at the end (an
    instance whose metrics did not answer counts as drained: nothing can reach it), the seconds waited."""
    start = clock()
    while True:
        left = {}
        for url in metrics_urls:
            try:
                n = count(url)
            except RouterApiError:
                n = 0
            if n:
                left[url] = n
        waited = clock() - start
        if not left or waited >= timeout:
            return not left, left, round(waited, 3)
        sleep(min(interval, max(0.0, timeout - waited)))
