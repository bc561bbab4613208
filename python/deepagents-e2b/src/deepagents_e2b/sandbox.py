"""`E2BExecSandbox`: DeepAgents' `BaseSandbox` over the exec-server's MCP tools."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx2
from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

T = TypeVar("T")

_LITERALS = {"file_not_found", "permission_denied", "is_directory", "invalid_path"}
DEFAULT_CHUNK = 512 * 1024
DEFAULT_TIMEOUT = 120
# Slack on top of the command timeout before the client gives up on a call.
_CALL_SLACK = 60.0


class ExecServerError(RuntimeError):
    """The exec-server could not be reached or answered something unexpected."""


class E2BExecSandbox(BaseSandbox):
    """A DeepAgents sandbox backend whose every operation runs through the e2b exec-server.

    Args:
        url: The server's MCP endpoint, e.g. ``http://127.0.0.1:3005/mcp``.
        command: Instead of ``url``: argv that starts the server on stdio,
            e.g. ``["e2b-exec-server", "--stdio"]``.
        env: Extra environment for ``command``.
        api_key: Sent as ``x-api-key`` (HTTP).
        headers: Extra HTTP headers.
        chunk_size: Raw bytes per ``upload_file`` / ``download_file`` call.
        max_timeout: The server's maximum command timeout, used when ``timeout=0``.
        connect_timeout: Seconds to wait for the MCP handshake.
    """

    enable_capture_offload: bool = False
    """Off (DeepAgents' default): `create_deep_agent` asks for captures under
    `/large_tool_results/`, which a non-root sandbox user cannot create, and the wrapper then
    reports exit code 0 and mangled output. Turn it on only when that directory is writable."""

    def __init__(
        self,
        url: str | None = None,
        *,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        max_timeout: float = 3600,
        connect_timeout: float = 60,
    ) -> None:
        if (url is None) == (command is None):
            raise ValueError("give exactly one of url= (HTTP) or command= (stdio)")
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        self._url = url
        self._command = command
        self._env = env
        self._headers = dict(headers or {})
        if api_key:
            self._headers["x-api-key"] = api_key
        self._chunk = chunk_size
        self._max_timeout = max_timeout
        self._session: ClientSession | None = None
        self._sandbox_id: str | None = None
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="e2b-exec-mcp", daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        ready: asyncio.Future[None] | None = None

        async def make_ready() -> asyncio.Future[None]:
            return self._loop.create_future()

        ready = asyncio.run_coroutine_threadsafe(make_ready(), self._loop).result()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
        try:
            asyncio.run_coroutine_threadsafe(self._await(ready), self._loop).result(connect_timeout)
        except BaseException as e:
            self.close()
            raise ExecServerError(f"could not connect to the exec-server ({url or command}): {e!r}") from e

    # ---- session plumbing -------------------------------------------------------------

    @staticmethod
    async def _await(fut: asyncio.Future[None]) -> None:
        await fut

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self._url is not None:
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(30, read=None))
                    )
                    read, write = await stack.enter_async_context(
                        streamable_http_client(self._url, http_client=http)
                    )
                else:
                    assert self._command is not None
                    params = StdioServerParameters(
                        command=self._command[0], args=list(self._command[1:]), env=self._env
                    )
                    read, write = await stack.enter_async_context(stdio_client(params))
                session = await stack.enter_async_context(ClientSession(read, write))
                init = await session.initialize()
                meta = init.meta or {}
                self._sandbox_id = str(meta.get("sandbox_id") or "")
                if not self._sandbox_id:
                    raise ExecServerError("the server did not report a sandbox_id in the initialize _meta")
                self._session = session
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else ExecServerError(repr(e)))
            else:
                raise
        finally:
            self._session = None

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise ExecServerError("the sandbox backend is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _arun(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise ExecServerError("the sandbox backend is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _call(self, name: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        s = self._session
        if s is None:
            raise ExecServerError("the MCP session is not open")
        return await s.call_tool(name, args, read_timeout_seconds=timeout)

    def close(self) -> None:
        """Closes the MCP session (and the stdio server process, if this backend started it)."""
        if self._closed:
            return
        self._closed = True

        async def stop() -> None:
            if self._stop is not None:
                self._stop.set()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
            self._holder.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> E2BExecSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- BaseSandbox ------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._sandbox_id or ""

    async def _execute(self, command: str, timeout: int | None) -> ExecuteResponse:
        args: dict[str, Any] = {"cmd": command}
        if timeout is not None:
            args["timeout"] = timeout
        budget = DEFAULT_TIMEOUT if timeout is None else (self._max_timeout if timeout == 0 else timeout)
        r = await self._call("exec_command", args, budget + _CALL_SLACK)
        text = r.content[0].text if r.content and getattr(r.content[0], "text", None) is not None else ""
        meta = r.meta or {}
        code = meta.get("exit_code")
        return ExecuteResponse(
            output=text,
            exit_code=int(code) if code is not None else None,
            truncated=bool(meta.get("truncated", False)),
        )

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self._run(self._execute(command, timeout))

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:  # noqa: ASYNC109
        return await self._arun(self._execute(command, timeout))

    @staticmethod
    def _error_of(r: Any) -> str:
        meta = r.meta or {}
        err = meta.get("error")
        if isinstance(err, str) and err:
            return err
        text = r.content[0].text if r.content else "error"
        return str(text)

    async def _upload_one(self, path: str, data: bytes) -> FileUploadResponse:
        if not path.startswith("/"):
            return FileUploadResponse(path=path, error="invalid_path")
        try:
            offset = 0
            first = True
            while first or offset < len(data):
                chunk = data[offset : offset + self._chunk]
                args: dict[str, Any] = {
                    "path": path,
                    "content_base64": base64.b64encode(chunk).decode("ascii"),
                }
                if len(chunk) < len(data):
                    # Chunked: staged by the server and published once, when complete.
                    args["offset"] = offset
                    args["total_size"] = len(data)
                r = await self._call("upload_file", args, 600)
                if r.is_error:
                    return FileUploadResponse(path=path, error=self._error_of(r))
                offset += len(chunk)
                first = False
            return FileUploadResponse(path=path, error=None)
        except Exception as e:  # partial success: report per file
            return FileUploadResponse(path=path, error=f"upload failed: {e}")

    async def _download_one(self, path: str) -> FileDownloadResponse:
        if not path.startswith("/"):
            return FileDownloadResponse(path=path, content=None, error="invalid_path")
        try:
            parts: list[bytes] = []
            offset = 0
            while True:
                r = await self._call("download_file", {"path": path, "offset": offset, "length": self._chunk}, 600)
                if r.is_error:
                    return FileDownloadResponse(path=path, content=None, error=self._error_of(r))
                chunk = base64.b64decode(r.content[0].text, validate=True)
                parts.append(chunk)
                offset += len(chunk)
                meta = r.meta or {}
                if meta.get("eof", True) or not chunk:
                    break
            return FileDownloadResponse(path=path, content=b"".join(parts), error=None)
        except Exception as e:
            return FileDownloadResponse(path=path, content=None, error=f"download failed: {e}")

    async def _upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return [await self._upload_one(p, d) for p, d in files]

    async def _download(self, paths: list[str]) -> list[FileDownloadResponse]:
        return [await self._download_one(p) for p in paths]

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._run(self._upload(files))

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._run(self._download(paths))

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return await self._arun(self._upload(files))

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return await self._arun(self._download(paths))
