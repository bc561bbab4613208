"""e2b-exec-server through the official MCP Python client (mcp 2.x): stdio, HTTP sessions, HTTP JSON."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid

import anyio
import httpx2
import pytest

from conftest import KINDS, http_server, open_session, processes_gone, stdio_params

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def text(r) -> str:
    assert r.content, "content must hold at least one block"
    return r.content[0].text


def meta(r) -> dict:
    return r.meta or {}


async def run(s, cmd: str, **kw):
    return await s.call_tool("exec_command", {"cmd": cmd, **kw}, read_timeout_seconds=120)


def sse_or_json(resp: httpx2.Response) -> dict:
    """The one JSON-RPC message of a response, whichever way the server framed it."""
    ct = resp.headers.get("content-type", "")
    if ct.startswith("application/json"):
        return resp.json()
    for line in resp.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])
    raise AssertionError(f"no JSON-RPC message in {resp.text!r}")


# ---- exec_command ---------------------------------------------------------------------------


@pytest.mark.parametrize("lifecycle", ["legacy", "discover"])
@pytest.mark.parametrize("kind", KINDS)
async def test_exit_codes(kind, lifecycle, servers):
    async with open_session(kind, lifecycle=lifecycle, server=servers[kind]) as (s, _):
        for cmd, code in [("true", 0), ("false", 1), ("exit 42", 42), ("kill -9 $$", 137)]:
            r = await run(s, cmd)
            assert meta(r)["exit_code"] == code, (cmd, r)
            assert r.is_error is not True
            assert r.structured_content["exit_code"] == code
        r = await run(s, "sleep 5", timeout=0.5)
        assert meta(r)["exit_code"] == 124 and meta(r)["timed_out"] is True
        r = await run(s, "no_such_command_e2b")
        assert meta(r)["exit_code"] == 127
        r = await s.call_tool("execute", {"cmd": "echo alias; exit 3"})
        assert (text(r), meta(r)["exit_code"]) == ("alias\n", 3)


@pytest.mark.parametrize("kind", KINDS)
async def test_output_is_exact(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        r = await run(s, r"printf 'a\000b\377c'")
        assert text(r) == "a\x00b\ufffdc"
        assert meta(r)["stdout_bytes"] == 5
        r = await run(s, "true")
        assert text(r) == "" and len(r.content) == 1
        r = await run(s, "printf 1; sleep 0.1; printf 2 >&2; sleep 0.1; printf 3")
        assert text(r) == "123"
        assert (meta(r)["stdout_bytes"], meta(r)["stderr_bytes"]) == (2, 1)
        for k in ("exit_code", "truncated", "sandbox_id", "timed_out", "signal", "duration_ms", "stdout_bytes", "stderr_bytes"):
            assert k in meta(r) and k in r.structured_content, k


@pytest.mark.parametrize("kind", KINDS)
async def test_500k_untruncated_and_20m_truncated(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        r = await run(s, "python3 -c \"import sys; sys.stdout.write('x'*(500*1024))\"")
        assert meta(r)["truncated"] is False and len(text(r)) == 500 * 1024
        r = await run(s, "printf HEAD; head -c 20971520 /dev/zero | tr '\\0' a; printf TAIL; exit 7")
        t = text(r)
        assert meta(r)["truncated"] is True
        assert meta(r)["exit_code"] == 7
        assert meta(r)["stdout_bytes"] == 20 * MiB + 8
        assert t.startswith("HEADaaa") and t.endswith("aaaTAIL")
        assert "output truncated" in t and len(t) < 2 * MiB


async def test_timeout_kills_grandchildren(tmp_path):
    tag = f"6{uuid.uuid4().int % 10**6}.5"
    async with open_session("stdio") as (s, _):
        d = f"/tmp/e2b-mcp-{uuid.uuid4().hex}"
        await run(s, f"mkdir -p {d}")
        # No fixed delay to race: the backgrounded grandchild would act only on its `sleep`'s
        # death, which a kill that reaches that `sleep` before the subshell itself lets happen
        # (it did, about once in 40–80 runs on a loaded machine, before the kill stopped the
        # whole tree first). A subshell's command line is its parent's, so it holds the tag.
        r = await run(s, f"(sleep {tag}; touch {d}/alive) & (sh -c 'sleep {tag}') & sleep {tag}", timeout=1)
        assert meta(r)["exit_code"] == 124 and meta(r)["timed_out"] is True
        await processes_gone(f"sleep {tag}", "a grandchild survived the timeout")
        r = await run(s, f"test -e {d}/alive")
        assert meta(r)["exit_code"] == 1, "a grandchild ran on after the timeout's kill"


@pytest.mark.parametrize("kind", ["stdio", "http-session"])
async def test_cancel_mid_command(kind, servers):
    tag = f"7{uuid.uuid4().int % 10**6}.5"
    async with open_session(kind, server=servers[kind]) as (s, _):
        with anyio.move_on_after(1.5) as scope:
            await run(s, f"(sleep {tag}) & sleep {tag}")
        assert scope.cancelled_caught
        await processes_gone(f"sleep {tag}", "the cancelled command's process group is still running")
        r = await run(s, "echo still-alive")
        assert text(r) == "still-alive\n"


@pytest.mark.parametrize("kind", KINDS)
async def test_progress_carries_output(kind, servers):
    got: list[tuple[float, str | None]] = []

    async def on_progress(progress, total, message):
        got.append((progress, message))

    async with open_session(kind, server=servers[kind]) as (s, _):
        r = await s.call_tool(
            "exec_command",
            {"cmd": "for i in 1 2 3; do echo tick$i; sleep 0.4; done"},
            progress_callback=on_progress,
        )
        assert text(r) == "tick1\ntick2\ntick3\n"
    joined = "".join(m or "" for _, m in got)
    assert "tick1" in joined and "tick3" in joined, got
    assert len(got) >= 2


# ---- files ----------------------------------------------------------------------------------


async def roundtrip(s, size: int, chunk: int = 2 * MiB) -> None:
    data = os.urandom(size)
    path = f"/tmp/e2b-mcp-{uuid.uuid4().hex}/nested/blob.bin"
    for off in range(0, size, chunk):
        args = {
            "path": path,
            "content_base64": base64.b64encode(data[off : off + chunk]).decode(),
            "offset": off,
            "total_size": size,
        }
        r = await s.call_tool("upload_file", args)
        assert r.is_error is not True, text(r)
        assert text(r) == f"Written {min(chunk, size - off)} bytes to {path}"
        assert meta(r)["exit_code"] == 0
    assert meta(r)["complete"] is True and meta(r)["sha256"] == hashlib.sha256(data).hexdigest()
    r = await run(s, f"wc -c < {path}")
    assert text(r).strip() == str(size)
    got = bytearray()
    while True:
        # The server's default chunk keeps each result under the SDK's default SSE event limit.
        r = await s.call_tool("download_file", {"path": path, "offset": len(got)})
        assert r.is_error is not True, text(r)
        part = base64.b64decode(text(r), validate=True)
        assert meta(r)["sha256"] == hashlib.sha256(part).hexdigest()
        got += part
        if meta(r)["eof"]:
            break
    assert meta(r)["size"] == size
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    await run(s, f"rm -rf {os.path.dirname(os.path.dirname(path))}")


@pytest.mark.parametrize("kind", KINDS)
async def test_10mib_roundtrip(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        await roundtrip(s, 10 * MiB)


def vm_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("kind", ["stdio", "http-session"])
async def test_100mib_roundtrip(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        await roundtrip(s, 100 * MiB, chunk=4 * MiB)
    if kind == "http-session":
        # Memory is bounded by the chunk, not the file (the embedded envd is in this process too).
        peak = vm_hwm_mib(servers[kind].pid)
        assert peak < 256, f"server peak RSS {peak:.0f} MiB while moving 100 MiB in 4 MiB chunks"


async def test_small_file_base64_equals():
    async with open_session("stdio") as (s, _):
        b64 = base64.b64encode(b"hello \x00\xff world\n").decode()
        p = f"/tmp/e2b-mcp-{uuid.uuid4().hex}.txt"
        await s.call_tool("upload_file", {"path": p, "content_base64": b64})
        r = await s.call_tool("download_file", {"path": p})
        assert text(r) == b64 and meta(r)["eof"] is True and meta(r)["exit_code"] == 0
        r = await s.call_tool("upload_file", {"path": p, "content_base64": "aGk"})
        assert r.is_error is True, "unpadded base64 must be rejected"
        r = await s.call_tool("upload_file", {"path": p, "content_base64": "aGk=\n"})
        assert r.is_error is True, "base64 with a newline must be rejected"


async def test_error_literals_as_non_root():
    async with open_session("stdio") as (s, _):
        r = await run(s, "id -u")
        uid = text(r).strip()
        if os.geteuid() == 0:
            assert uid != "0", "the server must run as the unprivileged test user"
        d = f"/tmp/e2b-mcp-{uuid.uuid4().hex}"
        await run(s, f"mkdir -p {d}/ro && echo secret > {d}/locked && chmod 000 {d}/locked && chmod 555 {d}/ro && echo x > {d}/file")

        async def err(tool, args):
            r = await s.call_tool(tool, args)
            assert r.is_error is True, (tool, args, text(r))
            assert meta(r)["exit_code"] != 0
            return meta(r)["error"]

        b = base64.b64encode(b"x").decode()
        assert await err("download_file", {"path": f"{d}/missing"}) == "file_not_found"
        assert await err("download_file", {"path": f"{d}/locked"}) == "permission_denied"
        assert await err("download_file", {"path": d}) == "is_directory"
        assert await err("download_file", {"path": "relative/file"}) == "invalid_path"
        assert await err("upload_file", {"path": f"{d}/ro/new", "content_base64": b}) == "permission_denied"
        assert await err("upload_file", {"path": d, "content_base64": b}) == "is_directory"
        assert await err("upload_file", {"path": "relative/file", "content_base64": b}) == "invalid_path"
        assert await err("upload_file", {"path": f"{d}/file/under-a-file", "content_base64": b}) == "invalid_path"
        await run(s, f"chmod -R 755 {d}; rm -rf {d}")


# ---- identity, transports, auth ---------------------------------------------------------------


async def test_same_sandbox_id_everywhere(session_server):
    sid = session_server.health["sandbox_id"]
    assert sid and session_server.health["status"] == "ok"
    assert {"status", "sandbox_id", "sessions", "version"} <= set(session_server.health)
    # raw initialize: serverInfo.sandbox_id (the source document's ask) and _meta.sandbox_id
    with httpx2.Client(timeout=30) as h:
        resp = h.post(session_server.url, json=INIT, headers=ACCEPT)
        assert resp.status_code == 200
        assert resp.headers.get("mcp-session-id")
        res = sse_or_json(resp)["result"]
        assert res["serverInfo"]["sandbox_id"] == sid
        assert res["_meta"]["sandbox_id"] == sid
        h.delete(session_server.url, headers={"mcp-session-id": resp.headers["mcp-session-id"]})
    async with open_session("http-session", server=session_server) as (s, init):
        assert init.meta["sandbox_id"] == sid
        r = await run(s, "true")
        assert meta(r)["sandbox_id"] == sid and r.structured_content["sandbox_id"] == sid
        r = await s.call_tool("download_file", {"path": "/nonexistent-e2b"})
        assert meta(r)["sandbox_id"] == sid
    async with open_session("http-session", server=session_server, lifecycle="discover") as (s, disc):
        assert disc.meta["sandbox_id"] == sid
        r = await run(s, "true")
        assert meta(r)["sandbox_id"] == sid


async def test_sandbox_id_env_and_stdio_server_info():
    params = stdio_params(env={"SANDBOX_ID": "sbx-from-env"})
    import subprocess

    p = subprocess.Popen([params.command, *params.args], env=params.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert p.stdin and p.stdout
        p.stdin.write((json.dumps(INIT) + "\n").encode())
        p.stdin.flush()
        res = json.loads(p.stdout.readline())["result"]
        assert res["serverInfo"]["sandbox_id"] == "sbx-from-env"
        assert res["_meta"]["sandbox_id"] == "sbx-from-env"
    finally:
        p.kill()
        p.wait()
    async with open_session("stdio", env={"SANDBOX_ID": "sbx-from-env"}) as (s, init):
        assert init.meta["sandbox_id"] == "sbx-from-env"
        assert meta(await run(s, "true"))["sandbox_id"] == "sbx-from-env"


async def test_sessions_and_delete(session_server):
    with httpx2.Client(timeout=30) as h:
        resp = h.post(session_server.url, json=INIT, headers=ACCEPT)
        sid = resp.headers["mcp-session-id"]
        assert h.get(f"{session_server.base}/health").json()["sessions"] >= 1
        h.post(session_server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**ACCEPT, "mcp-session-id": sid})
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute", "arguments": {"cmd": "echo hello"}}}
        msg = sse_or_json(h.post(session_server.url, json=call, headers={**ACCEPT, "mcp-session-id": sid}))
        assert msg["result"]["content"][0]["text"] == "hello\n" and msg["result"]["_meta"]["exit_code"] == 0
        assert h.delete(session_server.url, headers={"mcp-session-id": sid}).status_code in (200, 204)


async def test_json_mode_for_resp_json(json_server):
    """Orchestra's adapter: raw JSON-RPC over httpx, `resp.json()` on every answer."""
    with httpx2.Client(timeout=30) as h:
        resp = h.post(json_server.url, json=INIT, headers=ACCEPT)
        assert resp.headers["content-type"].startswith("application/json")
        assert resp.json()["result"]["serverInfo"]["sandbox_id"] == json_server.health["sandbox_id"]
        names = {t["name"] for t in h.post(json_server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=ACCEPT).json()["result"]["tools"]}
        assert {"execute", "exec_command", "read", "write", "edit", "grep", "glob", "ls", "upload_file", "download_file"} <= names
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "execute", "arguments": {"cmd": "echo hi; exit 42"}}}
        res = h.post(json_server.url, json=call, headers=ACCEPT).json()["result"]
        assert res["content"][0]["text"] == "hi\n" and res["_meta"]["exit_code"] == 42
        assert res["_meta"]["sandbox_id"] == json_server.health["sandbox_id"]
        # The adapter's notifications/initialized and its close() DELETE must not break anything.
        assert h.post(json_server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=ACCEPT).status_code in (200, 202, 204)
        h.delete(json_server.url)
        call["id"] = 4
        assert h.post(json_server.url, json=call, headers=ACCEPT).json()["result"]["_meta"]["exit_code"] == 42


