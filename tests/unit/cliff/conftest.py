"""Fixtures for the cliff benchmark tests: a deterministic test tokenizer and a fake vLLM HTTP server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class WhitespaceTestTokenizer:
    """Deterministic stand-in for a real tokenizer: one token per whitespace-separated word, plus one extra token
    per started 8 bytes beyond the first 8 of a word (so long words cost several tokens, like BPE)."""

    def __call__(self, text):
        tokens = []
        for word in text.split():
            data = word.encode("utf-8")
            pieces = [data[i : i + 8] for i in range(0, len(data), 8)]
            tokens.extend(int.from_bytes(piece[:4].ljust(4, b"\0"), "big") for piece in pieces)
        return tokens


class _BigBacklogServer(ThreadingHTTPServer):
    # The default listen backlog (5) drops SYNs of a 32-request burst; the client retries a second later and the
    # burst never reaches its concurrency.
    request_queue_size = 1024
    daemon_threads = True


class FakeVLLM:
    """A ThreadingHTTPServer that mimics vLLM's /v1/completions, /tokenize, /v1/models and /metrics.

    Completions sleep ``delay`` seconds; the server records the peak number of requests in flight. /metrics
    counts every completion as ``prompt_tokens`` queries and ``hit_ratio`` of them as hits.
    """

    def __init__(self, delay=0.2, tokenizer=None, hit_ratio=0.5, model="fake-model"):
        self.delay = delay
        self.tokenizer = tokenizer or WhitespaceTestTokenizer()
        self.hit_ratio = hit_ratio
        self.model = model
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.completions = []
        self.queries = 0.0
        self.hits = 0.0
        self.fail_every = 0
        self._httpd = None

    def start(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status, body, content_type="application/json"):
                data = body.encode("utf-8") if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"object": "list", "data": [{"id": outer.model}]}))
                elif self.path == "/metrics":
                    self._send(200, outer.metrics_text(), "text/plain; version=0.0.4")
                elif self.path == "/health":  # what the job's router probes
                    self._send(200, "")
                else:
                    self._send(404, '{"detail":"Not Found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/tokenize":
                    tokens = outer.tokenizer(body["prompt"])
                    self._send(200, json.dumps({"count": len(tokens), "tokens": tokens}))
                elif self.path == "/v1/completions":
                    status, reply = outer.complete(body)
                    self._send(status, json.dumps(reply))
                else:
                    self._send(404, '{"detail":"Not Found"}')

            def log_message(self, format, *args):
                pass

        self._httpd = _BigBacklogServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def complete(self, body):
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.completions.append(body)
            number = len(self.completions)
        try:
            time.sleep(self.delay)
            if self.fail_every and number % self.fail_every == 0:
                return 503, {"detail": "overloaded"}
            prompt_tokens = len(self.tokenizer(body["prompt"]))
            with self.lock:
                self.queries += prompt_tokens
                self.hits += prompt_tokens * self.hit_ratio
            return 200, {
                "id": f"cmpl-{number}",
                "object": "text_completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
            }
        finally:
            with self.lock:
                self.in_flight -= 1

    def metrics_text(self):
        with self.lock:
            q, h = self.queries, self.hits
        labels = '{engine="0",model_name="fake-model"}'
        return (
            "# HELP vllm:prefix_cache_queries Prefix cache queries.\n"
            "# TYPE vllm:prefix_cache_queries counter\n"
            f"vllm:prefix_cache_queries_total{labels} {q}\n"
            "# HELP vllm:prefix_cache_hits Prefix cache hits.\n"
            "# TYPE vllm:prefix_cache_hits counter\n"
            f"vllm:prefix_cache_hits_total{labels} {h}\n"
            "# HELP vllm:external_prefix_cache_queries External prefix cache queries.\n"
            "# TYPE vllm:external_prefix_cache_queries counter\n"
            f"vllm:external_prefix_cache_queries_total{labels} {q}\n"
            "# HELP vllm:external_prefix_cache_hits External prefix cache hits.\n"
            "# TYPE vllm:external_prefix_cache_hits counter\n"
            f"vllm:external_prefix_cache_hits_total{labels} 0.0\n"
        )


@pytest.fixture
def test_tokenizer():
    return WhitespaceTestTokenizer()


@pytest.fixture
def fake_vllms():
    """Start more :class:`FakeVLLM` servers (``fake_vllms(n, delay=...)`` returns a list), stopped after the test."""
    servers = []

    def start(n, **kwargs):
        new = [FakeVLLM(**kwargs).start() for _dummy in range(n)]
        servers.extend(new)
        return new

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def fake_vllm():
    server = FakeVLLM().start()
    try:
        yield server
    finally:
        server.stop()
