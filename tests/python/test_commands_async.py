"""Sandbox.commands and Sandbox.pty (async API) against our envd."""

import asyncio

import pytest
from e2b import CommandExitException, NotFoundException, PtySize, TimeoutException


async def test_run(async_sandbox):
    r = await async_sandbox.commands.run("echo hi; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "err\n", 0)


async def test_exit_code(async_sandbox):
    with pytest.raises(CommandExitException) as e:
        await async_sandbox.commands.run("exit 9")
    assert e.value.exit_code == 9


async def test_callbacks_and_utf8(async_sandbox):
    out = []
    r = await async_sandbox.commands.run(r"printf 'x\xffy'", on_stdout=out.append)
    assert r.stdout == "x\ufffdy"
    assert "".join(out) == "x\ufffdy"


async def test_timeout(async_sandbox):
    with pytest.raises(TimeoutException):
        await async_sandbox.commands.run("sleep 30", timeout=1)


async def test_background_connect_kill(async_sandbox):
    h = await async_sandbox.commands.run("sleep 30", background=True)
    h2 = await async_sandbox.commands.connect(h.pid)
    procs = await async_sandbox.commands.list()
    assert any(p.pid == h.pid for p in procs)
    assert await async_sandbox.commands.kill(h.pid) is True
    for handle in (h, h2):
        with pytest.raises(CommandExitException) as e:
            await handle.wait()
        assert e.value.exit_code == -1
    assert await async_sandbox.commands.kill(h.pid) is False


async def test_connect_unknown(async_sandbox):
    with pytest.raises(NotFoundException):
        await async_sandbox.commands.connect(999_999)


async def test_stdin(async_sandbox):
    h = await async_sandbox.commands.run("cat", background=True, stdin=True)
    await async_sandbox.commands.send_stdin(h.pid, "async-in\n")
    await async_sandbox.commands.close_stdin(h.pid)
    r = await h.wait()
    assert r.stdout == "async-in\n"


async def test_envs_cwd(async_sandbox):
    r = await async_sandbox.commands.run("echo $A; pwd", envs={"A": "b"}, cwd="/")
    assert r.stdout == "b\n/\n"


async def test_many_concurrent(async_sandbox):
    results = await asyncio.gather(*(async_sandbox.commands.run(f"echo {i}") for i in range(20)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]


async def test_pty(async_sandbox):
    chunks = []
    got = asyncio.Event()

    def on_data(data: bytes):
        chunks.append(data)
        if b"apty-ok" in b"".join(chunks):
            got.set()

    h = await async_sandbox.pty.create(PtySize(rows=24, cols=80), on_data=on_data, timeout=30)
    await async_sandbox.pty.send_stdin(h.pid, b"echo apty-$((1))ok\n".replace(b"$((1))", b""))
    await asyncio.wait_for(got.wait(), 10)
    await async_sandbox.pty.resize(h.pid, PtySize(rows=30, cols=100))
    assert await async_sandbox.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        await h.wait()
