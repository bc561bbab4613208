"""Starts the real `e2b-envd` binary for the E2B Python SDK tests.

The daemon binary comes from `E2B_ENVD_BIN` (default `target/debug/e2b-envd` at the repository
root). It listens on a free loopback port; the SDK runs in debug mode (`E2B_DEBUG=true`) with
`E2B_SANDBOX_URL` pointing at it, so no E2B account or control plane is involved.

When the tests run as root, a `user` account with home `/home/user` is created if missing (the
SDK's own tests assume it) and the daemon runs commands as `user` by default, like E2B's
sandboxes. Otherwise the daemon maps the name `user` to the current account.

With `E2B_TEST_ISOLATE=1` the daemon runs isolated (`--isolate --network none`, see
docs/isolation.md): its own root filesystem with `user`, its own processes and network; needs
root.
"""

import os
import pathlib
import pwd
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
ISOLATE = os.environ.get("E2B_TEST_ISOLATE") == "1"


def _ensure_user_account() -> None:
    try:
        pwd.getpwnam("user")
        return
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", "/home/user", "--shell", "/bin/bash", "user"],
        check=True,
    )


@pytest.fixture(scope="session")
def envd_url():
    binary = os.environ.get("E2B_ENVD_BIN", str(REPO / "target" / "debug" / "e2b-envd"))
    if not os.path.exists(binary):
        pytest.exit(f"envd binary {binary} not found: run `cargo build -p e2b-envd` first or set E2B_ENVD_BIN", 2)
    args = [binary, "--port", "0", "--bind", "127.0.0.1"]
    if ISOLATE:
        if not IS_ROOT:
            pytest.exit("E2B_TEST_ISOLATE=1 needs root (the isolated daemon maps host id ranges)", 2)
        args += ["--isolate", "--network", "none", "--default-user", "user"]
    elif IS_ROOT:
        _ensure_user_account()
        args += ["--default-user", "user"]
    else:
        args += ["--user-alias", "user"]
    env = dict(os.environ)
    env.pop("E2B_ENVD_ACCESS_TOKEN", None)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=sys.stderr, env=env, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        pytest.exit(f"envd did not start (first line: {url!r})", 2)
    os.environ["E2B_DEBUG"] = "true"
    os.environ["E2B_SANDBOX_URL"] = url
    os.environ.setdefault("E2B_API_KEY", "e2b_" + "0" * 40)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, f"envd exited with {proc.returncode} after SIGTERM"


@pytest.fixture
def sandbox(envd_url):
    from e2b import Sandbox

    sbx = Sandbox.create()
    yield sbx


@pytest.fixture
async def async_sandbox(envd_url):
    from e2b import AsyncSandbox

    sbx = await AsyncSandbox.create()
    yield sbx


@pytest.fixture
def is_root():
    return IS_ROOT
