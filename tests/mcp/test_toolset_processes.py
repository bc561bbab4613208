"""Background processes of e2b-exec-server (exec_command background: true, read_output,
write_stdin, kill_process, list_processes) through the official MCP Python client over stdio and
Streamable HTTP at the SDK's default settings."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from conftest import KINDS, free_port, open_session

pytestmark = pytest.mark.anyio


def text(r) -> str:
    assert r.content, "content must hold at least one block"
    return r.content[0].text


def meta(r) -> dict:
    return r.meta or {}


async def start(s, cmd: str, **kw):
    r = await s.call_tool("exec_command", {"cmd": cmd, "background": True, **kw})
    assert not r.is_error, text(r)
    pid = meta(r).get("process_id")
    assert isinstance(pid, str) and pid.startswith("p-"), meta(r)
    assert r.structured_content["process_id"] == pid
    return pid


async def read_until(s, pid: str, cursor: int, want: str, deadline_s: float = 60) -> tuple[str, int, dict]:
    """Reads incrementally until `want` appears; returns everything read, the cursor, the last _meta."""
    got = ""
    end = time.monotonic() + deadline_s
    while True:
        r = await s.call_tool("read_output", {"process_id": pid, "cursor": cursor})
        assert not r.is_error, text(r)
        m = meta(r)
        got += text(r)
        cursor = m["next_cursor"]
        if want in got or m["eof"]:
            return got, cursor, m
        if time.monotonic() > end:
            raise AssertionError(f"{want!r} did not appear within {deadline_s} s; read so far: {got!r}")
        await anyio.sleep(0.1)


@pytest.mark.parametrize("kind", KINDS)
async def test_http_server_in_background(kind, servers):
    port = free_port()
    async with open_session(kind, server=servers[kind]) as (s, _):
        pid = await start(s, f"exec python3 -u -m http.server {port} --bind 127.0.0.1", tag="web")
        out, cursor, m = await read_until(s, pid, 0, "Serving HTTP")
        assert m["running"] is True and m["eof"] is False and "exit_code" not in m, m
        assert m["output_lost"] == 0

        # The server answers a client in the same sandbox (an isolated sandbox's loopback is
        # its own); its access log arrives as new output after the cursor.
        fetch = await s.call_tool(
            "exec_command",
            {
                "cmd": "python3 -c \"import urllib.request as u; "
                f"print(len(u.urlopen('http://127.0.0.1:{port}/', timeout=30).read()))\"",
            },
        )
        assert not fetch.is_error and int(text(fetch).split()[0]) > 0, text(fetch)
        more, cursor2, _ = await read_until(s, pid, cursor, "GET / HTTP")
        assert cursor2 > cursor and "Serving HTTP" not in more, more

        listed = await s.call_tool("list_processes", {})
        rows = [json.loads(l) for l in text(listed).splitlines()]
        row = next(r for r in rows if r["process_id"] == pid)
        assert row["tag"] == "web" and row["running"] is True and str(port) in row["command"], row

        k = await s.call_tool("kill_process", {"process_id": pid, "signal": "KILL"})
        assert not k.is_error, text(k)
        end = time.monotonic() + 60
        while True:
            r = await s.call_tool("read_output", {"process_id": pid, "cursor": cursor2})
            if meta(r)["eof"]:
                break
            assert time.monotonic() < end, f"the killed process never ended: {meta(r)}"
            await anyio.sleep(0.1)
        assert meta(r)["exit_code"] == 137 and meta(r)["running"] is False, meta(r)


@pytest.mark.parametrize("kind", ["stdio", "http-session"])
async def test_stdin_and_unknown_ids(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        pid = await start(s, "while read -r line; do echo \"got:$line\"; done; echo bye")
        w = await s.call_tool("write_stdin", {"process_id": pid, "data": "hello\n", "close": True})
        assert not w.is_error, text(w)
        out, _, m = await read_until(s, pid, 0, "bye")
        assert "got:hello" in out and "bye" in out, out

        bad = await s.call_tool("read_output", {"process_id": "p-999999"})
        assert bad.is_error and "p-999999" in text(bad) and pid in text(bad), text(bad)
        sig = await s.call_tool("kill_process", {"process_id": pid, "signal": "HUP"})
        assert sig.is_error or "already ended" in text(sig), text(sig)


async def test_a_lapped_reader_sees_output_lost():
    args = ["--process-output-bytes", "1000"]
    async with open_session("stdio", args=args) as (s, _):
        pid = await start(s, "head -c 5000 /dev/zero | tr '\\0' a; echo END")
        end = time.monotonic() + 60
        while True:
            r = await s.call_tool("read_output", {"process_id": pid, "cursor": 0})
            if meta(r)["eof"]:
                break
            assert time.monotonic() < end, meta(r)
            await anyio.sleep(0.1)
        m = meta(r)
        assert m["output_lost"] == 5004 - 1000, m
        assert m["next_cursor"] == 5004 and m["exit_code"] == 0, m
        assert text(r).endswith("aaaaEND\n") and "dropped" in text(r), text(r)[:200]
