"""vLLM-like and LMCache-like HTTP servers for the module tests."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
VLLM_METRICS = (FIXTURES / "vllm_metrics.txt").read_text()
LMCACHE_METRICS = (FIXTURES / "lmcache_metrics.txt").read_text()
# What prometheus_client / vLLM's /metrics endpoint sends.
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

SERVED_MODEL = "tiny-llama"


def _resp(status, obj):
    return status, json.dumps(obj), "application/json"


class FakeVLLM:
    """Route set that behaves like ``vllm serve`` (OpenAI-compatible API server)."""

    def __init__(self, server, served_model=SERVED_MODEL):
        self.server = server
        self.served_model = served_model
        self.completion_text = " Paris, and the capital of"
        self.completion_prompts = []
        server.route("/health", 200, "")  # vLLM answers an empty 200 once the engine is ready
        server.json_route(
            "/v1/models",
            {
                "object": "list",
                "data": [
                    {
                        "id": served_model,
                        "object": "model",
                        "created": 1764394300,
                        "owned_by": "vllm",
                        "root": "/models/" + served_model,
                        "parent": None,
                        "max_model_len": 2048,
                        "permission": [],
                    }
                ],
            },
        )
        server.handler_route("/v1/completions", self._completions, method="POST")
        server.route("/metrics", 200, VLLM_METRICS, PROMETHEUS_TEXT)

    @property
    def url(self):
        return self.server.url

    def _completions(self, req):
        try:
            body = req.json()
        except ValueError:
            return _resp(400, {"object": "error", "message": "invalid JSON", "type": "BadRequestError", "code": 400})
        if body.get("model") != self.served_model:
            return _resp(
                404,
                {
                    "object": "error",
                    "message": "The model `{}` does not exist.".format(body.get("model")),
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                },
            )
        if not isinstance(body.get("prompt"), str) or not isinstance(body.get("max_tokens"), int):
            return _resp(400, {"object": "error", "message": "bad request", "type": "BadRequestError", "code": 400})
        self.completion_prompts.append(body["prompt"])
        return _resp(
            200,
            {
                "id": "cmpl-5f0c3b8e2a1d4c6f9e7b",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.served_model,
                "choices": [
                    {
                        "index": 0,
                        "text": self.completion_text,
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                        "prompt_logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": 6,
                    "total_tokens": 6 + body["max_tokens"],
                    "completion_tokens": body["max_tokens"],
                    "prompt_tokens_details": None,
                },
            },
        )


class FakeLMCache:
    """Route set that behaves like an LMCache server HTTP port (``/health`` is a 404)."""

    def __init__(self, server):
        self.server = server
        server.json_route("/healthcheck", {"status": "healthy"})
        server.route("/metrics", 200, LMCACHE_METRICS, PROMETHEUS_TEXT)

    @property
    def url(self):
        return self.server.url


@pytest.fixture
def vllm(http_server):
    return FakeVLLM(http_server)


@pytest.fixture
def lmcache(http_server):
    return FakeLMCache(http_server)
