"""Benchmark of e2b-exec-server (figures go to docs/bench-history/exec-server.md).

    E2B_EXEC_SERVER_BIN=target/release/e2b-exec-server /tmp/mcp-venv/bin/python tests/mcp/bench_exec_server.py

1. Latency, over stdio and over HTTP (sessions), samples interleaved in one run: the client's
   `ping` round trip, `exec_command {cmd: "true"}`, and a local `bash -c true` spawn; reported as
   (exec - ping) / local spawn (goal: <= 1.5).
2. upload and download of 100 MiB through upload_file (4 MiB chunks, staged with total_size) /
   download_file (the server's default chunk, 512 KiB) over stdio and over HTTP (session mode),
   with the SDK at its default limits: MB/s, and the server's peak RSS (VmHWM; the embedded envd
   runs inside the server process, so this is the whole sandbox too).
"""

from __future__ import annotations

import base64
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("E2B_EXEC_SERVER_BIN") or str(REPO / "target" / "release" / "e2b-exec-server")
MiB = 1024 * 1024
N = int(os.environ.get("BENCH_N", "200"))
SIZE = int(os.environ.get("BENCH_MIB", "100")) * MiB
CHUNK = 4 * MiB
DOWN_CHUNK = 512 * 1024  # the server's default --max-chunk-bytes
TRANSFERS = os.environ.get("BENCH_TRANSFERS", "1") != "0"


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def find_child_server(marker: str) -> int:
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode()
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if BIN in cmd and marker in cmd and ppid == me:
            return int(d)
    raise RuntimeError("server process not found")


def local_spawn() -> float:
    t = time.perf_counter()
    subprocess.run(["bash", "-c", "true"], check=True)
    return time.perf_counter() - t


async def latency(s: ClientSession, label: str) -> None:
    """Interleaved samples: ping, exec true, local bash -c true."""
    for _ in range(20):
        await s.send_ping()
        await s.call_tool("exec_command", {"cmd": "true"})
    pings, execs, locals_ = [], [], []
    for _ in range(N):
        t = time.perf_counter()
        await s.send_ping()
        pings.append(time.perf_counter() - t)
        t = time.perf_counter()
        res = await s.call_tool("exec_command", {"cmd": "true"})
        execs.append(time.perf_counter() - t)
        assert res.meta["exit_code"] == 0
        locals_.append(local_spawn())
    ping, ex, loc = statistics.median(pings), statistics.median(execs), statistics.median(locals_)
    print(
        f"{label}: ping {ping * 1000:.2f} ms, exec true {ex * 1000:.2f} ms (p90 {sorted(execs)[int(N * 0.9)] * 1000:.2f}), "
        f"local bash -c true {loc * 1000:.2f} ms; (exec - ping) / local = {(ex - ping) / loc:.2f} (goal <= 1.5; N={N})"
    )


async def transfer(s: ClientSession, pid: int, label: str) -> dict:
    data = os.urandom(SIZE)
    path = f"/tmp/e2b-bench-{os.getpid()}-{label}.bin"
    t = time.perf_counter()
    for off in range(0, SIZE, CHUNK):
        args = {
            "path": path,
            "content_base64": base64.b64encode(data[off : off + CHUNK]).decode(),
            "offset": off,
            "total_size": SIZE,
        }
        r = await s.call_tool("upload_file", args)
        assert not r.is_error, r.content[0].text
    up = time.perf_counter() - t
    t = time.perf_counter()
    got = bytearray()
    while True:
        r = await s.call_tool("download_file", {"path": path, "offset": len(got)})
        assert not r.is_error, r.content[0].text
        got += base64.b64decode(r.content[0].text)
        if (r.meta or {}).get("eof"):
            break
    down = time.perf_counter() - t
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    await s.call_tool("exec_command", {"cmd": f"rm -f {path}"})
    return {
        "upload_MBps": SIZE / MiB / up,
        "download_MBps": SIZE / MiB / down,
        "rss_peak_MiB": vm_hwm_kib(pid) / 1024,
    }


def raw_stdio() -> None:
    """Server-side throughput without the Python SDK's parsing: raw JSON-RPC lines over stdio."""
    import json

    p = subprocess.Popen([BIN, "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdin and p.stdout

    def rpc(i: int, method: str, params: dict) -> bytes:
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
        p.stdin.flush()
        return p.stdout.readline()

    try:
        rpc(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}})
        p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        data = os.urandom(SIZE)
        path = f"/tmp/e2b-bench-raw-{os.getpid()}.bin"
        t = time.perf_counter()
        for off in range(0, SIZE, CHUNK):
            a = {"path": path, "content_base64": base64.b64encode(data[off : off + CHUNK]).decode(), "offset": off, "total_size": SIZE}
            assert b'"isError":true' not in rpc(1, "tools/call", {"name": "upload_file", "arguments": a})
        up = time.perf_counter() - t
        t = time.perf_counter()
        for off in range(0, SIZE, DOWN_CHUNK):
            rpc(2, "tools/call", {"name": "download_file", "arguments": {"path": path, "offset": off}})
        down = time.perf_counter() - t
        rpc(3, "tools/call", {"name": "exec_command", "arguments": {"cmd": f"rm -f {path}"}})
        print(f"raw stdio {SIZE // MiB} MiB (no SDK parsing): upload {SIZE / MiB / up:.1f} MiB/s, download {SIZE / MiB / down:.1f} MiB/s, server peak RSS {vm_hwm_kib(p.pid) / 1024:.1f} MiB")
    finally:
        p.kill()
        p.wait()


async def main() -> None:
    print(f"binary: {BIN}")
    params = StdioServerParameters(command=BIN, args=["--stdio"], env={"RUST_LOG": "warn"})
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        pid = find_child_server("--stdio")
        await latency(s, "stdio")
        idle = vm_hwm_kib(pid) / 1024
        print(f"server peak RSS before transfers: {idle:.1f} MiB")
        if TRANSFERS:
            res = await transfer(s, pid, "stdio")
            print(f"stdio {SIZE // MiB} MiB: upload {res['upload_MBps']:.1f} MiB/s, download {res['download_MBps']:.1f} MiB/s, server peak RSS {res['rss_peak_MiB']:.1f} MiB")

    port = 39000 + os.getpid() % 1000
    proc = subprocess.Popen([BIN, "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except Exception:
                time.sleep(0.05)
        async with create_mcp_http_client() as http, streamable_http_client(
            f"http://127.0.0.1:{port}/mcp", http_client=http
        ) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            await latency(s, "http ")
            if TRANSFERS:
                res = await transfer(s, proc.pid, "http")
                print(f"http  {SIZE // MiB} MiB: upload {res['upload_MBps']:.1f} MiB/s, download {res['download_MBps']:.1f} MiB/s, server peak RSS {res['rss_peak_MiB']:.1f} MiB")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    if not os.path.isfile(BIN):
        sys.exit(f"missing: {BIN}; build it with `cargo build --release -p e2b-exec-server` or set E2B_EXEC_SERVER_BIN")
    anyio.run(main)
    if TRANSFERS:
        raw_stdio()
