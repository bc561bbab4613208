"""The SDK's non-debug path against a secured daemon: the access token from the (mock) control
plane, signed download/upload URLs, expired and wrong signatures."""

import time
import urllib.parse

import httpx
from conftest_files import secured_sandbox  # noqa: F401  (fixture)


def _local(url: str, envd_url: str) -> str:
    """The SDK builds URLs on E2B's domain; send the same path and query to our daemon."""
    u = urllib.parse.urlsplit(url)
    return f"{envd_url}{u.path}?{u.query}"


def test_token_flows_through_sdk(secured_sandbox):
    sbx = secured_sandbox
    sbx.files.write("secured/a.txt", "secret data")
    assert sbx.files.read("secured/a.txt") == "secret data"
    assert sbx.files.exists("secured/a.txt")
    # Without the token the daemon refuses.
    r = httpx.get(f"{sbx._test_envd_url}/files", params={"path": "secured/a.txt"})
    assert r.status_code == 401
    assert r.json() == {"code": 401, "message": "missing signature query parameter"}


def test_signed_urls(secured_sandbox):
    sbx = secured_sandbox
    sbx.files.write("secured/s.txt", "signed")
    url = _local(sbx.download_url("secured/s.txt"), sbx._test_envd_url)
    assert "signature=v1_" in url
    r = httpx.get(url)
    assert r.status_code == 200 and r.text == "signed"
    url = _local(sbx.download_url("secured/s.txt", use_signature_expiration=60), sbx._test_envd_url)
    assert httpx.get(url).status_code == 200
    up = _local(sbx.upload_url("secured/up.txt"), sbx._test_envd_url)
    r = httpx.post(up, files={"file": ("secured/up.txt", b"uploaded")})
    assert r.status_code == 200, r.text
    assert sbx.files.read("secured/up.txt") == "uploaded"


def test_expired_and_wrong_signatures(secured_sandbox):
    sbx = secured_sandbox
    sbx.files.write("secured/e.txt", "x")
    url = _local(sbx.download_url("secured/e.txt", use_signature_expiration=1), sbx._test_envd_url)
    time.sleep(2.1)
    r = httpx.get(url)
    assert r.status_code == 401
    assert r.json() == {"code": 401, "message": "signature is already expired"}
    bad = url.replace("signature=v1_", "signature=v1_x")
    r = httpx.get(bad)
    assert r.status_code == 401 and r.json()["message"] == "invalid signature"
    # A read signature used for a write.
    ok = _local(sbx.download_url("secured/e.txt"), sbx._test_envd_url)
    r = httpx.post(ok, content=b"z", headers={"content-type": "application/octet-stream"})
    assert r.status_code == 401
    # The daemon keeps serving.
    assert sbx.files.read("secured/e.txt") == "x"


def test_wrong_token_is_authentication_error(secured_sandbox):
    sbx = secured_sandbox
    r = httpx.get(
        f"{sbx._test_envd_url}/files", params={"path": "secured/e.txt"}, headers={"X-Access-Token": "wrong"}
    )
    assert r.status_code == 401
    assert r.json()["message"] == "access token present in header but does not match"
    r = httpx.post(
        f"{sbx._test_envd_url}/filesystem.Filesystem/Stat", json={"path": "/"}, headers={"X-Access-Token": "wrong"}
    )
    assert r.status_code == 401
