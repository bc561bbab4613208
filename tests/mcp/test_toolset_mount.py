"""`mount` / `unmount` of e2b-exec-server through the official MCP Python SDK at its default
settings (`mcp.Client`: protocol negotiated with server/discover, 2026-07-28 listen streams for
list changes) and through the legacy handshake (`ClientSession.initialize`, list changes pushed
to the session), over stdio and Streamable HTTP."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator

import anyio
import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import HttpServer, http_server, proc_cmdlines, stdio_params

pytestmark = pytest.mark.anyio

TRANSPORTS = ["stdio", "http"]
VALID_FORMS = '[{"type":"text","text":"hello"}]  or  {"content":[{"type":"text","text":"hello"}],"meta":{"any":"object"}}'

# Prints the "out" argument as is: the shape cases choose what the tool writes.
SHAPE_TOOL = {
    "name": "shape_probe",
    "description": "prints its out argument verbatim",
    "input_schema": {"type": "object", "properties": {"out": {"type": "string"}}, "required": ["out"]},
    "command": "python3 -c 'import json,os,sys; sys.stdout.write(json.loads(os.environ[\"TOOL_ARGS\"])[\"out\"])'",
}


def text(r) -> str:
    assert r.content, "content must hold at least one block"
    return r.content[0].text


class Changes:
    """A message handler that counts notifications/tools/list_changed."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1

    async def wait_for(self, n: int, what: str) -> None:
        with anyio.fail_after(10):
            while self.count < n:
                await anyio.sleep(0.02)
        assert self.count >= n, what


@pytest.fixture(scope="module")
def mount_server() -> HttpServer:
    with http_server(["--allow-mount"]) as s:
        yield s


@contextlib.asynccontextmanager
async def connect(transport: str, mode: str, server: HttpServer | None, changes: Changes, args: list[str] | None = None) -> AsyncIterator[object]:
    """A client with the SDK's defaults. mode "auto": mcp.Client (discover, then a listen stream
    for list changes); mode "legacy": ClientSession.initialize (changes pushed to the session)."""
    args = ["--allow-mount"] if args is None else args
    async with contextlib.AsyncExitStack() as stack:
        if transport == "http" and server is None:
            server = stack.enter_context(http_server(args))
        if mode == "auto":
            target = stdio_params(args) if transport == "stdio" else server.url
            client = await stack.enter_async_context(Client(target, message_handler=changes))
            if "--allow-mount" in args:
                sub = await stack.enter_async_context(client.listen(tools_list_changed=True))
                assert sub.honored.tools_list_changed, sub.honored
            yield client
        else:
            if transport == "stdio":
                read, write = await stack.enter_async_context(stdio_client(stdio_params(args)))
            else:
                http = await stack.enter_async_context(create_mcp_http_client())
                read, write = await stack.enter_async_context(streamable_http_client(server.url, http_client=http))
            s = await stack.enter_async_context(ClientSession(read, write, message_handler=changes))
            await s.initialize()
            yield s


async def tool_names(c) -> set[str]:
    if isinstance(c, Client):
        return {t.name for t in (await c.list_tools(cache_mode="refresh")).tools}
    return {t.name for t in (await c.list_tools()).tools}


async def inspect_mount(c, name: str) -> dict | None:
    r = await c.call_tool("inspect", {"sections": ["mounts"], "name": name})
    entries = json.loads(text(r))["mounts"]["entries"]
    return entries[0] if entries else None


