"""`inspect` of e2b-exec-server through the official MCP Python client (stdio and HTTP)."""

from __future__ import annotations

import json
import os

import pytest

from conftest import KINDS, open_session

pytestmark = pytest.mark.anyio


def text(r) -> str:
    assert r.content, "content must hold at least one block"
    return r.content[0].text


@pytest.mark.parametrize("kind", KINDS)
async def test_inspect_sections_and_name_filter(kind, servers):
    async with open_session(kind, server=servers[kind]) as (s, _):
        listed = {t.name for t in (await s.list_tools()).tools}
        r = await s.call_tool("inspect", {})
        assert not r.is_error, text(r)
        doc = json.loads(text(r))
        assert set(doc) == {"tools", "mounts", "processes", "sandbox", "catalog"}, doc.keys()
        assert {t["name"] for t in doc["tools"]} == listed
        assert {t["name"] for t in doc["catalog"]} == listed
        assert doc["mounts"]["enabled"] is False and doc["mounts"]["entries"] == [], doc["mounts"]
        assert "--allow-mount" in doc["mounts"]["note"], doc["mounts"]
        sbx = doc["sandbox"]
        assert sbx["id"] and sbx["envd"]["envd_version"], sbx
        assert sbx["envd"]["features"]["CloseStdin"] in (True, False), sbx
        assert sbx["limits"]["max_processes"] == 32, sbx
        # This suite's sandbox is isolated (the default), or the embedded local one when
        # scripts/test runs it with E2B_ISOLATION=none: inspect says which.
        if os.environ.get("E2B_ISOLATION") == "none":
            assert sbx["isolation"] == "off" and "Sandbox::local" in sbx["isolation_detail"], sbx
        else:
            assert sbx["isolation"] == "on" and "isolated" in sbx["isolation_detail"], sbx

        r = await s.call_tool(
            "exec_command", {"cmd": "sleep 30", "background": True, "tag": "sleeper"}
        )
        pid = r.meta["process_id"]
        try:
            r = await s.call_tool("inspect", {"sections": ["processes", "tools"], "name": "sleeper"})
            doc = json.loads(text(r))
            assert set(doc) == {"processes", "tools"}, doc.keys()
            assert [p["process_id"] for p in doc["processes"]] == [pid], doc
            assert doc["processes"][0]["running"] is True and "sleep 30" in doc["processes"][0]["command"]
            assert doc["tools"] == []
            r = await s.call_tool("inspect", {"sections": ["tools"], "name": "read_output"})
            tools = json.loads(text(r))["tools"]
            assert [t["name"] for t in tools] == ["read_output"], tools
            assert "cursor" in tools[0]["input_schema"]["properties"], tools
        finally:
            await s.call_tool("kill_process", {"process_id": pid, "signal": "KILL"})

        bad = await s.call_tool("inspect", {"sections": ["nope"]})
        assert bad.is_error and "processes" in text(bad) and '"sections"' in text(bad), text(bad)
