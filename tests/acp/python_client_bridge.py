"""Drive the e2b-acp bridge with the official ACP Python SDK client.

usage: python python_client_bridge.py BRIDGE_CMD... 

Spawns BRIDGE_CMD (which serves ACP on stdio), advertises fs and terminal capabilities, runs
initialize -> session/new -> session/prompt, and checks the echo agent's reply. Any fs/terminal
call reaching this client is a failure. Prints "OK" on success.
"""

import asyncio
import asyncio.subprocess as aio_subprocess
import sys
from typing import Any

from acp import PROTOCOL_VERSION, Client, connect_to_agent, text_block
from acp.schema import (
    AgentMessageChunk,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    TextContentBlock,
)


class RecordingClient(Client):
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.forbidden: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.texts.append(update.content.text)

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        self.forbidden.append("fs/read_text_file")
        raise RuntimeError("fs must not reach the client")

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        self.forbidden.append("fs/write_text_file")
        raise RuntimeError("fs must not reach the client")

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        self.forbidden.append("terminal/create")
        raise RuntimeError("terminal must not reach the client")

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("unexpected permission request")


async def main(argv: list[str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        argv[0], *argv[1:], stdin=aio_subprocess.PIPE, stdout=aio_subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    client = RecordingClient()
    conn = connect_to_agent(client, proc.stdin, proc.stdout)
    init = await asyncio.wait_for(
        conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
            ),
            client_info=Implementation(name="py-bridge-test", title="py", version="0.1.0"),
        ),
        30,
    )
    assert init.protocol_version == PROTOCOL_VERSION, init
    session = await asyncio.wait_for(conn.new_session(mcp_servers=[], cwd="/tmp"), 30)
    resp = await asyncio.wait_for(
        conn.prompt(session_id=session.session_id, prompt=[text_block("hello through the bridge")]), 30
    )
    assert resp.stop_reason == "end_turn", resp
    await asyncio.sleep(0.2)
    assert "hello through the bridge" in "".join(client.texts), client.texts
    assert not client.forbidden, client.forbidden
    proc.stdin.close()
    rc = await asyncio.wait_for(proc.wait(), 15)
    assert rc == 0, f"bridge exit code {rc}"
    print("OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
