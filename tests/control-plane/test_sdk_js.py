"""Runs the official E2B JS SDK tests (js/sdk.test.mjs, node's test runner) against the same
`e2b serve` as the Python tests."""

import os
import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent


def test_js_sdk(serve):
    node = shutil.which("node")
    assert node, "missing: node (the JS SDK tests need Node.js 20+)"
    cache = pathlib.Path(os.environ.get("E2B_CACHE", REPO / ".ci-cache"))
    sdk_dir = pathlib.Path(os.environ.get("E2B_JS_SDK_DIR", cache / "node-control-plane"))
    assert (sdk_dir / "node_modules" / "e2b").is_dir(), (
        f"missing: the pinned npm e2b in {sdk_dir}/node_modules: run scripts/setup"
    )
    env = dict(os.environ)
    env.pop("E2B_DEBUG", None)
    env.update(serve)
    env["E2B_JS_SDK_DIR"] = str(sdk_dir)
    proc = subprocess.run(
        [node, "--test", "--test-reporter=spec", str(HERE / "js" / "sdk.test.mjs")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"JS SDK tests failed:\n{proc.stdout}\n{proc.stderr}"
