"""A real Docker authorization plugin for tests: it denies creating containers with ``--pid=host``.

This is what SPUR's authz plugin does to the monitoring exporters. The plugin speaks Docker's v1 plugin protocol
(JSON over HTTP on a unix socket that dockerd finds at /run/docker/plugins/<name>.sock):
``/Plugin.Activate`` answers that it implements ``authz``; ``/AuthZPlugin.AuthZReq`` denies
``POST .../containers/create`` whose body has ``HostConfig.PidMode == "host"`` and allows everything else;
``/AuthZPlugin.AuthZRes`` allows every response. Every denial is appended to ``--log`` (one JSON line).

Used by tests/integration/test_monitoring_authz.py (through the link tests/integration/authz/pidhost_authz.py) and by
every node of the test bed with AIC_BED_AUTHZ=1 (scripts/testbed.sh, scripts/rehearsal.sh).

Usage: python3 scripts/bed/pidhost_authz.py --socket /run/docker/plugins/NAME.sock [--log FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import socketserver
import sys
from http.server import BaseHTTPRequestHandler

CONTENT_TYPE = "application/vnd.docker.plugins.v1+json"
CREATE_RE = re.compile(r"^(/v[0-9.]+)?/containers/create(\?|$)")
DENY_MSG = "host PID namespace (--pid=host) is not allowed on this cluster"


def decide(request):
    """(allow, msg) for one AuthZReq body."""
    method = request.get("RequestMethod", "")
    uri = request.get("RequestUri", "")
    if method != "POST" or not CREATE_RE.match(uri):
        return True, ""
    raw = request.get("RequestBody") or ""
    try:
        body = json.loads(base64.b64decode(raw) or b"{}") if raw else {}
    except ValueError:
        return True, ""
    if ((body.get("HostConfig") or {}).get("PidMode") or "") == "host":
        return False, DENY_MSG
    return True, ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            request = {}
        if self.path == "/Plugin.Activate":
            reply = {"Implements": ["authz"]}
        elif self.path == "/AuthZPlugin.AuthZReq":
            allow, msg = decide(request)
            reply = {"Allow": allow, "Msg": msg}
            if not allow and self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write(json.dumps({"uri": request.get("RequestUri"), "msg": msg}) + "\n")
        elif self.path == "/AuthZPlugin.AuthZRes":
            reply = {"Allow": True}
        else:
            reply = {"Err": f"unknown endpoint {self.path}"}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def address_string(self):  # unix sockets have no peer address
        return "unix"

    def log_message(self, format, *args):
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--log")
    args = parser.parse_args(argv)
    Handler.log_path = args.log
    os.makedirs(os.path.dirname(args.socket), exist_ok=True)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server = Server(args.socket, Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on {args.socket}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        if os.path.exists(args.socket):
            os.unlink(args.socket)


if __name__ == "__main__":
    main()
