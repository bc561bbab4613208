"""Starts the real `e2b-envd` binary for the E2B Python SDK tests.

The daemon binary comes from `E2B_ENVD_BIN` (default `target/debug/e2b-envd` at the repository
root). It listens on a free loopback port; the SDK runs in debug mode (`E2B_DEBUG=true`) with
`E2B_SANDBOX_URL` pointing at it, so no E2B account or control plane is involved.

When the tests run as root, a `user` account with home `/home/user` is created if missing (the
SDK's own tests assume it) and the daemon runs commands as `user` by default, like E2B's
sandboxes. Otherwise the daemon maps the name `user` to the current account.

With `E2B_TEST_ISOLATE=1` the daemon runs isolated (`--isolate --network none`, see
docs/isolation.md): its own root filesystem with `user`, its own processes and network; needs
root. With `E2B_TEST_ISOLATE=unprivileged` the same, but the daemon is started as the
unprivileged account `e2bsdk` (created here; the tests themselves run as root): its sandbox
has the single account `user` (the supervisor's own ids), no root and no cgroups.
"""

import os
import pathlib
import pwd
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
ISOLATE_MODE = os.environ.get("E2B_TEST_ISOLATE", "")
ISOLATE = ISOLATE_MODE in ("1", "unprivileged")
UNPRIVILEGED = ISOLATE_MODE == "unprivileged"
UNPRIVILEGED_USER = "e2bsdk"


def _as_unprivileged_user() -> list[str]:
    """argv prefix that runs a program as the unprivileged test account (created if missing)."""
    import shutil

    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            pytest.exit(f"E2B_TEST_ISOLATE=unprivileged needs `{tool}` (shadow / util-linux)", 2)
    try:
        u = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", UNPRIVILEGED_USER], check=True)
        u = pwd.getpwnam(UNPRIVILEGED_USER)
    return ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups", "--"]


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
    if IS_ROOT:
        # Also for the isolated runs: the secured-daemon fixture (conftest_files) runs a plain one.
        _ensure_user_account()
    if ISOLATE:
        if not IS_ROOT:
            pytest.exit(f"E2B_TEST_ISOLATE={ISOLATE_MODE} needs root (to map host id ranges, or to "
                        "start the daemon as the unprivileged test account)", 2)
        args += ["--isolate", "--network", "none", "--default-user", "user"]
        if UNPRIVILEGED:
            args = _as_unprivileged_user() + args
    elif IS_ROOT:
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
    """Whether the daemon can run commands as root (an unprivileged sandbox has only `user`)."""
    return IS_ROOT and not UNPRIVILEGED