async def wait_in_flight(c, name: str, n: int) -> dict:
    with anyio.fail_after(10):
        while True:
            m = await inspect_mount(c, name)
            if m is not None and m["in_flight"] == n:
                return m
            await anyio.sleep(0.05)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mount_call_unmount_with_calls_in_flight(transport, mode, request):
    server = request.getfixturevalue("mount_server") if transport == "http" else None
    changes = Changes()
    async with connect(transport, mode, server, changes) as c:
        name = f"echo_{transport}_{mode}"
        assert {"mount", "unmount"} <= await tool_names(c)
        r = await c.call_tool("mount", {
            "name": name,
            "description": "returns its arguments as seen on stdin and in TOOL_ARGS",
            "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            "command": 'printf \'{"content":[{"type":"text","text":"ok"}],"meta":{"stdin":%s,"env":%s}}\' "$(cat)" "$TOOL_ARGS"',
            "timeout_seconds": 20,
        })
        assert not r.is_error, text(r)
        mid = r.meta["mount_id"]
        assert mid.startswith("dyn-") and mid in text(r), (mid, text(r))
        await changes.wait_for(1, "list_changed after mount")
        assert name in await tool_names(c)

        r = await c.call_tool(name, {"x": 7})
        assert not r.is_error, text(r)
        assert text(r) == "ok"
        assert r.meta == {"stdin": {"x": 7}, "env": {"x": 7}}, r.meta

        bad = await c.call_tool(name, {"x": "seven"})
        assert bad.is_error and "invalid arguments" in text(bad) and "x: integer (required)" in text(bad), text(bad)

        # A slow call that finishes within the grace period, and a call refused while draining.
        slow = f"slow_{transport}_{mode}"
        r = await c.call_tool("mount", {
            "name": slow, "description": "sleeps, then answers",
            "input_schema": {"type": "object"},
            "command": "sleep 1; echo '[{\"type\":\"text\",\"text\":\"done\"}]'",
        })
        assert not r.is_error, text(r)
        slow_id = r.meta["mount_id"]
        results: dict[str, object] = {}
        async with anyio.create_task_group() as tg:
            async def call_slow() -> None:
                results["call"] = await c.call_tool(slow, {})

            async def unmount_slow() -> None:
                results["unmount"] = await c.call_tool("unmount", {"id": slow_id, "grace_seconds": 20})

            tg.start_soon(call_slow)
            await wait_in_flight(c, slow, 1)
            tg.start_soon(unmount_slow)
            with anyio.fail_after(10):
                while (m := await inspect_mount(c, slow)) is not None and m["state"] != "draining":
                    await anyio.sleep(0.02)
            refused = await c.call_tool(slow, {})
            assert refused.is_error and "being unmounted" in text(refused), text(refused)
        assert not results["call"].is_error and text(results["call"]) == "done", text(results["call"])
        u = results["unmount"]
        assert not u.is_error, text(u)
        assert (u.meta["finished"], u.meta["killed"]) == (1, 0), u.meta

        # A call still running when the grace period ends is killed with its whole tree.
        marker = f"sleep 37.{abs(hash((transport, mode))) % 1000}"
        hang = f"hang_{transport}_{mode}"
        r = await c.call_tool("mount", {
            "name": hang, "description": "never answers",
            "input_schema": {"type": "object"},
            "command": f"{marker} & {marker}; wait",
        })
        hang_id = r.meta["mount_id"]
        before = changes.count
        async with anyio.create_task_group() as tg:
            async def call_hang() -> None:
                results["hang"] = await c.call_tool(hang, {})

            tg.start_soon(call_hang)
            await wait_in_flight(c, hang, 1)
            started = time.monotonic()
            u = await c.call_tool("unmount", {"id": hang_id, "grace_seconds": 0.3})
            assert time.monotonic() - started < 8
        assert not u.is_error, text(u)
        assert (u.meta["finished"], u.meta["killed"]) == (0, 1), u.meta
        assert "1 killed" in text(u), text(u)
        h = results["hang"]
        assert h.is_error and h.meta["killed_by_unmount"] is True, (text(h), h.meta)
        # unmount returned only after quiescence: the call had ended, the tool is gone.
        assert hang not in await tool_names(c)
        await changes.wait_for(before + 1, "list_changed after unmount")
        with anyio.fail_after(5):
            while any(marker in p for p in proc_cmdlines()):
                await anyio.sleep(0.05)

        r = await c.call_tool("unmount", {"id": mid})
        assert not r.is_error and r.meta["killed"] == 0, text(r)
        assert name not in await tool_names(c)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_result_shape(transport, request):
    server = request.getfixturevalue("mount_server") if transport == "http" else None
    async with connect(transport, "auto", server, Changes()) as c:
        tool = dict(SHAPE_TOOL, name=f"shape_{transport}")
        r = await c.call_tool("mount", tool)
        assert not r.is_error, text(r)
        mid = r.meta["mount_id"]
        try:
            async def out(s: str):
                return await c.call_tool(tool["name"], {"out": s})

            r = await out('[{"type":"text","text":"a"},{"type":"text","text":"b"}]')
            assert not r.is_error, text(r)
            assert [b.text for b in r.content] == ["a", "b"]
            assert r.meta["mount_id"] == mid

            r = await out('{"content":[{"type":"text","text":"ok"}],"meta":{"n":1,"deep":{"a":[1,2]},"s":"x"}}')
            assert not r.is_error, text(r)
            assert text(r) == "ok"
            assert r.meta == {"n": 1, "deep": {"a": [1, 2]}, "s": "x"}, r.meta

            for printed, why in [
                ('"ok"', "it is a string"),
                ('{"content":"ok"}', '"content" is a string'),
                ('[{"text":"no type"}]', 'block 0 has no "type"'),
                ("42", "it is a number"),
                ("null", "it is null"),
                ("hello world", "not JSON"),
            ]:
                r = await out(printed)
                assert r.is_error, (printed, text(r))
                t = text(r)
                assert why in t and VALID_FORMS in t, (printed, t)
                assert json.dumps(printed) in t, (printed, t)
                assert r.meta["error"] == "bad_result_shape", r.meta

            r = await out("x" * 500)
            t = text(r)
            assert r.is_error and "x" * 120 + "… (380 more characters)" in t, t
            assert "x" * 121 not in t, t

            r = await c.call_tool(tool["name"], {"out": "", "extra": 1})
            # The schema allows extra properties; an empty stdout is not JSON.
            assert r.is_error and "not JSON" in text(r), text(r)
        finally:
            await c.call_tool("unmount", {"id": mid})


