"""Harness for e2b-exec-server: starts the real server binary and connects the official MCP client.

The binary is taken from E2B_EXEC_SERVER_BIN, else <repo>/target/debug/e2b-exec-server. When the
tests run as root, the server runs as the unprivileged user `e2bmcp` (created here) so permission
errors are real.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO = Path(__file__).resolve().parents[2]
TEST_USER = "e2bmcp"
KINDS = ["stdio", "http-session", "http-json"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def server_bin() -> str:
    p = os.environ.get("E2B_EXEC_SERVER_BIN") or str(REPO / "target" / "debug" / "e2b-exec-server")
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        pytest.fail(
            f"missing: the e2b-exec-server binary at {p}; build it with "
            "`cargo build -p e2b-exec-server` or set E2B_EXEC_SERVER_BIN",
            pytrace=False,
        )
    return p


def _ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        pytest.fail("missing: `useradd` (needed to create the unprivileged test user)", pytrace=False)
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", TEST_USER], check=True)
    return pwd.getpwnam(TEST_USER)


def run_as_prefix() -> tuple[list[str], dict[str, str]]:
    """argv prefix and env that run a program as the unprivileged test user (when we are root)."""
    if os.geteuid() != 0:
        return [], {}
    u = _ensure_user()
    if shutil.which("setpriv") is None:
        pytest.fail("missing: `setpriv` (util-linux), needed to run the server as a non-root user", pytrace=False)
    prefix = ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--init-groups", "--"]
    return prefix, {"HOME": u.pw_dir, "USER": TEST_USER, "LOGNAME": TEST_USER}


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    _, user_env = run_as_prefix()
    env = {k: v for k, v in os.environ.items() if k not in {"API_KEY", "SANDBOX_ID", "PORT"}}
    env.update(user_env)
    env.setdefault("RUST_LOG", "warn")
    # The server's local sandbox is isolated by default, and so it is here, with the server
    # running as an unprivileged user (so permission errors are real): its sandbox has one
    # account, `user` (docs/isolation.md, "Unprivileged"). `--network none`: a non-root NAT
    # helper needs /dev/net/tun mode 0666, which this kind of machine does not give (the
    # isolation crate's tests cover that path). scripts/test runs the suite once more with
    # E2B_ISOLATION=none; test_isolated_default.py runs the default as root.
    env.setdefault("E2B_NETWORK", "none")
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """The server binary in HTTP mode on a free loopback port."""

    def __init__(self, args: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        prefix, _ = run_as_prefix()
        argv = [*prefix, server_bin(), "--http", f"127.0.0.1:{self.port}", *(args or [])]
        self.proc = subprocess.Popen(argv, env=server_env(env), stdout=subprocess.DEVNULL, stderr=sys.stderr)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode} before answering /health: {argv}")
            try:
                r = httpx2.get(f"{self.base}/health", timeout=2)
                if r.status_code == 200:
                    self.health = r.json()
                    break
            except Exception:
                pass
            if time.time() > deadline:
                self.stop()
                pytest.fail(f"the server did not answer GET /health within 60 s: {argv}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def http_server(args: list[str] | None = None, env: dict[str, str] | None = None) -> Iterator[HttpServer]:
    s = HttpServer(args, env)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def session_server() -> Iterator[HttpServer]:
    with http_server() as s:
        yield s


@pytest.fixture(scope="session")
def json_server() -> Iterator[HttpServer]:
    with http_server(["--json-response"]) as s:
        yield s


def stdio_params(args: list[str] | None = None, env: dict[str, str] | None = None) -> StdioServerParameters:
    prefix, _ = run_as_prefix()
    argv = [*prefix, server_bin(), "--stdio", *(args or [])]
    return StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(env))


@contextlib.asynccontextmanager
async def open_session(
    kind: str,
    *,
    lifecycle: str = "legacy",
    server: HttpServer | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[tuple[ClientSession, object]]:
    """Yields (session, handshake result) for kind in KINDS; lifecycle is 'legacy' or 'discover'."""
    async with contextlib.AsyncExitStack() as stack:
        if kind == "stdio":
            read, write = await stack.enter_async_context(stdio_client(stdio_params(args, env)))
        else:
            if server is None:
                server = stack.enter_context(http_server([*(args or []), *(["--json-response"] if kind == "http-json" else [])], env))
            # The SDK's own client and timeouts (30 s, read 300 s): the server must fit the
            # stock client's defaults, so none is lifted here.
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers or {}))
            read, write = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=http)
            )
        s = await stack.enter_async_context(ClientSession(read, write))
        hs = await (s.initialize() if lifecycle == "legacy" else s.discover())
        yield s, hs


@pytest.fixture
def servers(request: pytest.FixtureRequest) -> dict[str, HttpServer | None]:
    """Lazily resolves the shared HTTP servers for a kind."""

    class _Lazy(dict):
        def __missing__(self, kind: str) -> HttpServer | None:
            if kind == "stdio":
                return None
            return request.getfixturevalue("session_server" if kind == "http-session" else "json_server")

    return _Lazy()


def proc_cmdlines() -> list[str]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode("utf-8", "replace"))
            except OSError:
                pass
    return out


async def processes_gone(needle: str, what: str, within: float = 10.0) -> None:
    """Waits until no process's command line holds `needle`; fails saying `what` after `within` s."""
    deadline = time.time() + within
    while any(needle in c for c in proc_cmdlines()):
        assert time.time() < deadline, what
        await anyio.sleep(0.1)


def ensure_python_alias() -> None:
    """The sandbox image contract (DeepAgents, langchain-tests) needs `python` as well as
    `python3`. The local sandbox is this host: add the alias when root and it is missing."""
    if shutil.which("python", path="/usr/local/bin:/usr/bin:/bin") is None:
        if os.geteuid() != 0:
            pytest.fail("missing: `python` on the sandbox PATH (the sandbox image contract needs it)", pytrace=False)
        py3 = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        if py3 is None:
            pytest.fail("missing: `python3` in the sandbox", pytrace=False)
        os.symlink(py3, "/usr/local/bin/python")
