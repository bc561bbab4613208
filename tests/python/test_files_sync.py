"""Sandbox.files with the official E2B Python SDK (sync, debug mode) against our envd."""

import time
import uuid

import pytest
from e2b import FileType, FilesystemEventType, NotFoundException, Sandbox
from e2b.exceptions import InvalidArgumentException


def _dir(sandbox: Sandbox) -> str:
    d = f"fs-sync-{uuid.uuid4().hex[:8]}"
    sandbox.files.make_dir(d)
    return d


def test_write_read_text_bytes_stream(sandbox: Sandbox):
    d = _dir(sandbox)
    info = sandbox.files.write(f"{d}/hello.txt", "Hello, world!")
    assert info.name == "hello.txt"
    assert info.path.endswith(f"/{d}/hello.txt")
    assert sandbox.files.read(f"{d}/hello.txt") == "Hello, world!"
    assert sandbox.files.read(f"{d}/hello.txt", format="bytes") == bytearray(b"Hello, world!")
    stream = sandbox.files.read(f"{d}/hello.txt", format="stream")
    assert b"".join(stream) == b"Hello, world!"
    data = bytes(range(256)) * 4096
    sandbox.files.write(f"{d}/bin.dat", data)
    assert bytes(sandbox.files.read(f"{d}/bin.dat", format="bytes")) == data


def test_gzip_and_metadata(sandbox: Sandbox):
    d = _dir(sandbox)
    sandbox.files.write(f"{d}/gz.txt", "compressed " * 1000, gzip=True)
    assert sandbox.files.read(f"{d}/gz.txt") == "compressed " * 1000
    assert sandbox.files.read(f"{d}/gz.txt", gzip=True) == "compressed " * 1000
    info = sandbox.files.write(f"{d}/meta.txt", "m", metadata={"Author": "alice", "kind": "note"})
    assert info.metadata == {"author": "alice", "kind": "note"}
    assert sandbox.files.get_info(f"{d}/meta.txt").metadata == {"author": "alice", "kind": "note"}


def test_write_files_list_exists_info(sandbox: Sandbox):
    d = _dir(sandbox)
    infos = sandbox.files.write_files(
        [
            {"path": f"{d}/file1.txt", "data": "1"},
            {"path": f"{d}/subdir1/a", "data": b"a"},
            {"path": f"{d}/subdir1/b", "data": "b"},
            {"path": f"{d}/subdir2/c", "data": "c"},
        ]
    )
    assert [i.name for i in infos] == ["file1.txt", "a", "b", "c"]
    names = [e.path.split(f"/{d}/", 1)[1] for e in sandbox.files.list(d, depth=2)]
    assert names == ["file1.txt", "subdir1", "subdir1/a", "subdir1/b", "subdir2", "subdir2/c"]
    assert [e.name for e in sandbox.files.list(d)] == ["file1.txt", "subdir1", "subdir2"]
    with pytest.raises(Exception):
        sandbox.files.list(d, depth=0)
    assert sandbox.files.exists(f"{d}/file1.txt")
    assert not sandbox.files.exists(f"{d}/nope")
    info = sandbox.files.get_info(f"{d}/file1.txt")
    assert info.type == FileType.FILE
    assert info.permissions == "-rw-r--r--"
    assert info.mode == 0o644
    assert info.owner == "user" and info.group == "user"
    assert info.size == 1
    dinfo = sandbox.files.get_info(f"{d}/subdir1")
    assert dinfo.type == FileType.DIR and dinfo.permissions == "drwxr-xr-x"


def test_make_dir_rename_remove(sandbox: Sandbox):
    d = _dir(sandbox)
    assert sandbox.files.make_dir(f"{d}/x/y") is True
    assert sandbox.files.make_dir(f"{d}/x/y") is False
    sandbox.files.write(f"{d}/old.txt", "o")
    moved = sandbox.files.rename(f"{d}/old.txt", f"{d}/new/place.txt")
    assert moved.name == "place.txt"
    assert sandbox.files.read(f"{d}/new/place.txt") == "o"
    with pytest.raises(NotFoundException):
        sandbox.files.rename(f"{d}/old.txt", f"{d}/z.txt")
    sandbox.files.remove(f"{d}/x")
    sandbox.files.remove(f"{d}/x")
    assert not sandbox.files.exists(f"{d}/x")
    sandbox.files.remove(d)


def test_errors(sandbox: Sandbox):
    d = _dir(sandbox)
    with pytest.raises(NotFoundException):
        sandbox.files.read(f"{d}/missing.txt")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.read(d)
    with pytest.raises(InvalidArgumentException):
        sandbox.files.write(d, "x")
    sandbox.files.write(f"{d}/f", "x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.list(f"{d}/f")


def _new_events(handle, at_least: int, within: float = 5.0) -> list:
    """Polls the watcher until it has reported `at_least` events (or `within` seconds pass)."""
    events = []
    deadline = time.monotonic() + within
    while len(events) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
        events += [(e.type, e.name) for e in handle.get_new_events()]
    return events


def test_watch_dir_polling(sandbox: Sandbox):
    d = _dir(sandbox)
    handle = sandbox.files.watch_dir(d)
    sandbox.files.write(f"{d}/w.txt", "watched")
    assert _new_events(handle, 3) == [
        (FilesystemEventType.CREATE, "w.txt"),
        (FilesystemEventType.CHMOD, "w.txt"),
        (FilesystemEventType.WRITE, "w.txt"),
    ]
    sandbox.files.remove(f"{d}/w.txt")
    assert _new_events(handle, 1) == [(FilesystemEventType.REMOVE, "w.txt")]
    handle.stop()


def test_watch_dir_recursive(sandbox: Sandbox):
    d = _dir(sandbox)
    handle = sandbox.files.watch_dir(d, recursive=True)
    sandbox.files.make_dir(f"{d}/sub")
    events = _new_events(handle, 1)
    time.sleep(0.2)  # as the SDK's own test: the new directory's watch is added meanwhile
    sandbox.files.write(f"{d}/sub/deep.txt", "x")
    deadline = time.monotonic() + 5
    while (FilesystemEventType.CREATE, "sub/deep.txt") not in events and time.monotonic() < deadline:
        events += _new_events(handle, 1, within=0.2)
    assert (FilesystemEventType.CREATE, "sub") in events
    assert (FilesystemEventType.CREATE, "sub/deep.txt") in events
    handle.stop()


def test_watch_missing_dir(sandbox: Sandbox):
    with pytest.raises(NotFoundException):
        sandbox.files.watch_dir(f"nope-{uuid.uuid4().hex}")