async def test_auth_401():
    with http_server(env={"API_KEY": "s3cret"}) as srv, httpx2.Client(timeout=30) as h:
        assert h.post(srv.url, json=INIT, headers=ACCEPT).status_code == 401
        assert h.post(srv.url, json=INIT, headers={**ACCEPT, "x-api-key": "wrong"}).status_code == 401
        assert h.post(srv.url, json=INIT, headers={**ACCEPT, "x-api-key": "s3cret"}).status_code == 200
        assert h.post(srv.url, json=INIT, headers={**ACCEPT, "Authorization": "Bearer s3cret"}).status_code == 200
        assert h.get(f"{srv.base}/health").status_code == 200
        async with open_session("http-session", server=srv, headers={"x-api-key": "s3cret"}) as (s, _):
            assert meta(await run(s, "true"))["exit_code"] == 0


async def test_container_host_header():
    with http_server(["--allowed-host", "exec_server"]) as srv, httpx2.Client(timeout=30) as h:
        ok = h.post(srv.url, json=INIT, headers={**ACCEPT, "Host": "exec_server:3005"})
        assert ok.status_code == 200, ok.text
        bad = h.post(srv.url, json=INIT, headers={**ACCEPT, "Host": "evil.example:3005"})
        assert bad.status_code == 403


