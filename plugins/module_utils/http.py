# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Small HTTP helpers shared by the aic.stack health-check modules.

Everything here uses only the Python standard library plus
``ansible.module_utils.urls.open_url`` so the modules run on managed nodes
that have nothing but a Python interpreter.
"""

from __future__ import annotations

import json
import socket
import time
from urllib.error import HTTPError, URLError

from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import open_url

DEFAULT_USER_AGENT = "aic.stack-health/1.0"
# Keep error excerpts short: failure messages end up in Ansible output.
BODY_EXCERPT_CHARS = 200


class HttpResponse:
    """A completed HTTP exchange (any status code, including 4xx/5xx)."""

    def __init__(self, url, status, body, headers=None):
        self.url = url
        self.status = status
        self.body = body
        self.headers = headers or {}

    @property
    def ok(self):
        return 200 <= self.status < 300

    def json(self):
        """Decode the body as JSON; raises ``ValueError`` with a readable message."""
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise ValueError(f"invalid JSON from {self.url} ({exc}): {excerpt(self.body)}")

    def describe(self):
        """Short human readable summary, e.g. ``HTTP 503: {"detail": "loading"}``."""
        text = excerpt(self.body)
        return f"HTTP {self.status}: {text}" if text else f"HTTP {self.status}"


class HttpRequestError(Exception):
    """The request did not produce an HTTP response (connection refused, DNS, timeout...)."""

    def __init__(self, url, reason):
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")


def excerpt(text, limit=BODY_EXCERPT_CHARS):
    """Collapse whitespace and truncate ``text`` for use in error messages."""
    text = " ".join(to_text(text or "", errors="surrogate_or_replace").split())
    return text if len(text) <= limit else text[:limit] + "..."


def join_url(base, path):
    """Join a base URL (``http://host:8000`` or ``http://host:8000/``) and an absolute path."""
    return base.rstrip("/") + "/" + path.lstrip("/")


def _reason(exc):
    if isinstance(exc, URLError):
        inner = exc.reason
        if isinstance(inner, (socket.timeout, TimeoutError)):
            return "timed out"
        return to_text(getattr(inner, "strerror", None) or inner)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    return to_text(exc) or exc.__class__.__name__


def request(url, method="GET", data=None, json_data=None, headers=None, timeout=10, validate_certs=True):
    """Perform one HTTP request and return an :class:`HttpResponse` whatever the status code.

    ``json_data`` (any JSON-serialisable value) is sent with ``Content-Type: application/json``.
    Raises :class:`HttpRequestError` when no HTTP response was received at all.
    """
    hdrs = {"Accept": "*/*"}
    hdrs.update(headers or {})
    if json_data is not None:
        data = json.dumps(json_data)
        hdrs["Content-Type"] = "application/json"
    try:
        resp = open_url(
            url,
            data=data,
            method=method,
            headers=hdrs,
            timeout=timeout,
            validate_certs=validate_certs,
            http_agent=DEFAULT_USER_AGENT,
            follow_redirects="safe",
        )
        try:
            body = resp.read()
            status = resp.getcode()
            resp_headers = dict(resp.headers.items())
        finally:
            resp.close()
    except HTTPError as exc:
        # 4xx/5xx: still an HTTP response, hand it back to the caller.
        try:
            body = exc.read()
        except Exception:  # noqa: BLE001 - the body is best effort only
            body = b""
        status = exc.code
        resp_headers = dict(exc.headers.items()) if exc.headers is not None else {}
    except (URLError, OSError, ValueError) as exc:
        # socket errors, timeouts, ConnectionResetError, http.client.HTTPException subclasses...
        raise HttpRequestError(url, _reason(exc))
    except Exception as exc:  # noqa: BLE001 - e.g. http.client.RemoteDisconnected, BadStatusLine
        raise HttpRequestError(url, f"{exc.__class__.__name__}: {to_text(exc)}")
    return HttpResponse(url, status, to_text(body, errors="surrogate_or_replace"), resp_headers)


class WaitResult:
    """Outcome of :func:`wait_until`."""

    def __init__(self, ok, value, attempts, elapsed, last_error):
        self.ok = ok
        self.value = value
        self.attempts = attempts
        self.elapsed = elapsed
        self.last_error = last_error
        self.aborted = None


def wait_until(probe, timeout, interval=2.0, clock=time.monotonic, sleep=time.sleep, abort=None):
    """Call ``probe(remaining)`` until it reports success or ``timeout`` seconds have elapsed.

    ``probe`` receives the seconds left before the deadline and returns ``(done, value, error)``:
    ``done`` True stops the wait; otherwise ``error`` (a string) is remembered as the reason
    the last attempt failed. The probe is always called at least once, even with ``timeout`` 0.
    Between attempts it sleeps ``interval`` seconds, never past the deadline.
    ``abort()``, when given, is asked after every failed attempt: a string means waiting cannot help (the service's
    container exited); the wait stops at once, not ``ok``, with ``aborted`` set to that string.
    """
    start = clock()
    deadline = start + max(0.0, float(timeout))
    attempts = 0
    value = None
    last_error = None
    while True:
        attempts += 1
        done, value, error = probe(max(0.0, deadline - clock()))
        if done:
            return WaitResult(True, value, attempts, clock() - start, None)
        last_error = error
        reason = abort() if abort is not None else None
        if reason:
            result = WaitResult(False, value, attempts, clock() - start, last_error)
            result.aborted = reason
            return result
        remaining = deadline - clock()
        if remaining <= 0:
            return WaitResult(False, value, attempts, clock() - start, last_error)
        sleep(min(float(interval), remaining))


def per_try_timeout(request_timeout, wait_timeout, remaining):
    """Timeout of one request made while waiting: ``request_timeout``, cut to the ``remaining`` seconds of the wait
    (at least 1) so that a single hanging request does not overrun the overall deadline by much; ``request_timeout``
    as it is when ``wait_timeout`` is 0 (one probe, no deadline to keep).
    """
    return max(1.0, min(float(request_timeout), remaining)) if wait_timeout > 0 else request_timeout


def wait_for_status(url, expected=200, timeout=60, interval=2.0, request_timeout=10, validate_certs=True, abort=None):
    """Poll ``GET url`` until it answers with status ``expected`` or ``timeout`` expires.

    Returns a :class:`WaitResult`; on success ``value`` is the :class:`HttpResponse`,
    otherwise ``last_error`` says what the last attempt returned (status + body excerpt
    or connection error).
    """

    def probe(remaining):
        per_try = per_try_timeout(request_timeout, timeout, remaining)
        try:
            resp = request(url, timeout=per_try, validate_certs=validate_certs)
        except HttpRequestError as exc:
            return False, None, exc.reason
        if resp.status == expected:
            return True, resp, None
        return False, resp, resp.describe()

    return wait_until(probe, timeout, interval=interval, abort=abort)
