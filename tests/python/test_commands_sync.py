"""Sandbox.commands (sync API) against our envd."""

import time

import pytest
from e2b import (
    AuthenticationException,
    CommandExitException,
    InvalidArgumentException,
    NotFoundException,
    TimeoutException,
)


def test_run_output(sandbox):
    r = sandbox.commands.run("echo hello; echo oops >&2")
    assert r.exit_code == 0
    assert r.stdout == "hello\n"
    assert r.stderr == "oops\n"
    assert r.error is None


def test_run_nonzero_exit_raises(sandbox):
    with pytest.raises(CommandExitException) as e:
        sandbox.commands.run("echo partial; echo bad >&2; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stdout == "partial\n"
    assert e.value.stderr == "bad\n"
    assert e.value.error == "exit status 3"


def test_run_broken_utf8_is_replaced(sandbox):
    r = sandbox.commands.run(r"printf 'ok\xff\xfeend'")
    assert r.stdout == "ok\ufffd\ufffdend"


def test_run_large_output(sandbox):
    r = sandbox.commands.run("head -c 3000000 /dev/zero | tr '\\0' a")
    assert len(r.stdout) == 3_000_000
    assert set(r.stdout) == {"a"}


def test_run_timeout(sandbox):
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - start < 10


def test_timeout_kills_process(sandbox):
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 30", timeout=1)
    deadline = time.monotonic() + 5
    while any(p.args[-1] == "sleep 30" for p in sandbox.commands.list()):
        assert time.monotonic() < deadline, "the timed-out command is still listed after 5 s"
        time.sleep(0.05)


def test_background_and_wait(sandbox):
    h = sandbox.commands.run("sleep 0.3; echo done", background=True)
    assert h.pid > 0
    r = h.wait()
    assert r.exit_code == 0
    assert r.stdout == "done\n"


def test_background_with_callbacks(sandbox):
    out = []
    h = sandbox.commands.run("for i in 1 2 3; do echo $i; sleep 0.05; done", background=True)
    r = h.wait(on_stdout=out.append)
    assert "".join(out) == "1\n2\n3\n"
    assert r.stdout == "1\n2\n3\n"


def test_connect(sandbox):
    h = sandbox.commands.run("sleep 0.5; echo from-connect", background=True, timeout=0)
    h2 = sandbox.commands.connect(h.pid)
    r = h2.wait()
    assert r.stdout == "from-connect\n"
    h.disconnect()


def test_connect_unknown_pid(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.commands.connect(999_999).wait()


def test_connect_after_exit_keeps_end(sandbox):
    h = sandbox.commands.run("exit 7", background=True)
    with pytest.raises(CommandExitException):
        h.wait()
    h2 = sandbox.commands.connect(h.pid)
    with pytest.raises(CommandExitException) as e:
        h2.wait()
    assert e.value.exit_code == 7


def test_list(sandbox):
    h = sandbox.commands.run("sleep 30", background=True, envs={"LISTED": "1"}, cwd="/tmp")
    try:
        procs = {p.pid: p for p in sandbox.commands.list()}
        assert h.pid in procs
        p = procs[h.pid]
        assert p.cmd == "/bin/bash"
        assert p.args == ["-l", "-c", "sleep 30"]
        assert p.envs == {"LISTED": "1"}
        assert p.cwd == "/tmp"
    finally:
        assert sandbox.commands.kill(h.pid)


def test_kill(sandbox):
    h = sandbox.commands.run("sleep 30", background=True)
    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1
    assert e.value.error == "signal: killed"
    assert all(p.pid != h.pid for p in sandbox.commands.list())


def test_kill_unknown_pid_is_false(sandbox):
    assert sandbox.commands.kill(999_999) is False


def test_handle_kill(sandbox):
    h = sandbox.commands.run("sleep 30", background=True)
    assert h.kill() is True


def test_kill_reaches_grandchildren(sandbox, is_root):
    h = sandbox.commands.run("sleep 1000 & echo $!; wait", background=True, timeout=0)
    pid_line = None
    for stdout, _stderr, _pty in h:
        if stdout:
            pid_line = stdout.strip()
            break
    assert pid_line and pid_line.isdigit()
    assert sandbox.commands.kill(h.pid)
    deadline = time.monotonic() + 5
    while True:
        r = sandbox.commands.run(
            f"cat /proc/{pid_line}/stat 2>/dev/null || echo gone", user="root" if is_root else None
        )
        if r.stdout.strip() == "gone" or r.stdout.split()[2] == "Z":
            break
        assert time.monotonic() < deadline, f"the grandchild outlived the kill by 5 s: {r.stdout}"
        time.sleep(0.1)


def test_send_stdin_and_close(sandbox):
    h = sandbox.commands.run("cat; sleep 0.5", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "hello ")
    sandbox.commands.send_stdin(h.pid, b"world\n")
    sandbox.commands.close_stdin(h.pid)
    sandbox.commands.close_stdin(h.pid)  # idempotent
    r = h.wait()
    assert r.stdout == "hello world\n"


def test_stream_input(sandbox):
    h = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.stream_input(h.pid, ["a", b"b", "c\n"])
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout == "abc\n"


def test_stdin_closed_by_default(sandbox):
    # Without stdin=True the command reads /dev/null and ends at once.
    r = sandbox.commands.run("cat; echo end")
    assert r.stdout == "end\n"


def test_send_stdin_without_pipe_fails(sandbox):
    h = sandbox.commands.run("sleep 30", background=True)
    try:
        with pytest.raises(Exception) as e:
            sandbox.commands.send_stdin(h.pid, "x")
        assert "stdin" in str(e.value)
    finally:
        h.kill()


def test_envs(sandbox):
    r = sandbox.commands.run('echo "$FOO|$E2B_SANDBOX|$HOME"', envs={"FOO": "bar baz"})
    assert r.stdout.startswith("bar baz|true|")


def test_cwd(sandbox):
    assert sandbox.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"


def test_cwd_missing(sandbox):
    with pytest.raises(InvalidArgumentException) as e:
        sandbox.commands.run("pwd", cwd="/definitely/not/here")
    assert "does not exist" in str(e.value)


def test_user(sandbox, is_root):
    r = sandbox.commands.run("whoami; echo $HOME")
    assert r.stdout == "user\n/home/user\n" if is_root else r.stdout.endswith("\n")
    if is_root:
        assert sandbox.commands.run("whoami", user="root").stdout == "root\n"
        assert sandbox.commands.run("pwd").stdout == "/home/user\n"


def test_unknown_user(sandbox):
    with pytest.raises(AuthenticationException):
        sandbox.commands.run("true", user="no-such-user-xyz")
