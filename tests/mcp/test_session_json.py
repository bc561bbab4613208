"""Sessions with JSON responses (`/mcp/session-json`): plain httpx with `resp.json()` on every
POST of a session, and the official MCP Python SDK's streamable HTTP client at its defaults."""

from __future__ import annotations

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import http_server

pytestmark = pytest.mark.anyio

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server():
    with http_server() as s:
        yield s


def rpc(id_: int, method: str, params: dict | None = None) -> dict:
    m = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        m["params"] = params
    return m


def post_json(c: httpx2.Client, url: str, body: dict, sid: str | None = None) -> httpx2.Response:
    headers = dict(ACCEPT)
    if sid:
        headers["Mcp-Session-Id"] = sid
    r = c.post(url, json=body, headers=headers, timeout=60)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), (r.headers, r.text[:300])
    return r


def test_plain_http_client_gets_json_on_every_post(server):
    url = f"{server.base}/mcp/session-json"
    with httpx2.Client() as c:
        init = rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}})
        r = post_json(c, url, init)
        sid = r.headers["mcp-session-id"]
        v = r.json()
        assert v["id"] == 1 and v["result"]["serverInfo"]["sandbox_id"] == server.health["sandbox_id"], v
        r = c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**ACCEPT, "Mcp-Session-Id": sid})
        assert r.status_code == 202, r.text

        tools = post_json(c, url, rpc(2, "tools/list"), sid).json()["result"]["tools"]
        assert "exec_command" in {t["name"] for t in tools}

        v = post_json(c, url, rpc(3, "tools/call", {"name": "exec_command", "arguments": {"cmd": "echo hi; exit 3"}}), sid).json()
        assert v["id"] == 3
        assert v["result"]["content"][0]["text"] == "hi\n"
        assert v["result"]["_meta"]["exit_code"] == 3

        # The largest result (the output cap) still comes as one JSON body.
        v = post_json(c, url, rpc(4, "tools/call", {"name": "exec_command", "arguments": {"cmd": "head -c 2000000 /dev/zero | tr '\\0' x"}}), sid).json()
        assert v["result"]["_meta"]["exit_code"] == 0
        assert len(v["result"]["content"][0]["text"]) >= 256 * 1024

        # An error is a JSON-RPC answer too.
        v = post_json(c, url, rpc(5, "tools/call", {"name": "no_such_tool", "arguments": {}}), sid).json()
        assert v["id"] == 5 and ("error" in v or v["result"].get("isError")), v

        r = c.delete(url, headers={"Mcp-Session-Id": sid})
        assert r.status_code in (200, 202, 204), r.status_code


async def test_official_sdk_client_at_its_defaults(server):
    url = f"{server.base}/mcp/session-json"
    got: list[str | None] = []

    async def on_progress(progress, total, message):
        got.append(message)

    seen: list[tuple[str, str]] = []

    async def on_response(resp) -> None:
        if resp.request.method == "POST":
            seen.append((resp.request.url.path, resp.headers.get("content-type", "")))

    async with create_mcp_http_client() as http:
        # Only observes the answers' content types; the client is the SDK's, at its defaults.
        http.event_hooks["response"].append(on_response)
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as s:
                hs = await s.initialize()
                assert hs.server_info.name
                r = await s.call_tool("exec_command", {"cmd": "echo sdk; exit 2"})
                assert r.content[0].text == "sdk\n"
                assert r.meta["exit_code"] == 2
                # Progress before the result: the answer falls back to SSE, nothing lost.
                r = await s.call_tool(
                    "exec_command",
                    {"cmd": "echo tick1; sleep 0.6; echo tick2"},
                    progress_callback=on_progress,
                )
                assert r.content[0].text == "tick1\ntick2\n"
                r = await s.call_tool("exec_command", {"cmd": "echo after"})
                assert r.content[0].text == "after\n"
    assert "tick1" in "".join(m or "" for m in got), got
    types = [t for _, t in seen]
    assert any(t.startswith("application/json") for t in types), seen
    assert any(t.startswith("text/event-stream") for t in types), ("the progress call answers SSE", seen)
