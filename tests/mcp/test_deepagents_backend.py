"""DeepAgents' own file operations through deepagents_e2b.E2BExecSandbox against the running server."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

try:
    from deepagents_e2b import E2BExecSandbox
except ImportError as e:  # pragma: no cover - reported as a failure, not a skip
    E2BExecSandbox = None  # type: ignore[assignment]
    _IMPORT_ERROR = e

from conftest import server_bin, server_env, run_as_prefix


def _require_backend() -> None:
    if E2BExecSandbox is None:
        pytest.fail(
            f"missing: the deepagents-e2b package ({_IMPORT_ERROR}); "
            "install it with `pip install -e python/deepagents-e2b`",
            pytrace=False,
        )


@pytest.fixture(params=["http", "stdio"])
def sandbox(request, session_server):
    _require_backend()
    if request.param == "http":
        sb = E2BExecSandbox(session_server.url)
    else:
        prefix, _ = run_as_prefix()
        sb = E2BExecSandbox(command=[*prefix, server_bin(), "--stdio"], env=server_env())
    try:
        yield sb
    finally:
        sb.close()


@pytest.fixture
def root(sandbox):
    d = f"/tmp/deepagents-e2b-{uuid.uuid4().hex}"
    r = sandbox.execute(f"mkdir -p {d}")
    assert r.exit_code == 0, r.output
    yield d
    sandbox.execute(f"chmod -R u+rwx {d}; rm -rf {d}")


def test_id_and_execute(sandbox, session_server):
    assert sandbox.id
    if sandbox._url:
        assert sandbox.id == session_server.health["sandbox_id"]
    r = sandbox.execute("printf hi; exit 3")
    assert (r.output, r.exit_code, r.truncated) == ("hi", 3, False)
    r = sandbox.execute("sleep 5", timeout=1)
    assert r.exit_code == 124
    r = sandbox.execute("true")
    assert r.output == "" and r.exit_code == 0


def test_write_read_edit(sandbox, root):
    f = f"{root}/sub/notes.txt"
    w = sandbox.write(f, "alpha\nbeta beta\ngamma\n")
    assert w.error is None, w.error
    r = sandbox.read(f)
    assert r.error is None, r.error
    assert "alpha" in r.file_data["content"] and "gamma" in r.file_data["content"]
    e = sandbox.edit(f, "gamma", "delta")
    assert e.error is None and e.occurrences == 1
    e = sandbox.edit(f, "beta", "b")
    assert e.error is not None, "two matches without replace_all must fail"
    e = sandbox.edit(f, "beta", "b", replace_all=True)
    assert e.error is None and e.occurrences == 2
    e = sandbox.edit(f, "not-there", "x")
    assert e.error is not None
    assert "delta" in sandbox.read(f).file_data["content"]
    assert sandbox.read(f"{root}/missing.txt").error is not None


def test_ls_grep_glob(sandbox, root):
    sandbox.write(f"{root}/a.py", "print('needle')\n")
    sandbox.write(f"{root}/d/b.txt", "no match here\nneedle again\n")
    ls = sandbox.ls(root)
    assert ls.error is None, ls.error
    entries = {e["path"]: e.get("is_dir") for e in ls.entries}
    assert entries[f"{root}/a.py"] is False and entries[f"{root}/d"] is True
    g = sandbox.grep("needle", root)
    assert g.error is None, g.error
    hits = sorted((m["path"], m["line"]) for m in g.matches)
    assert hits == [(f"{root}/a.py", 1), (f"{root}/d/b.txt", 2)]
    g = sandbox.grep("absent-string-xyz", root)
    assert g.error is None and g.matches == []
    gl = sandbox.glob("**/*.txt", root)
    assert gl.error is None, gl.error
    assert [m["path"] for m in gl.matches] == [f"{root}/d/b.txt"]


def test_upload_download_and_literals(sandbox, root):
    big = os.urandom(3 * 1024 * 1024 + 17)  # several chunks
    up = sandbox.upload_files([(f"{root}/x/big.bin", big), (f"{root}/empty", b""), ("rel/path", b"x")])
    assert [u.error for u in up] == [None, None, "invalid_path"]
    down = sandbox.download_files([f"{root}/x/big.bin", f"{root}/empty", f"{root}/nope", root, "rel"])
    assert down[0].content == big and down[0].error is None
    assert down[1].content == b""
    assert [d.error for d in down[2:]] == ["file_not_found", "is_directory", "invalid_path"]
    sandbox.execute(f"echo s > {root}/locked && chmod 000 {root}/locked")
    uid = sandbox.execute("id -u").output.strip()
    if uid != "0":
        assert sandbox.download_files([f"{root}/locked"])[0].error == "permission_denied"
    elif os.geteuid() == 0:
        pytest.fail("the server runs as root; permission checks need the unprivileged test user")


def test_async_api(sandbox, root):
    async def go():
        r = await sandbox.aexecute("echo async")
        assert r.output == "async\n" and r.exit_code == 0
        up = await sandbox.aupload_files([(f"{root}/a.bin", b"\x00\x01\x02")])
        assert up[0].error is None
        down = await sandbox.adownload_files([f"{root}/a.bin"])
        assert down[0].content == b"\x00\x01\x02"
        ls = await sandbox.als(root)
        assert any(e["path"] == f"{root}/a.bin" for e in ls.entries)

    asyncio.run(go())


def test_capture_offload(sandbox, root):
    assert not sandbox.enable_capture_offload, "off by default (see the class docs)"
    sandbox.enable_capture_offload = True
    r = sandbox.execute_with_offload(
        "seq 1 200000; echo err >&2; exit 3", f"{root}/capture.txt", max_inline_bytes=10000
    )
    assert r.offloaded and r.response.exit_code == 3
    assert r.response.output.startswith("1\n2\n") and "err" in r.response.output
    assert sandbox.execute(f"tail -n 1 {root}/capture.txt").output == "err\n"
    r = sandbox.execute_with_offload("echo small; exit 4", f"{root}/capture2.txt", max_inline_bytes=10000)
    assert not r.offloaded and (r.response.output, r.response.exit_code) == ("small\n", 4)


def test_create_deep_agent_runs_in_the_sandbox(sandbox):
    """A real DeepAgents agent (fake chat model emitting tool calls) using this backend."""
    from deepagents import create_deep_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    class FakeModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):
            return self

    f = f"/tmp/agent-probe-{uuid.uuid4().hex}.txt"
    msgs = iter(
        [
            AIMessage(content="", tool_calls=[{"name": "execute", "args": {"command": f"echo from-agent > {f}; cat {f}; exit 5"}, "id": "c1"}]),
            AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"file_path": f}, "id": "c2"}]),
            AIMessage(content="done"),
        ]
    )
    agent = create_deep_agent(model=FakeModel(messages=msgs), backend=sandbox)
    out = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "from-agent" in tools[0].content and "5" in tools[0].content, tools[0].content
    assert tools[0].artifact["exit_code"] == 5
    assert "from-agent" in tools[1].content
    assert out["messages"][-1].content == "done"
    sandbox.execute(f"rm -f {f}")
