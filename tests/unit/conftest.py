"""Fixtures for unit tests: a real local HTTP server and an in-process module runner.

``ansible_collections.aic.stack`` is made importable by tests/conftest.py.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import docker
import pytest

# The unit tests that use this machine's Docker engine are marked ``engine``: those that take the fixtures below and
# the modules that reach it otherwise (the SDK or the CLI on /var/run/docker.sock, each test skipped without an engine).
# scripts/run-tests.sh runs the others (-m "not engine") beside test_faults, which restarts the engine.
ENGINE_FIXTURES = frozenset(("docker_client", "base_image"))
ENGINE_MODULES = frozenset(
    (
        "test_docker_api.py",
        "test_docker_capability.py",
        "test_distribute_filters.py",
        "test_image_artifact.py",
        "test_image_load.py",
    )
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())) or item.path.name in ENGINE_MODULES:
            item.add_marker(pytest.mark.engine)


class RecordedRequest:
    """One request received by :class:`LocalHTTPServer`."""

    def __init__(self, method, path, query, headers, body, complete=True):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        # False for a chunked body the client abandoned before its last chunk (no answer was sent).
        self.complete = complete

    @property
    def chunked(self):
        """The body came chunked (``Transfer-Encoding: chunked``, whatever case the client wrote it in)."""
        return any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in self.headers.items())

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "<{} {}{}>".format(self.method, self.path, "?" + self.query if self.query else "")


class Response:
    def __init__(self, status=200, body=b"", content_type="text/plain; charset=utf-8", headers=None):
        self.status = status
        self.body = body.encode("utf-8") if isinstance(body, str) else body
        self.content_type = content_type
        self.headers = headers or {}


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The HTTP server on a unix socket (what a Docker engine listens on)."""

    daemon_threads = True

    def get_request(self):
        request, _dummy = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


class LocalHTTPServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (or on the unix socket ``unix_path``) with routes configurable per test.

    A route maps ``(method, path)`` to either a :class:`Response`, a list of them (served in
    order, the last one repeating) or a callable ``f(RecordedRequest)`` returning a
    :class:`Response` or a ``(status, body, content_type)`` tuple.
    Unknown paths get a 404 like most real servers. Every request is recorded in ``requests``; a chunked request body
    is read as a server would, and one the client abandons mid-way is recorded (``complete`` False) and not answered.
    """

    def __init__(self, unix_path=None):
        self.unix_path = unix_path
        self.routes = {}
        self.requests = []
        self._lock = threading.Lock()
        self._httpd = None
        self._thread = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "LocalTestServer/1.0"

            def _read_chunked(self):
                """A chunked request body (what urllib sends for an iterable body) and whether it ended properly."""
                parts = []
                while True:
                    line = self.rfile.readline()
                    try:
                        size = int(line.split(b";")[0].strip(), 16)
                    except ValueError:  # the client went away between two chunks
                        return b"".join(parts), False
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                            pass
                        return b"".join(parts), True
                    data = self.rfile.read(size)
                    parts.append(data)
                    if len(data) < size or self.rfile.read(2) != b"\r\n":  # ... or within one
                        return b"".join(parts), False

            def _handle(self):
                split = urlsplit(self.path)
                complete = True
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body, complete = self._read_chunked()
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                req = RecordedRequest(self.command, split.path, split.query, dict(self.headers.items()), body, complete)
                if not complete:
                    outer._record(req)
                    self.close_connection = True
                    return
                resp = outer._dispatch(req)
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.content_type)
                self.send_header("Content-Length", str(len(resp.body)))
                for key, value in resp.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD" and resp.body:
                    self.wfile.write(resp.body)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _handle

            def log_message(self, format, *args):
                pass

        if self.unix_path:
            self._httpd = _UnixHTTPServer(self.unix_path, Handler)
        else:
            self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    @property
    def port(self):
        return self._httpd.server_address[1]

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def docker_host(self):
        """This server as a Docker engine address (``unix://...`` or ``tcp://...``)."""
        return f"unix://{self.unix_path}" if self.unix_path else f"tcp://127.0.0.1:{self.port}"

    # -- routes ----------------------------------------------------------------------------
    def route(self, path, status=200, body="", content_type="text/plain; charset=utf-8", method="GET"):
        self.routes[(method, path)] = Response(status, body, content_type)

    def json_route(self, path, obj, status=200, method="GET"):
        self.routes[(method, path)] = Response(status, json.dumps(obj), "application/json")

    def sequence_route(self, path, responses, method="GET"):
        """Serve ``responses`` ((status, body) tuples or Response objects) in order; the last repeats."""
        self.routes[(method, path)] = [r if isinstance(r, Response) else Response(*r) for r in responses]

    def handler_route(self, path, func, method="GET"):
        self.routes[(method, path)] = func

    def remove_route(self, path, method="GET"):
        self.routes.pop((method, path), None)

    def calls(self, path, method=None):
        with self._lock:
            return [r for r in self.requests if r.path == path and (method is None or r.method == method)]

    @property
    def paths(self):
        with self._lock:
            return [r.path for r in self.requests]

    def _record(self, req):
        with self._lock:
            self.requests.append(req)

    def _dispatch(self, req):
        with self._lock:
            self.requests.append(req)
            route = self.routes.get((req.method, req.path))
            if isinstance(route, list):
                route = route.pop(0) if len(route) > 1 else route[0]
        if route is None:
            return Response(404, '{"detail":"Not Found"}', "application/json")
        if callable(route):
            resp = route(req)
            return resp if isinstance(resp, Response) else Response(*resp)
        return route


@pytest.fixture
def http_server():
    """A started :class:`LocalHTTPServer`, stopped after the test."""
    server = LocalHTTPServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def unix_http_server(tmp_path):
    """A started :class:`LocalHTTPServer` on a unix socket (an engine's stand-in), stopped after the test."""
    server = LocalHTTPServer(unix_path=str(tmp_path / "http.sock")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def http_server_factory():
    """Start extra :class:`LocalHTTPServer` instances that live for the whole test module."""
    servers = []

    def _start():
        servers.append(LocalHTTPServer().start())
        return servers[-1]

    try:
        yield _start
    finally:
        for server in servers:
            server.stop()


def _refusing_socket():
    # Bound but never listening: connections are refused and nobody else can take the port.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def closed_port():
    """A loopback port that refuses connections."""
    sock = _refusing_socket()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture(scope="module")
def module_closed_port():
    """Like ``closed_port`` but shared by a whole test module."""
    sock = _refusing_socket()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


class ModuleResult(dict):
    """The JSON a module printed, plus ``rc`` (its exit status)."""

    @property
    def failed(self):
        return bool(self.get("failed"))


@pytest.fixture
def run_module(capsys):
    """Run ``module.main()`` in-process with the given args; return a :class:`ModuleResult`."""
    from ansible.module_utils.testing import patch_module_args

    def _run(module, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        capsys.readouterr()  # discard anything printed before
        with patch_module_args(args), pytest.raises(SystemExit) as excinfo:
            module.main()
        out = capsys.readouterr().out
        try:
            result = ModuleResult(json.loads(out))
        except ValueError:
            pytest.fail(f"module did not print JSON: {out!r}")
        result.rc = excinfo.value.code
        return result

    return _run


@pytest.fixture(scope="module")
def docker_client():
    """The real Docker engine of this machine (the tests that need one fail, saying how to start it)."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"these tests need a running Docker engine (make deploy starts one): {exc}")
    return client


@pytest.fixture(scope="module")
def base_image(docker_client):
    """The newest local base image (aic-base:<tag>) on the real engine, for tests that run a container of it."""
    images = sorted(docker_client.images.list(name="aic-base"), key=lambda i: i.attrs["Created"])
    if not images:
        pytest.fail("these tests need the local base image aic-base (make deploy builds it)")
    return images[-1].tags[0]


@pytest.fixture
def warned(monkeypatch):
    """What the module warned, as it called AnsibleModule.warn. (Its result's ``warnings`` depend on the process:
    once any test imported Ansible's controller side, module warnings go to the controller's display instead.)"""
    from ansible.module_utils.basic import AnsibleModule

    messages = []
    original = AnsibleModule.warn

    def record(self, warning, *args, **kwargs):
        messages.append(warning)
        return original(self, warning, *args, **kwargs)

    monkeypatch.setattr(AnsibleModule, "warn", record)
    return messages


@pytest.fixture
def vllm_router(tmp_path):
    """Start the real vllm-router (the router image's pin, in the test venv) in front of worker URLs; each call
    returns its base URL once it answers /readiness (a worker passed its check). Stopped after the test."""
    import pathlib
    import shutil
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    binary = shutil.which("vllm-router", path=str(pathlib.Path(sys.executable).parent))
    if binary is None:
        pytest.fail("vllm-router is not installed in the test venv (requirements-test.txt)")
    procs = []

    def free_port():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def start(workers, policy="round_robin"):
        port, metrics_port = free_port(), free_port()
        log_path = tmp_path / f"router-{port}.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [binary, "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
                 "--prometheus-port", str(metrics_port), "--policy", policy, "--worker-urls", *workers,
                 "--health-check-interval-secs", "1", "--health-success-threshold", "1"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/readiness", timeout=2) as resp:  # noqa: S310 - a local URL
                    if resp.status == 200:
                        return base
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("vllm-router did not get ready: " + log_path.read_text()[-2000:])
            time.sleep(0.2)

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
