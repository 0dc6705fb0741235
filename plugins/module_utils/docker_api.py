# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one small Docker Engine API client of this collection's modules.

JSON requests to the engine (a ``unix://`` socket or a plain ``tcp://`` address) through urllib with Ansible's own
``UnixHTTPHandler`` (what ``open_url`` uses for its ``unix_socket``), so a module needs nothing on the node but
Python: no Docker CLI, no Docker SDK, and no import of community.docker's internals (its module_utils became private in
5.0.0). The opener is this client's own: ``open_url`` installs its opener process-wide, so after one call over a unix
socket every later ``urllib`` request of the process (a relay daemon's, a test's) would go to the engine's socket. What community.docker's public
modules do (containers, images, networks) the roles do with those modules; this client is for the questions they do
not ask (may this engine create a ``--pid=host`` container, does it hold this image id).
"""

from __future__ import annotations

import json
import os
import urllib.request
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode

from ansible.module_utils.urls import UnixHTTPHandler

DEFAULT_HOST = "unix:///var/run/docker.sock"


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