async def test_body_limit():
    with http_server(["--max-body-bytes", "1000"]) as srv, httpx2.Client(timeout=30) as h:
        big = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "upload_file", "arguments": {"path": "/tmp/x", "content_base64": "A" * 4000}}}
        assert h.post(srv.url, json=big, headers=ACCEPT).status_code == 413


async def test_legacy_text_mode():
    async with open_session("stdio", args=["--legacy-text"]) as (s, _):
        r = await run(s, "echo out; echo err >&2; exit 2")
        assert text(r) == "stdout:\nout\n\nstderr:\nerr\n\nexit_code: 2"
        assert meta(r)["exit_code"] == 2
        r = await run(s, "true")
        assert text(r) == "(no output)" and meta(r)["exit_code"] == 0


async def test_compat_tools():
    async with open_session("stdio") as (s, _):
        d = f"/tmp/e2b-mcp-{uuid.uuid4().hex}"
        f = f"{d}/a/x.txt"
        assert meta(await s.call_tool("write", {"path": f, "content": "one\ntwo two\n"}))["exit_code"] == 0
        r = await s.call_tool("read", {"path": f})
        assert text(r) == "     1\tone\n     2\ttwo two\n"
        assert meta(await s.call_tool("read", {"path": f + ".missing"}))["exit_code"] == 1
        e = lambda old, **kw: s.call_tool("edit", {"path": f, "old_string": old, "new_string": "2", **kw})  # noqa: E731
        assert meta(await e("zzz"))["exit_code"] == 1
        assert meta(await e("two"))["exit_code"] == 2
        r = await e("two", replace_all=True)
        assert meta(r)["exit_code"] == 0 and "2 occurrence" in text(r)
        assert meta(await s.call_tool("edit", {"path": d + "/nope", "old_string": "a", "new_string": "b"}))["exit_code"] == 3
        r = await s.call_tool("grep", {"pattern": "one", "path": d})
        assert meta(r)["exit_code"] == 0
        assert json.loads(text(r).splitlines()[0]) == {"path": f, "line": 1, "text": "one"}
        assert meta(await s.call_tool("grep", {"pattern": "nothing-here", "path": d}))["exit_code"] == 1
        r = await s.call_tool("glob", {"pattern": "**/*.txt", "path": d})
        assert json.loads(text(r).splitlines()[0])["path"] == f
        r = await s.call_tool("ls", {"path": d})
        assert json.loads(text(r).splitlines()[0]) == {"path": f"{d}/a", "is_dir": True}
        assert meta(await s.call_tool("ls", {"path": d + "/nope"}))["exit_code"] == 1
        await run(s, f"rm -rf {d}")
