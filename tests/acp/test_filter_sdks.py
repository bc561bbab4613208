"""Issue 12: the ACP filter of `e2b acp` against lines built to be read one way by a filter and
another by a client (duplicate keys, escaped keys, a batch with an item that fails to parse).

The official Python SDK (agent-client-protocol) and TypeScript SDK (@agentclientprotocol/sdk)
are the clients, with fs and terminal handlers registered and the capabilities advertised; the
agent is evil_agent.py in the embedded local sandbox. No handler may run, and the agent must get
the parse-error reply (-32700, id null) for every such line.

Needs E2B_CLI_BIN (scripts/test sets it; or target/debug/e2b), node, and the TypeScript SDK
installed by scripts/setup into $E2B_CACHE/npm-acp-sdk.
"""

import asyncio
import asyncio.subprocess as aio_subprocess
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, Client, connect_to_agent
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
AGENT = f"{sys.executable} {HERE / 'evil_agent.py'}"
ATTACKS = 5


def e2b_bin() -> str:
    path = os.environ.get("E2B_CLI_BIN") or str(ROOT / "target" / "debug" / "e2b")
    if not os.access(path, os.X_OK):
        pytest.fail(f"missing the e2b binary at {path}: build it (cargo build -p e2b-cli) or set E2B_CLI_BIN")
    return path


def ts_sdk_dir() -> Path:
    cache = Path(os.environ.get("E2B_CACHE", ROOT / ".ci-cache"))
    d = Path(os.environ.get("ACP_TS_SDK_DIR", cache / "npm-acp-sdk"))
    if not (d / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        pytest.fail(f"missing the ACP TypeScript SDK in {d}: run scripts/setup")
    return d


def check_meta(meta: Any) -> None:
    assert meta is not None, "session/new carried no _meta from the agent"
    assert meta["served"] == [], f"a client answered a smuggled request: {meta['served']}"
    replies = meta["replies"]
    assert len(replies) == ATTACKS, f"expected {ATTACKS} parse-error replies, got {replies}"
    for r in replies:
        assert r["id"] is None and r["error"]["code"] == -32700, r


class RecordingClient(Client):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("fs/read_text_file")
        return {"content": "SECRET"}

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("fs/write_text_file")
        return {}

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("terminal/create")
        return {"terminalId": "t1"}

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("session/request_permission")
        raise RuntimeError("unexpected permission request")


async def drive_python_client() -> tuple[list[str], Any]:
    proc = await asyncio.create_subprocess_exec(
        e2b_bin(), "acp", "--", AGENT, stdin=aio_subprocess.PIPE, stdout=aio_subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    client = RecordingClient()
    conn = connect_to_agent(client, proc.stdin, proc.stdout)
    try:
        await asyncio.wait_for(
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=True,
                ),
                client_info=Implementation(name="filter-test", title="filter", version="0.1.0"),
            ),
            60,
        )
        session = await asyncio.wait_for(conn.new_session(mcp_servers=[], cwd="/tmp"), 60)
        await asyncio.sleep(0.2)
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except asyncio.TimeoutError:
            proc.kill()
            raise
    return client.calls, session.field_meta


def test_python_sdk_client_never_sees_a_smuggled_fs_or_terminal_call() -> None:
    calls, meta = asyncio.run(drive_python_client())
    assert calls == [], f"the Python SDK client served {calls}"
    check_meta(meta)


def test_typescript_sdk_client_never_sees_a_smuggled_fs_or_terminal_call() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("missing node (20+): the TypeScript SDK test needs it")
    out = subprocess.run(
        [node, str(HERE / "ts_client.mjs"), str(ts_sdk_dir()), e2b_bin(), AGENT],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"ts_client failed ({out.returncode}): {out.stderr[-4000:]}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["calls"] == [], f"the TypeScript SDK client served {result['calls']}"
    check_meta(result["meta"])
