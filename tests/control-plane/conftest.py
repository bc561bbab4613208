"""Starts the real `e2b serve` (the `e2b` binary) for the official E2B SDKs in normal mode.

The binary comes from `E2B_CLI_BIN` (default `target/debug/e2b` at the repository root). It
listens on free loopback ports; the SDK is pointed at it the way a user would:
`E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_API_KEY` (no `E2B_DEBUG`), so every call goes through
the control-plane API and the edge.
"""

import os
import pathlib
import secrets
import subprocess
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _ensure_user_account() -> None:
    """E2B's base template runs commands as `user`: as root, make sure the account exists (as
    tests/python does), so the plain runtime's sandboxes run as `user` too."""
    import pwd

    try:
        pwd.getpwnam("user")
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--home-dir", "/home/user", "--shell", "/bin/bash", "user"],
            check=True,
        )


def start_serve(state_dir: str):
    binary = os.environ.get("E2B_CLI_BIN", str(REPO / "target" / "debug" / "e2b"))
    if not os.path.exists(binary):
        pytest.exit(f"e2b binary {binary} not found: run `cargo build -p e2b-cli` first or set E2B_CLI_BIN", 2)
    key = "e2b_" + secrets.token_hex(20)
    env = dict(os.environ)
    for var in ("E2B_DEBUG", "E2B_API_KEY"):
        env.pop(var, None)
    proc = subprocess.Popen(
        [binary, "serve", "--api-port", "0", "--edge-port", "0", "--api-key", key, "--state-dir", state_dir],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    urls = {}
    for _ in range(50):
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("export "):
            k, _, v = line[len("export "):].strip().partition("=")
            urls[k] = v
        if "E2B_API_KEY" in urls:
            break
    if "E2B_API_URL" not in urls or "E2B_SANDBOX_URL" not in urls:
        proc.kill()
        pytest.exit(f"e2b serve did not start (printed {urls!r})", 2)
    return proc, urls


@pytest.fixture(scope="session", autouse=True)
def serve():
    if os.geteuid() == 0:
        _ensure_user_account()
    with tempfile.TemporaryDirectory(prefix="e2b-serve-py-") as state_dir:
        os.chmod(state_dir, 0o755)
        proc, urls = start_serve(state_dir)
        saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DEBUG")}
        os.environ.pop("E2B_DEBUG", None)
        os.environ.update(urls)
        yield urls
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        assert proc.returncode == 0, f"e2b serve exited with {proc.returncode} after SIGTERM"


@pytest.fixture(scope="session")
def contract():
    from contract import Contract

    return Contract()


@pytest.fixture(autouse=True)
def validate_api_responses(serve, contract, monkeypatch):
    """Every response the SDK gets from the API port is checked against openapi/e2b.yml."""
    import httpx

    api = serve["E2B_API_URL"]
    checked = []

    def check(request, response, body):
        url = str(request.url)
        if url.startswith(api):
            contract.check(request.method, request.url.path, response.status_code, body)
            checked.append((request.method, request.url.path, response.status_code))

    # The SDK's API client is an httpx client (over its own pyqwest transport): check at
    # Client.send, whatever the transport.
    sync_send = httpx.Client.send

    def send(self, request, *args, **kwargs):
        response = sync_send(self, request, *args, **kwargs)
        if str(request.url).startswith(api):
            check(request, response, response.read())
        return response

    async_send = httpx.AsyncClient.send

    async def asend(self, request, *args, **kwargs):
        response = await async_send(self, request, *args, **kwargs)
        if str(request.url).startswith(api):
            check(request, response, await response.aread())
        return response

    monkeypatch.setattr(httpx.Client, "send", send)
    monkeypatch.setattr(httpx.AsyncClient, "send", asend)
    yield checked
