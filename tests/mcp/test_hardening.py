"""Issue 12/15 regressions for e2b-exec-server, through the official MCP Python SDK at its
default settings (no lifted SSE event size or other client limits)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from conftest import free_port, http_server, open_session, processes_gone, run_as_prefix, server_bin, server_env

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HANG_GUARD = 30  # seconds: only a hang guard, never a timing assertion


def text(r) -> str:
    assert r.content, "content must hold at least one block"
    return r.content[0].text


def meta(r) -> dict:
    return r.meta or {}


async def run(s, cmd: str, **kw):
    return await s.call_tool("exec_command", {"cmd": cmd, **kw}, read_timeout_seconds=120)


def tmpdir_name() -> str:
    return f"/tmp/e2b-mcp-h-{uuid.uuid4().hex}"


# ---- SEP-1303: argument errors are tool results -----------------------------------------------


@pytest.mark.parametrize("kind", ["stdio", "http-session"])
async def test_argument_errors_are_tool_results(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        for tool, args, needle in [
            ("exec_command", {}, "cmd"),
            ("exec_command", {"cmd": "true", "timeout": "soon"}, "timeout"),
            ("exec_command", {"cmd": "true", "cwdd": "/tmp"}, "cwdd"),
            ("upload_file", {"path": "/tmp/x"}, "content_base64"),
            ("read", {"path": 5}, "path"),
        ]:
            r = await s.call_tool(tool, args)
            assert r.is_error is True, (tool, args)
            assert needle in text(r) and "inputSchema" in text(r), text(r)
        with pytest.raises(MCPError, match="unknown tool"):
            await s.call_tool("no_such_tool", {})
        assert meta(await run(s, "true"))["exit_code"] == 0


async def test_huge_timeout_is_capped_not_a_panic():
    async with open_session("stdio") as (s, _):
        for t in (1e300, 1.7976931348623157e308, 1.9e19):
            r = await run(s, "echo ok", timeout=t)
            assert text(r) == "ok\n" and meta(r)["exit_code"] == 0
        r = await run(s, "true", timeout=-1)
        assert r.is_error is True and "timeout" in text(r)


# ---- exposure: auth, Origin, Host ---------------------------------------------------------------


def start_raw(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    prefix, _ = run_as_prefix()
    return subprocess.Popen(
        [*prefix, server_bin(), *args], env=server_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def wait_health(port: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}")
        with contextlib.suppress(Exception):
            if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    pytest.fail("server did not answer /health")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_non_loopback_needs_a_key_or_the_insecure_flag():
    port = free_port()
    p = start_raw(["--http", f"0.0.0.0:{port}"])
    try:
        rc = p.wait(60)
    except subprocess.TimeoutExpired:
        stop(p)
        pytest.fail("the server started on 0.0.0.0 without an API key")
    err = p.stderr.read().decode() if p.stderr else ""
    assert rc != 0 and "--api-key" in err and "--insecure-no-auth" in err, err

    port = free_port()
    p = start_raw(["--http", f"0.0.0.0:{port}", "--insecure-no-auth"])
    try:
        wait_health(port, p)
    finally:
        stop(p)
    err = p.stderr.read().decode() if p.stderr else ""
    assert "WITHOUT AUTHENTICATION" in err, err

    port = free_port()
    p = start_raw(["--http", f"0.0.0.0:{port}"], env={"API_KEY": "k"})
    try:
        wait_health(port, p)
        with httpx2.Client(timeout=30) as h:
            key = {**ACCEPT, "x-api-key": "k"}
            assert h.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers=key).status_code == 200
            # The Host check stays on for a non-loopback bind (DNS rebinding).
            bad = h.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers={**key, "Host": "evil.example"})
            assert bad.status_code == 403, bad.text
    finally:
        stop(p)


async def test_origin_is_validated():
    with http_server() as srv, httpx2.Client(timeout=30) as h:
        assert h.post(srv.url, json=INIT, headers=ACCEPT).status_code == 200
        bad = h.post(srv.url, json=INIT, headers={**ACCEPT, "Origin": "https://evil.example"})
        assert bad.status_code == 403, bad.text
        assert "--allowed-origin" in bad.text
    with http_server(["--allowed-origin", "https://app.example:8443"]) as srv, httpx2.Client(timeout=30) as h:
        ok = h.post(srv.url, json=INIT, headers={**ACCEPT, "Origin": "https://app.example:8443"})
        assert ok.status_code == 200, ok.text
        assert h.post(srv.url, json=INIT, headers={**ACCEPT, "Origin": "http://app.example"}).status_code == 403


# ---- stock-client defaults for files ----------------------------------------------------------


async def upload_chunked(s, path: str, data: bytes, chunk: int) -> object:
    r = None
    for off in range(0, max(len(data), 1), chunk):
        piece = data[off : off + chunk]
        args = {"path": path, "content_base64": base64.b64encode(piece).decode(), "offset": off, "total_size": len(data)}
        r = await s.call_tool("upload_file", args)
        assert r.is_error is not True, text(r)
    return r


@pytest.mark.parametrize("kind", ["http-session", "stdio"])
async def test_download_defaults_fit_the_stock_client(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        d = tmpdir_name()
        data = os.urandom(3 * MiB + 5)
        r = await upload_chunked(s, f"{d}/big.bin", data, MiB)
        assert meta(r)["complete"] is True and meta(r)["sha256"] == hashlib.sha256(data).hexdigest()
        # One call on a file larger than one chunk: a teaching error, never a short success.
        r = await s.call_tool("download_file", {"path": f"{d}/big.bin"})
        assert r.is_error is True
        assert "offset" in text(r) and "length" in text(r) and "eof" in text(r), text(r)
        # The chunked form works at the client's default 1 MiB SSE event limit.
        got = bytearray()
        while True:
            r = await s.call_tool("download_file", {"path": f"{d}/big.bin", "offset": len(got)})
            assert r.is_error is not True, text(r)
            got += base64.b64decode(text(r), validate=True)
            if meta(r)["eof"]:
                break
        assert bytes(got) == data
        # Exec output at the default cap fits too, even when JSON escaping grows it six-fold.
        r = await run(s, "head -c 2000000 /dev/zero")
        assert r.is_error is not True and meta(r)["truncated"] is True
        await run(s, f"rm -rf {d}")


async def test_chunked_upload_is_staged_and_keeps_the_mode():
    async with open_session("stdio") as (s, _):
        d = tmpdir_name()
        p = f"{d}/f.txt"
        await s.call_tool("write", {"path": p, "content": "old\n"})
        await run(s, f"chmod 640 {p}")
        new = os.urandom(200_000)
        first = {"path": p, "content_base64": base64.b64encode(new[:100_000]).decode(), "offset": 0, "total_size": len(new)}
        r = await s.call_tool("upload_file", first)
        assert meta(r)["complete"] is False and meta(r)["next_offset"] == 100_000
        # Interrupted here: the destination is untouched.
        assert text(await run(s, f"cat {p}")) == "old\n"
        r = await s.call_tool(
            "upload_file",
            {"path": p, "content_base64": base64.b64encode(new[100_000:]).decode(), "offset": 100_000, "total_size": len(new)},
        )
        assert meta(r)["complete"] is True and meta(r)["sha256"] == hashlib.sha256(new).hexdigest()
        assert text(await run(s, f"stat -c %a {p}")).strip() == "640"
        assert text(await run(s, f"sha256sum < {p}")).split()[0] == hashlib.sha256(new).hexdigest()
        # An out-of-order chunk is refused with what to do.
        r = await s.call_tool("upload_file", {**first, "offset": 50})
        assert r.is_error is True and "offset 0" in text(r)
        # Only the file is left in the directory (no staged parts).
        assert text(await run(s, f"ls -A {d}")).split() == ["f.txt"]
        await run(s, f"rm -rf {d}")


# ---- compat tools -----------------------------------------------------------------------------


async def test_edit_is_byte_exact_past_10_mib():
    async with open_session("stdio") as (s, _):
        d = tmpdir_name()
        p = f"{d}/big.bin"
        # 11 MiB with invalid UTF-8 everywhere, the text to replace at the very end.
        await run(s, f"mkdir -p {d} && head -c 11534336 /dev/zero | tr '\\0' '\\377' > {p} && printf 'NEEDLE\\n' >> {p}")
        before = text(await run(s, f"sha256sum < {p}")).split()[0]
        r = await s.call_tool("edit", {"path": p, "old_string": "NEEDLE", "new_string": "PIN"})
        assert meta(r)["exit_code"] == 0, text(r)
        want = hashlib.sha256(b"\xff" * 11534336 + b"PIN\n").hexdigest()
        assert text(await run(s, f"sha256sum < {p}")).split()[0] == want != before
        await run(s, f"rm -rf {d}")


async def test_read_never_cuts_silently():
    async with open_session("stdio") as (s, _):
        d = tmpdir_name()
        p = f"{d}/long.txt"
        # Line 1 is 11 MiB; lines 2 and 3 follow it.
        await run(s, f"mkdir -p {d} && head -c 11534336 /dev/zero | tr '\\0' x > {p} && printf '\\nsecond\\nthird\\n' >> {p}")
        r = await s.call_tool("read", {"path": p, "offset": 1})
        assert text(r) == "     2\tsecond\n     3\tthird\n", text(r)[:200]
        assert meta(r)["truncated"] is False
        r = await s.call_tool("read", {"path": p})
        assert meta(r)["truncated"] is True and "line cut" in text(r)
        await run(s, f"rm -rf {d}")


async def test_listings_cut_whole_lines_with_a_flag():
    async with open_session("stdio", args=["--max-output-bytes", "8192"]) as (s, _):
        d = tmpdir_name()
        await run(s, f"mkdir -p {d} && cd {d} && for i in $(seq 300); do echo 'needle {'x' * 100}' > f$i.txt; done")
        for tool, args in [("grep", {"pattern": "needle", "path": d}), ("ls", {"path": d}), ("glob", {"pattern": "*.txt", "path": d})]:
            r = await s.call_tool(tool, args)
            assert meta(r)["truncated"] is True, (tool, meta(r))
            lines = text(r).splitlines()
            for line in lines:
                json.loads(line)  # never cut mid-line
            assert "truncated" in json.loads(lines[-1]), lines[-1]
        await run(s, f"rm -rf {d}")


async def test_grep_keeps_matches_when_it_exits_2():
    if os.geteuid() != 0:
        pytest.fail("this test needs root (the server then runs as the unprivileged e2bmcp user)", pytrace=False)
    async with open_session("stdio") as (s, _):
        d = tmpdir_name()
        await run(s, f"mkdir -p {d} && echo needle > {d}/ok.txt && echo needle > {d}/locked.txt && chmod 000 {d}/locked.txt")
        r = await s.call_tool("grep", {"pattern": "needle", "path": d})
        assert meta(r)["exit_code"] == 2, text(r)
        first = json.loads(text(r).splitlines()[0])
        assert first == {"path": f"{d}/ok.txt", "line": 1, "text": "needle"}
        assert "Permission denied" in text(r) or "permission" in text(r).lower()
        await run(s, f"chmod 600 {d}/locked.txt; rm -rf {d}")


# ---- hangs: FIFOs, over-long stdio lines, cancellation ------------------------------------------


async def test_fifo_never_hangs_file_tools():
    async with open_session("stdio", args=["--file-timeout", "1"]) as (s, _):
        d = tmpdir_name()
        f = f"{d}/fifo"
        await run(s, f"mkdir -p {d} && mkfifo {f}")
        with anyio.fail_after(HANG_GUARD):
            r = await s.call_tool("download_file", {"path": f})
            assert r.is_error is True and "not a regular file" in text(r)
            r = await s.call_tool("read", {"path": f})
            assert meta(r)["exit_code"] == 4
            r = await s.call_tool("edit", {"path": f, "old_string": "a", "new_string": "b"})
            assert meta(r)["exit_code"] == 4
            r = await s.call_tool("upload_file", {"path": f, "content_base64": "AA=="})
            # envd opens only regular files for uploads: refused at once, never a hang.
            assert r.is_error is True, text(r)
            assert meta(r).get("error") == "invalid_path" or "regular file" in text(r), text(r)
        await run(s, f"timeout 2 cat {f} > /dev/null; rm -rf {d}")
        assert meta(await run(s, "true"))["exit_code"] == 0


async def test_over_long_stdio_line_gets_an_answer():
    async with open_session("stdio", args=["--max-body-bytes", "10000"]) as (s, _):
        with anyio.fail_after(HANG_GUARD):
            r = await s.call_tool("upload_file", {"path": "/tmp/e2b-too-long", "content_base64": "A" * 40_000})
        assert r.is_error is True and "10000" in text(r), text(r)
        assert meta(await run(s, "true"))["exit_code"] == 0


async def test_cancelled_request_stops_the_command():
    async with open_session("stdio") as (s, _):
        marker = f"/tmp/e2b-mcp-cancel-{uuid.uuid4().hex}"
        # The command acts only when told to, after its process is gone: a fixed delay would
        # race the cancellation's latency on a loaded machine.
        cmd = f"while :; do [ -e {marker}.go ] && touch {marker}; sleep 0.05; done"
        with pytest.raises(MCPError):
            await s.call_tool("exec_command", {"cmd": cmd}, read_timeout_seconds=0.5)
        await processes_gone(f"{marker}.go", "the command outlived notifications/cancelled")
        r = await run(s, f"touch {marker}.go && sleep 1 && test -e {marker}")
        assert meta(r)["exit_code"] == 1, "the command ran on after notifications/cancelled"


# ---- migration: legacy text per session and per call, JSON next to sessions ---------------------


async def test_legacy_text_per_session_and_per_call():
    with http_server() as srv:
        async with open_session("http-session", server=srv) as (s, _):
            r = await run(s, "echo out; exit 2")
            assert text(r) == "out\n"
            r = await s.call_tool("exec_command", {"cmd": "echo out; exit 2"}, meta={"e2b/legacy_text": True})
            assert text(r) == "stdout:\nout\n\nexit_code: 2"
        legacy = type("L", (), {"url": srv.url + "/legacy"})()
        async with open_session("http-session", server=legacy) as (s, _):  # type: ignore[arg-type]
            r = await run(s, "echo out; exit 2")
            assert text(r) == "stdout:\nout\n\nexit_code: 2" and meta(r)["exit_code"] == 2
            r = await s.call_tool("exec_command", {"cmd": "echo out"}, meta={"e2b/legacy_text": False})
            assert text(r) == "out\n"
        with httpx2.Client(timeout=30) as h:
            r = h.post(srv.url + "/json", json=INIT, headers=ACCEPT)
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
            assert "mcp-session-id" not in r.headers
            r = h.post(srv.url, json=INIT, headers=ACCEPT)
            assert r.status_code == 200 and r.headers.get("mcp-session-id")
