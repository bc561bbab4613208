"""Sandbox.pty (sync API) against our envd."""

import time

from e2b import PtySize


def _collect_until(handle, needle: bytes, deadline: float = 10.0) -> bytes:
    data = b""
    end = time.monotonic() + deadline
    for _stdout, _stderr, pty in handle:
        if pty:
            data += pty
        if needle in data or time.monotonic() > end:
            break
    return data


def test_pty_create_send_exit(sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80), timeout=30)
    sandbox.pty.send_stdin(h.pid, b"echo pty-$((40+2))\n")
    data = _collect_until(h, b"pty-42")
    assert b"pty-42" in data
    sandbox.pty.send_stdin(h.pid, b"exit 5\n")
    try:
        h.wait()
    except Exception as e:  # CommandExitException for exit 5
        assert getattr(e, "exit_code", None) == 5


def test_pty_resize(sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80), timeout=30)
    sandbox.pty.send_stdin(h.pid, b"stty size\n")
    assert b"24 80" in _collect_until(h, b"24 80")
    sandbox.pty.resize(h.pid, PtySize(rows=40, cols=120))
    sandbox.pty.send_stdin(h.pid, b"stty size\n")
    assert b"40 120" in _collect_until(h, b"40 120")
    assert sandbox.pty.kill(h.pid)


def test_pty_kill(sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80), timeout=30)
    assert sandbox.pty.kill(h.pid) is True
    h.disconnect()
    end = time.monotonic() + 5
    while any(p.pid == h.pid for p in sandbox.commands.list()) and time.monotonic() < end:
        time.sleep(0.05)
    assert sandbox.pty.kill(h.pid) is False


def test_pty_close_stdin_fails(sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80), timeout=30)
    try:
        try:
            sandbox.commands.close_stdin(h.pid)
            raise AssertionError("close_stdin on a PTY must fail")
        except AssertionError:
            raise
        except Exception as e:
            assert "Ctrl+D" in str(e) or "PTY" in str(e)
    finally:
        sandbox.pty.kill(h.pid)
