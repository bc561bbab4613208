"""Sandbox.files with the official E2B Python SDK (async: WatchDir stream)."""

import asyncio
import uuid

from e2b import AsyncSandbox, FilesystemEventType


async def test_async_files_roundtrip(async_sandbox: AsyncSandbox):
    d = f"fs-async-{uuid.uuid4().hex[:8]}"
    assert await async_sandbox.files.make_dir(d)
    await async_sandbox.files.write(f"{d}/a.txt", "async")
    assert await async_sandbox.files.read(f"{d}/a.txt") == "async"
    entries = await async_sandbox.files.list(d)
    assert [e.name for e in entries] == ["a.txt"]
    infos = await async_sandbox.files.write_files([{"path": f"{d}/m1", "data": "1"}, {"path": f"{d}/m2", "data": "2"}])
    assert [i.name for i in infos] == ["m1", "m2"]
    await async_sandbox.files.remove(d)
    assert not await async_sandbox.files.exists(d)


async def test_async_watch_stream(async_sandbox: AsyncSandbox):
    d = f"fs-watch-{uuid.uuid4().hex[:8]}"
    await async_sandbox.files.make_dir(d)
    events = []
    got_three = asyncio.Event()

    def on_event(e):
        events.append(e)
        if len(events) >= 3:
            got_three.set()

    handle = await async_sandbox.files.watch_dir(d, on_event=on_event, include_entry=True)
    await async_sandbox.files.write(f"{d}/s.txt", "stream")
    await asyncio.wait_for(got_three.wait(), timeout=5)
    await handle.stop()
    assert [(e.type, e.name) for e in events[:3]] == [
        (FilesystemEventType.CREATE, "s.txt"),
        (FilesystemEventType.CHMOD, "s.txt"),
        (FilesystemEventType.WRITE, "s.txt"),
    ]
    assert events[2].entry is not None and events[2].entry.size == 6
