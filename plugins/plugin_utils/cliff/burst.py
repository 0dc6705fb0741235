# Copyright: aic.stack contributors
# Apache-2.0
"""Bursts: ``c`` simultaneous ``POST /v1/completions`` (prefill only) and their summary."""

from __future__ import annotations

import math
import threading
import time
from collections import namedtuple

from ansible_collections.aic.stack.plugins.module_utils.coerce import (
    as_int,
)
from ansible_collections.aic.stack.plugins.plugin_utils.cliff.profiles import CliffConfigError

RequestRecord = namedtuple("RequestRecord", "index latency_s status ok prompt_tokens completion_tokens error")


def percentile(values, q):
    """Linear-interpolated percentile (``q`` in 0..100) of ``values``; None for no values."""
    data = sorted(float(v) for v in values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lower = math.floor(pos)
    upper = min(lower + 1, len(data) - 1)
    return data[lower] + (data[upper] - data[lower]) * (pos - lower)


def summarize(records, wall_s):
    """Per-burst summary: counts, p50/p95 latency of successful requests, throughput and grouped errors."""
    ok = [r for r in records if r.ok]
    latencies = [r.latency_s for r in ok]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    errors = {}
    for r in records:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    wall = max(float(wall_s), 1e-9)
    return {
        "wall_s": float(wall_s),
        "ok_count": len(ok),
        "err_count": len(records) - len(ok),
        "total_prompt_tokens": prompt_tokens,
        "total_output_tokens": output_tokens,
        "requests_per_s": len(ok) / wall,
        "throughput_tok_s_prompt": prompt_tokens / wall,
        "throughput_tok_s_total": (prompt_tokens + output_tokens) / wall,
        "p50_latency_s": percentile(latencies, 50),
        "p95_latency_s": percentile(latencies, 95),
        "errors": errors,
    }


BurstResult = namedtuple("BurstResult", "records wall_s summary max_in_flight")


def run_burst(url, model, prompts, concurrency, max_tokens=1, timeout=900.0, prompt_tokens=None):
    """Send ``prompts`` as ``POST {url}/v1/completions`` from ``concurrency`` threads released together.

    Each thread has its own ``requests.Session``; threads take the next prompt until none are left, so with
    ``len(prompts) == concurrency`` this is one burst of ``concurrency`` simultaneous requests. Token counts come
    from the response's ``usage`` (``prompt_tokens`` list as a fallback). Returns a :class:`BurstResult` whose
    ``max_in_flight`` is the client-side peak of requests in flight.
    """
    import requests

    as_int(
        "concurrency",
        concurrency,
        1,
        error=CliffConfigError,
        parse="int",
        message="{field}: expected an integer >= 1, got {value!r}",
    )
    endpoint = url.rstrip("/") + "/v1/completions"
    workers = max(1, min(concurrency, len(prompts)))
    records = [None] * len(prompts)
    lock = threading.Lock()
    next_index = [0]
    in_flight = [0, 0]  # current, max
    barrier = threading.Barrier(workers + 1)

    def one(session, index):
        body = {"model": model, "prompt": prompts[index], "max_tokens": max_tokens, "temperature": 0, "stream": False}
        fallback = prompt_tokens[index] if prompt_tokens else None
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        start = time.perf_counter()
        try:
            resp = session.post(endpoint, json=body, timeout=timeout)
            latency = time.perf_counter() - start
            status = resp.status_code
            if status != 200:
                return RequestRecord(index, latency, status, False, None, None, f"HTTP {status}: {resp.text[:120]}")
            data = resp.json()
            if not data.get("choices"):
                return RequestRecord(index, latency, status, False, None, None, "response has no choices")
            usage = data.get("usage") or {}
            return RequestRecord(
                index,
                latency,
                status,
                True,
                usage.get("prompt_tokens", fallback),
                usage.get("completion_tokens", 0),
                None,
            )
        except Exception as exc:  # noqa: BLE001 - connection errors, timeouts, bad JSON: all recorded
            latency = time.perf_counter() - start
            return RequestRecord(index, latency, None, False, None, None, f"{exc.__class__.__name__}: {exc}")
        finally:
            with lock:
                in_flight[0] -= 1

    def worker():
        with requests.Session() as session:
            barrier.wait()
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= len(prompts):
                    return
                records[index] = one(session, index)

    threads = [threading.Thread(target=worker, daemon=True) for _worker in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    return BurstResult(records, wall, summarize(records, wall), in_flight[1])
