"""aic.stack.vllm_health against a real local vLLM-like HTTP server."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from ansible_collections.aic.stack.plugins.modules import vllm_health

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


def _args(vllm, **overrides):
    args = {"url": vllm.url, "model": "tiny-llama", "wait_timeout": 3, "request_timeout": 5}
    args.update(overrides)
    return args


def test_success(vllm, run_module):
    result = run_module(vllm_health, _args(vllm))

    assert result.rc == 0, result.get("msg")
    assert not result.failed
    assert result["changed"] is False
    assert result["url"] == vllm.url
    assert result["model"] == "tiny-llama"
    assert result["models"] == ["tiny-llama"]
    assert result["completion_text"] == " Paris, and the capital of"
    assert result["metric_families"] == 12  # distinct vllm: families in fixtures/vllm_metrics.txt
    assert isinstance(result["elapsed"], float) and 0 <= result["elapsed"] < 3
    # Checks ran in order, each once.
    assert vllm.server.paths == ["/health", "/v1/models", "/v1/completions", "/metrics"]
    (post,) = vllm.server.calls("/v1/completions", method="POST")
    assert post.json() == {
        "model": "tiny-llama",
        "prompt": "The capital of France is",
        "max_tokens": 8,
        "temperature": 0,
    }


def test_custom_prompt_and_max_tokens(vllm, run_module):
    result = run_module(vllm_health, _args(vllm, prompt="Hello, my name is", max_tokens=2))
    assert result.rc == 0, result.get("msg")
    (post,) = vllm.server.calls("/v1/completions")
    assert post.json()["prompt"] == "Hello, my name is"
    assert post.json()["max_tokens"] == 2


def test_base_url_with_trailing_slash(vllm, run_module):
    result = run_module(vllm_health, _args(vllm, url=vllm.url + "/"))
    assert result.rc == 0, result.get("msg")
    assert "/health" in vllm.server.paths


def test_check_mode_still_runs_checks(vllm, run_module):
    result = run_module(vllm_health, _args(vllm), check_mode=True)
    assert result.rc == 0, result.get("msg")
    assert result["changed"] is False
    assert len(vllm.server.calls("/v1/completions")) == 1


def test_whitespace_completion_is_accepted(vllm, run_module):
    # A random-weight tiny model may answer with whitespace only; length > 0 is all we require.
    vllm.completion_text = "\n\n "
    result = run_module(vllm_health, _args(vllm))
    assert result.rc == 0, result.get("msg")
    assert result["completion_text"] == "\n\n "


def test_waits_for_health(vllm, run_module):
    vllm.server.sequence_route("/health", [(503, '{"detail":"Service Unavailable"}'), (200, "")])
    result = run_module(vllm_health, _args(vllm, wait_timeout=10))
    assert result.rc == 0, result.get("msg")
    assert len(vllm.server.calls("/health")) == 2
    assert result["elapsed"] >= 1.9  # one 2 s poll interval


def test_health_never_200_times_out(vllm, run_module):
    vllm.server.route("/health", 503, '{"detail":"Service Unavailable"}', "application/json")
    start = time.monotonic()
    result = run_module(vllm_health, _args(vllm, wait_timeout=3))
    took = time.monotonic() - start

    assert result.failed and result.rc == 1
    assert result["changed"] is False
    msg = result["msg"]
    assert msg.startswith(f"vLLM at {vllm.url}/health: timed out after 3s waiting for GET /health to return 200")
    assert 'last: HTTP 503: {"detail":"Service Unavailable"}' in msg
    assert 2.9 <= took < 6
    assert len(vllm.server.calls("/health")) >= 2
    assert "/v1/models" not in vllm.server.paths


def test_server_down(closed_port, run_module):
    url = f"http://127.0.0.1:{closed_port}"
    result = run_module(vllm_health, {"url": url, "model": "tiny-llama", "wait_timeout": 0})
    assert result.failed
    assert result["msg"].startswith(f"vLLM at {url}/health: timed out after 0s waiting for GET /health")
    assert "refused" in result["msg"].lower()
    assert result["url"] == url and "elapsed" in result


def test_model_missing(vllm, run_module):
    result = run_module(vllm_health, _args(vllm, model="tiny"))
    assert result.failed
    assert result["msg"] == f"vLLM at {vllm.url}: model 'tiny' not listed by /v1/models (served: ['tiny-llama'])"
    assert result["models"] == ["tiny-llama"]
    assert "/v1/completions" not in vllm.server.paths


def test_models_unexpected_payload(vllm, run_module):
    vllm.server.json_route("/v1/models", {"models": ["tiny-llama"]})
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert result["msg"].startswith(f"vLLM at {vllm.url}/v1/models: unexpected /v1/models response")
    assert '{"models": ["tiny-llama"]}' in result["msg"]


def test_empty_completion(vllm, run_module):
    vllm.completion_text = ""
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert result["msg"].startswith(
        f"vLLM at {vllm.url}/v1/completions: empty completion for model 'tiny-llama' (choices[0].text='')"
    )
    assert "/metrics" not in vllm.server.paths


def test_completion_http_error(vllm, run_module):
    vllm.server.route(
        "/v1/completions",
        500,
        '{"object":"error","message":"CUDA error: out of memory","type":"InternalServerError","code":500}',
        "application/json",
        method="POST",
    )
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert result["msg"].startswith(f"vLLM at {vllm.url}/v1/completions: POST /v1/completions returned HTTP 500: ")
    assert "CUDA error: out of memory" in result["msg"]


def test_completion_without_choices(vllm, run_module):
    vllm.server.json_route("/v1/completions", {"id": "cmpl-1", "choices": []}, method="POST")
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert "unexpected /v1/completions response (no choices[0].text)" in result["msg"]


def test_no_vllm_metrics(vllm, run_module):
    vllm.server.route(
        "/metrics",
        200,
        "# HELP process_open_fds Number of open file descriptors.\n"
        "# TYPE process_open_fds gauge\nprocess_open_fds 42.0\n"
        "# HELP python_info Python platform information\n# TYPE python_info gauge\n"
        'python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0\n',
    )
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert result["msg"] == f"vLLM at {vllm.url}/metrics: no vllm: metrics (found 2 families)"
    assert result["completion_text"] == " Paris, and the capital of"


def test_custom_metric_prefix(vllm, run_module):
    result = run_module(vllm_health, _args(vllm, metric_prefix="vllm:prefix_cache"))
    assert result.rc == 0, result.get("msg")
    assert result["metric_families"] == 2
    result = run_module(vllm_health, _args(vllm, metric_prefix="sglang:"))
    assert result["msg"] == f"vLLM at {vllm.url}/metrics: no sglang: metrics (found 18 families)"


def test_metrics_not_prometheus_text(vllm, run_module):
    vllm.server.route("/metrics", 200, "<html><body>Not Found</body></html>", "text/html")
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert result["msg"].startswith(f"vLLM at {vllm.url}/metrics: invalid Prometheus exposition text")


def test_metrics_missing_endpoint(vllm, run_module):
    vllm.server.remove_route("/metrics")
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert result["msg"] == f'vLLM at {vllm.url}/metrics: GET /metrics returned HTTP 404: {{"detail":"Not Found"}}'


def test_missing_prometheus_client(vllm, run_module, monkeypatch):
    monkeypatch.setattr(vllm_health, "HAS_PROMETHEUS_CLIENT", False)
    monkeypatch.setattr(vllm_health, "PROMETHEUS_CLIENT_IMPORT_ERROR", "Traceback: No module named 'prometheus_client'")
    result = run_module(vllm_health, _args(vllm))
    assert result.failed
    assert "Failed to import the required Python library (prometheus_client)" in result["msg"]
    assert vllm.server.paths == []


def test_runs_as_standalone_script(vllm, tmp_path):
    """The module file runs as a script with an args file, as ansible does on a managed node."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": _args(vllm)}))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / ".collections"))
    proc = subprocess.run(
        [sys.executable, "-m", "ansible_collections.aic.stack.plugins.modules.vllm_health", str(args_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["changed"] is False
    assert result["models"] == ["tiny-llama"]
    assert result["metric_families"] == 12


@pytest.mark.parametrize("missing", ["url", "model"])
def test_required_options(vllm, run_module, missing):
    args = _args(vllm)
    del args[missing]
    result = run_module(vllm_health, args)
    assert result.failed
    assert f"missing required arguments: {missing}" in result["msg"]
