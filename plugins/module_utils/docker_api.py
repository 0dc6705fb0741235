# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one small Docker Engine API client of this collection's modules.

JSON requests to the engine (a ``unix://`` socket or a plain ``tcp://`` address) through urllib with Ansible's own
``UnixHTTPHandler`` (what ``open_url`` uses for its ``unix_socket``), so a module needs nothing on the node but
Python: no Docker CLI, no Docker SDK, and no import of community.docker's internals (its module_utils became private in
5.0.0). The opener is this client's own: ``open_url`` installs its opener process-wide, so after one call over a unix
socket every later ``urllib`` request of the process (a relay daemon's, a test's) would go to the engine's socket. What community.docker's public
modules do (containers, images, networks) the roles do with those modules; this client is for the questions they do
not ask (may this engine create a ``--pid=host`` container, does it hold this image id) and for the streams they do not
offer (an image tarball loaded while it is still being decompressed, an image saved straight into zstd, a container's
last log lines while a health check waits).
"""

from __future__ import annotations

import json
import os
import struct
import urllib.request
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode

from ansible.module_utils.urls import UnixHTTPHandler

DEFAULT_HOST = "unix:///var/run/docker.sock"
CHUNK = 4 * 1024 * 1024


class DockerAPIError(Exception):
    """The engine refused a request (``status`` is its HTTP status) or could not be reached (``status`` is None)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def engine_host(docker_host=None):
    """The engine to talk to: ``docker_host``, else ``DOCKER_HOST``, else the local socket."""
    return docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def engine_address(docker_host=None):
    """``(base_url, unix_socket)`` of the engine; ValueError for a scheme this client does not speak."""
    host = engine_host(docker_host)
    if host.startswith("unix://"):
        return "http://localhost", host[len("unix://") :]
    if host.startswith("tcp://"):
        return "http://" + host[len("tcp://") :].rstrip("/"), None
    raise ValueError(f"docker_host: {host!r} is not unix:///path or tcp://host:port")


def path(template, *parts):
    """An API path with each part quoted: ``path('/containers/{}', name)``."""
    return template.format(*(quote(str(p), safe="") for p in parts))


def _message(raw, status):
    """The engine's own message of an error body (its JSON ``message``), else the body, else the status."""
    text = raw.decode("utf-8", "replace").strip() if raw else ""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"]).strip()
    return text or f"HTTP {status}"


class DockerAPI:
    """Requests to one engine; every call raises :class:`DockerAPIError` unless the status is one it expects."""

    def __init__(self, docker_host=None, timeout=60):
        self.host = engine_host(docker_host)
        self.base_url, self.unix_socket = engine_address(docker_host)
        self.timeout = timeout
        # No proxy, whatever the environment says: the engine is this node's own.
        handlers = [urllib.request.ProxyHandler({})]
        if self.unix_socket:
            handlers.append(UnixHTTPHandler(self.unix_socket))
        self._opener = urllib.request.build_opener(*handlers)

    def request(self, method, api_path, params=None, body=None):
        """``(status, raw body)`` of one request; DockerAPIError(None, ...) when the engine cannot be reached."""
        url = self.base_url + api_path + ("?" + urlencode(params) if params else "")
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except HTTPError as exc:
            return exc.code, exc.read()
        except (URLError, OSError) as exc:  # TimeoutError is an OSError
            reason = getattr(exc, "reason", exc)
            raise DockerAPIError(None, f"cannot reach the Docker engine at {self.host}: {reason}") from exc

    def call(self, method, api_path, params=None, body=None, expect=(200, 201, 204)):
        """The decoded JSON answer (None for an empty one) of a request whose status is in ``expect``."""
        status, raw = self.request(method, api_path, params=params, body=body)
        if status not in expect:
            raise DockerAPIError(status, _message(raw, status))
        return json.loads(raw) if raw and raw.strip() else None

    def exists(self, api_path):
        """True for 200, False for 404 (``GET /images/<id>/json``, ``/containers/<name>/json``)."""
        status, raw = self.request("GET", api_path)
        if status not in (200, 404):
            raise DockerAPIError(status, _message(raw, status))
        return status == 200

    def open(self, method, api_path, params=None, data=None, headers=None, expect=(200, 201, 204)):
        """The open response of a request whose status is in ``expect``, to be read as a stream and closed by the
        caller. ``data`` may be bytes or an iterable of bytes (sent chunked, as it comes: nothing is held in
        memory); an exception the iterable raises aborts the request and reaches the caller unchanged."""
        url = self.base_url + api_path + ("?" + urlencode(params) if params else "")
        request = urllib.request.Request(url, data=data, headers=dict(headers or {}), method=method)
        if data is not None and not isinstance(data, (bytes, bytearray)):
            request.add_header("Transfer-Encoding", "chunked")
        try:
            response = self._opener.open(request, timeout=self.timeout)
        except HTTPError as exc:
            raise DockerAPIError(exc.code, _message(exc.read(), exc.code)) from exc
        except (URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DockerAPIError(None, f"cannot reach the Docker engine at {self.host}: {reason}") from exc
        if response.status not in expect:
            raw = response.read()
            response.close()
            raise DockerAPIError(response.status, _message(raw, response.status))
        return response

    def inspect(self, kind, name):
        """``docker inspect`` of an image or a container (``kind``: ``images`` or ``containers``); None when the
        engine has none of that name."""
        status, raw = self.request("GET", path("/" + kind + "/{}/json", name))
        if status == 404:
            return None
        if status != 200:
            raise DockerAPIError(status, _message(raw, status))
        return json.loads(raw)

    def load_image(self, chunks):
        """``docker load`` of the image tarball ``chunks`` (an iterable of bytes), streamed as it comes; raises
        DockerAPIError with the engine's message when it refuses the archive (its answer is a JSON stream whose
        ``error`` field says why, under status 200)."""
        response = self.open(
            "POST", "/images/load", params={"quiet": "1"}, data=chunks, headers={"Content-Type": "application/x-tar"}
        )
        with response:
            answer = response.read().decode("utf-8", "replace")
        for line in answer.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and (event.get("error") or event.get("errorDetail")):
                detail = event.get("errorDetail") or {}
                raise DockerAPIError(200, str(event.get("error") or detail.get("message")))
        return answer

    def save_image(self, name, chunk_size=CHUNK):
        """``docker save <name>`` as an iterator of byte chunks (the tarball keeps the name's repository and tag)."""
        response = self.open("GET", "/images/get", params={"names": name})
        with response:
            yield from iter(lambda: response.read(chunk_size), b"")

    def container_logs(self, name, tail=100):
        """The last ``tail`` lines of a container's stdout and stderr, as text (the engine's multiplexed stream is
        taken apart; a container with a TTY sends the raw stream)."""
        response = self.open(
            "GET", path("/containers/{}/logs", name), params={"stdout": "1", "stderr": "1", "tail": str(tail)}
        )
        with response:
            raw = response.read()
        return demultiplex(raw).decode("utf-8", "replace")


def demultiplex(raw):
    """The payload of a Docker multiplexed stream (frames of an 8-byte header: stream type 0-2, three zero bytes, a
    big-endian length), in order; ``raw`` as it is when it is not one (a TTY container's logs)."""
    out, offset = [], 0
    while offset < len(raw):
        header = raw[offset : offset + 8]
        if len(header) < 8 or header[0] not in (0, 1, 2) or header[1:4] != b"\0\0\0":
            return raw
        (length,) = struct.unpack(">I", header[4:8])
        out.append(raw[offset + 8 : offset + 8 + length])
        offset += 8 + length
    return b"".join(out)