async def test_failing_command_and_timeout(request):
    async with connect("stdio", "auto", None, Changes()) as c:
        r = await c.call_tool("mount", {
            "name": "fails", "description": "fails",
            "input_schema": {"type": "object"},
            "command": "echo partial; echo 'first line' >&2; echo 'the real reason' >&2; exit 3",
        })
        assert not r.is_error, text(r)
        r = await c.call_tool("fails", {})
        assert r.is_error and "exited with code 3" in text(r) and "the real reason" in text(r), text(r)
        assert r.meta["exit_code"] == 3 and "the real reason" in r.meta["stderr_tail"], r.meta
        r = await c.call_tool("mount", {
            "name": "slowpoke", "description": "too slow",
            "input_schema": {"type": "object"}, "command": "sleep 20", "timeout_seconds": 1,
        })
        assert not r.is_error, text(r)
        r = await c.call_tool("slowpoke", {})
        assert r.is_error and "within its 1 s timeout" in text(r) and r.meta["exit_code"] == 124, (text(r), r.meta)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_each_definition_error_teaches_the_fix(transport, request):
    server = request.getfixturevalue("mount_server") if transport == "http" else None
    async with connect(transport, "auto", server, Changes()) as c:
        ok = {"name": f"t_{transport}", "description": "d", "input_schema": {"type": "object"}, "command": "echo []"}
        cases = [
            (dict(ok, name="exec_command"), "taken by the built-in tool exec_command"),
            (dict(ok, name="mount"), "taken by the built-in tool mount"),
            (dict(ok, name="bad name!"), "1 to 128 characters of A-Z"),
            (dict(ok, name="x" * 129), "129 characters long"),
            (dict(ok, input_schema='{"type":"object"}'), "send the object itself, not a string"),
            (dict(ok, input_schema=[1, 2]), "must be a JSON Schema object, got an array"),
            (dict(ok, input_schema={"type": "string"}), '"type": "object"'),
            (dict(ok, input_schema={"type": "object", "properties": {"a": {"type": "nope"}}}), "not a valid JSON Schema"),
            (dict(ok, input_schema={"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}), "external references are not fetched"),
            (dict(ok, timeout_seconds=0.5), "from 1 to 3600"),
            (dict(ok, timeout_seconds=1e9), "from 1 to 3600"),
            (dict(ok, command="  "), "command is empty"),
        ]
        for args, want in cases:
            r = await c.call_tool("mount", args)
            assert r.is_error, (args, text(r))
            assert want in text(r), (want, text(r))
        assert ok["name"] not in await tool_names(c)
        r = await c.call_tool("mount", ok)
        assert not r.is_error, text(r)
        mid = r.meta["mount_id"]
        r = await c.call_tool("mount", ok)
        assert r.is_error and f"the mounted tool {mid}" in text(r), text(r)
        await c.call_tool("unmount", {"id": mid})


async def test_mount_bound_and_unknown_ids():
    async with connect("stdio", "auto", None, Changes(), ["--allow-mount", "--max-mounts", "2"]) as c:
        r = await c.call_tool("unmount", {"id": "dyn-999"})
        assert r.is_error and "none mounted" in text(r), text(r)
        ids = []
        for n in ("one", "two"):
            r = await c.call_tool("mount", {"name": n, "description": "d", "input_schema": {"type": "object"}, "command": "echo []"})
            assert not r.is_error, text(r)
            ids.append(r.meta["mount_id"])
        r = await c.call_tool("mount", {"name": "three", "description": "d", "input_schema": {"type": "object"}, "command": "echo []"})
        assert r.is_error and "--max-mounts 2" in text(r) and "unmount" in text(r), text(r)
        r = await c.call_tool("unmount", {"id": "dyn-999"})
        assert r.is_error and f"{ids[0]} (one), {ids[1]} (two)" in text(r), text(r)
        assert sorted(r.meta["live_ids"]) == sorted(ids), r.meta
        r = await c.call_tool("inspect", {"sections": ["mounts"], "name": "two"})
        doc = json.loads(text(r))["mounts"]
        assert doc["enabled"] is True and doc["max_mounts"] == 2, doc
        assert [(e["id"], e["name"], e["state"], e["in_flight"]) for e in doc["entries"]] == [(ids[1], "two", "active", 0)], doc
        assert isinstance(doc["entries"][0]["created"], int), doc


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mount_is_refused_without_the_flag(transport, request):
    server = request.getfixturevalue("session_server") if transport == "http" else None
    async with connect(transport, "auto", server, Changes(), []) as c:
        names = await tool_names(c)
        assert "mount" not in names and "unmount" not in names, names
        for tool in ("mount", "unmount"):
            r = await c.call_tool(tool, {"id": "dyn-1"} if tool == "unmount" else {"name": "x", "description": "d", "input_schema": {"type": "object"}, "command": "echo []"})
            assert r.is_error and "--allow-mount" in text(r), text(r)
        r = await c.call_tool("inspect", {"sections": ["mounts"]})
        doc = json.loads(text(r))["mounts"]
        assert doc["enabled"] is False and "--allow-mount" in doc["note"] and doc["entries"] == [], doc
