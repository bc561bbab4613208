"""The official E2B Python SDK's async API against `e2b serve`."""

import uuid

from e2b import AsyncSandbox, SandboxQuery


async def test_async_lifecycle():
    tag = uuid.uuid4().hex
    sbx = await AsyncSandbox.create(metadata={"tag": tag}, timeout=60)
    try:
        out = await sbx.commands.run("echo async")
        assert out.stdout == "async\n"
        await sbx.files.write("/tmp/e2b-serve-async.txt", "x")
        assert await sbx.files.read("/tmp/e2b-serve-async.txt") == "x"
        found = await AsyncSandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        await sbx.set_timeout(30)
        info = await sbx.get_info()
        assert info.metadata["tag"] == tag
        assert await sbx.pause() is True
        assert not await sbx.is_running()
        again = await AsyncSandbox.connect(sbx.sandbox_id)
        assert await again.is_running()
        assert (await again.commands.run("echo back")).stdout == "back\n"
    finally:
        assert await sbx.kill() is True
