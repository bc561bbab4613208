"""Fixtures for the file tests that need a secured daemon: our envd started with an access
token, plus a tiny mock of E2B's control plane so the SDK takes its non-debug path (research
§9 item 24): `POST /v2/sandboxes` (or `/sandboxes`) answers with the sandbox id, `envdVersion` 0.6.13 and the
`envdAccessToken`, and `E2B_SANDBOX_URL` points the SDK at our daemon.

Import the fixture into a test module: `from conftest_files import secured_sandbox`.
"""

import json
import os
import pathlib
import secrets
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _control_plane(token: str):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            if "sandboxes" in self.path:
                self._json(
                    201,
                    {
                        "sandboxID": "local-secured",
                        "templateID": "base",
                        "clientID": "local",
                        "envdVersion": "0.6.13",
                        "envdAccessToken": token,
                    },
                )
            else:
                self._json(404, {"code": 404, "message": "not found"})

        def do_DELETE(self):
            self.send_response(204)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def secured_sandbox(envd_url, monkeypatch):
    token = "tok-" + secrets.token_hex(8)
    binary = os.environ.get("E2B_ENVD_BIN", str(REPO / "target" / "debug" / "e2b-envd"))
    args = [binary, "--port", "0", "--bind", "127.0.0.1", "--access-token", token]
    args += ["--default-user", "user"] if os.geteuid() == 0 else ["--user-alias", "user"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    url = proc.stdout.readline().strip()
    server = _control_plane(token)
    monkeypatch.setenv("E2B_DEBUG", "false")
    monkeypatch.setenv("E2B_API_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    monkeypatch.setenv("E2B_API_KEY", "e2b_" + "0" * 40)
    from e2b import Sandbox

    sbx = Sandbox.create()
    sbx._test_envd_url = url
    sbx._test_token = token
    yield sbx
    server.shutdown()
    proc.terminate()
    proc.wait(timeout=10)
