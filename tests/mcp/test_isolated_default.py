"""e2b-exec-server's default local sandbox is isolated: through the official MCP client, as root.

The rest of this suite runs the server as an unprivileged user with `--isolation none`
(conftest.py); here the server runs as root with no isolation flag, as a user starts it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import server_bin

pytestmark = pytest.mark.anyio


def text(r) -> str:
    assert r.content, "content must hold at least one block"
    return r.content[0].text


def default_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"E2B_ISOLATION", "E2B_NETWORK", "E2B_SANDBOX_URL", "API_KEY"}}
    env.setdefault("RUST_LOG", "warn")
    return env


async def test_the_default_sandbox_is_isolated_from_this_machine(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.fail("missing: root (the isolated local sandbox needs it); run this suite as root", pytrace=False)
    secret = Path("/root") / f"e2b-mcp-secret-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    params = StdioServerParameters(command=server_bin(), args=["--stdio"], env=default_env())
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            r = await s.call_tool("inspect", {"sections": ["sandbox"]})
            sbx = json.loads(text(r))["sandbox"]
            assert sbx["isolation"] == "on", sbx
            script = (
                f"whoami; cat {secret} 2>/dev/null || echo hidden; "
                f"(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo unreachable; "
                "echo $HOME; touch /usr/e2b-probe 2>/dev/null && echo wrote || echo read-only"
            )
            r = await s.call_tool("exec_command", {"cmd": script})
            assert not r.is_error, text(r)
            assert (r.meta or {}).get("exit_code") == 0, (r.meta, text(r))
            lines = text(r).splitlines()
            assert lines[:5] == ["user", "hidden", "unreachable", "/home/user", "read-only"], text(r)
            # The file tools see the sandbox's own home, not this machine's.
            r = await s.call_tool(
                "upload_file", {"path": "/home/user/inside.txt", "content_base64": base64.b64encode(b"inside").decode()}
            )
            assert not r.is_error, text(r)
        assert not Path("/home/user/inside.txt").exists() or Path("/home/user/inside.txt").read_text() != "inside"
        assert not Path("/usr/e2b-probe").exists()
    finally:
        secret.unlink(missing_ok=True)
        listener.close()
