"""Reference figure: stdout throughput through the official E2B Python SDK (Connect + JSON over
HTTP/1.1, base64 output, UTF-8 decoding in the SDK). Not a test; run it by hand:

    E2B_ENVD_BIN=target/release/e2b-envd /tmp/e2b-venv/bin/python tests/python/bench_sdk.py [MiB]
"""

import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    binary = os.environ.get("E2B_ENVD_BIN", str(REPO / "target" / "release" / "e2b-envd"))
    proc = subprocess.Popen([binary, "--port", "0"], stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    os.environ["E2B_DEBUG"] = "true"
    os.environ["E2B_SANDBOX_URL"] = url
    from e2b import Sandbox

    sbx = Sandbox.create()
    n = mib * 1024 * 1024
    t = time.monotonic()
    subprocess.run(["bash", "-c", f"head -c {n} /dev/zero | cat > /dev/null"], check=True)
    raw = time.monotonic() - t
    total = 0

    def count(s: str) -> None:
        nonlocal total
        total += len(s)

    t = time.monotonic()
    h = sbx.commands.run(f"head -c {n} /dev/zero", background=True, timeout=0)
    h.wait(on_stdout=count)
    sdk = time.monotonic() - t
    assert total == n, (total, n)
    print(
        f"python sdk: {mib} MiB in {sdk:.2f}s = {mib / sdk:.0f} MiB/s; raw pipe {mib / raw:.0f} MiB/s; "
        f"ratio {raw / sdk:.2f}"
    )
    proc.terminate()
    proc.wait()


if __name__ == "__main__":
    main()
