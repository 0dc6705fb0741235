# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one shape of the aic.stack health modules: wait for a URL, GET it, parse it, fail naming the URL.

A module builds a :class:`Check` for its component and base URL and runs its checks in order; the first one
that fails raises :class:`CheckFailed` with ``<component> at <url>: <what was wrong>``, and :func:`run` turns that
into the module's failure (``msg``, plus the facts gathered so far and ``elapsed``). Requests go through
:mod:`.http` (``ansible.module_utils.urls.open_url``), so nothing beyond a Python interpreter is needed on the
managed node; :meth:`Check.metrics` alone needs ``prometheus_client`` (the caller checks
``metrics.HAS_PROMETHEUS_CLIENT`` first).
"""

from __future__ import annotations

import time

from ansible_collections.aic.stack.plugins.module_utils.http import (
    HttpRequestError,
    join_url,
    request,
    wait_for_status,
)
from ansible_collections.aic.stack.plugins.module_utils.metrics import (
    MetricsParseError,
    families_with_prefix,
    parse,
)

# Seconds between two probes of a health endpoint while waiting for it.
HEALTH_POLL_INTERVAL = 2.0


class CheckFailed(Exception):
    """A check failed; the message names the component, the URL and what was wrong."""


def fetch(url, what, timeout, method="GET", json_data=None):
    """Make one request; ``(response, None)`` when it answered HTTP 200, otherwise ``(None, error)``.

    ``what`` names the request in the error (``GET /metrics``): ``<what> failed: <reason>`` when no HTTP response
    came back (refused, timed out...), ``<what> returned HTTP <status>: <body excerpt>`` for any other status.
    """
    try:
        resp = request(url, method=method, json_data=json_data, timeout=timeout)
    except HttpRequestError as exc:
        return None, f"{what} failed: {exc.reason}"
    if resp.status != 200:
        return None, f"{what} returned {resp.describe()}"
    return resp, None


class Check:
    """The checks of one component (``vLLM``) at one base URL; each failure raises :class:`CheckFailed`.

    ``request_timeout`` bounds every request. ``remark()``, when given, is asked at each failure for a few words
    to add in parentheses (vLLM: its container's healthcheck verdict), or None for none.
    """

    def __init__(self, component, base, request_timeout, remark=None):
        self.component = component
        self.base = base
        self.request_timeout = request_timeout
        self.remark = remark

    def url(self, path):
        return join_url(self.base, path)

    def message(self, url, what):
        remark = self.remark() if self.remark is not None else None
        return f"{self.component} at {url}: {what}" + (f" ({remark})" if remark else "")

    def fail(self, url, what):
        raise CheckFailed(self.message(url, what))

    def wait(self, path, wait_timeout, interval=HEALTH_POLL_INTERVAL, abort=None):
        """Wait up to ``wait_timeout`` seconds for ``GET path`` to answer HTTP 200 and return that response.

        ``wait_timeout`` 0 probes once. ``abort()`` (see :func:`.http.wait_until`) ends the wait early when waiting
        cannot help; the failure then says why.
        """
        url = self.url(path)
        waited = wait_for_status(
            url,
            expected=200,
            timeout=wait_timeout,
            interval=interval,
            request_timeout=self.request_timeout,
            abort=abort,
        )
        if waited.aborted:
            self.fail(
                url,
                f"not up after {waited.elapsed:.0f}s and waiting cannot help: {waited.aborted} "
                f"(last GET {path}: {waited.last_error})",
            )
        if not waited.ok:
            self.fail(
                url,
                f"timed out after {wait_timeout}s waiting for GET {path} to return 200 "
                f"({waited.attempts} attempts, last: {waited.last_error})",
            )
        return waited.value

    def request(self, path, method="GET", json_data=None):
        """``method path`` (``json_data`` as a JSON body), once; the response when it answered HTTP 200."""
        url = self.url(path)
        resp, error = fetch(url, f"{method} {path}", self.request_timeout, method=method, json_data=json_data)
        if error:
            self.fail(url, error)
        return resp

    def metrics(self, prefix, path="/metrics"):
        """``(families, matching)``: the families ``GET path`` exposes, and the sorted names starting with ``prefix``.

        Fails when the text does not parse or no family starts with ``prefix``.
        """
        resp = self.request(path)
        try:
            families = parse(resp.body)
        except MetricsParseError as exc:
            self.fail(self.url(path), str(exc))
        matching = families_with_prefix(families, prefix)
        if not matching:
            self.fail(self.url(path), f"no {prefix} metrics (found {len(families)} families)")
        return families, matching


def run(module, result, checks, start=None):
    """Run ``checks(result)`` and end the module with ``result`` and ``elapsed`` (seconds since ``start``).

    ``checks`` fills ``result`` as it goes; a :class:`CheckFailed` fails the module with its message and what was
    gathered so far. ``start`` (``time.monotonic()``) defaults to now.
    """
    start = time.monotonic() if start is None else start
    try:
        checks(result)
    except CheckFailed as exc:
        result["elapsed"] = round(time.monotonic() - start, 3)
        module.fail_json(msg=str(exc), **result)
    result["elapsed"] = round(time.monotonic() - start, 3)
    module.exit_json(**result)
