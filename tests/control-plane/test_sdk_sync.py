"""The official E2B Python SDK, normal mode, against `e2b serve` (API + edge)."""

import os
import pwd
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import timedelta

import pytest
from e2b import Sandbox, SandboxQuery, SandboxState
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException


def test_create_run_files_info_kill(validate_api_responses):
    tag = uuid.uuid4().hex
    sbx = Sandbox.create(metadata={"suite": "py", "tag": tag}, envs={"GREETING": "hello"}, timeout=120)
    try:
        assert sbx.is_running()
        assert sbx._envd_access_token, "secure is the SDK default: serve must return a token"
        out = sbx.commands.run("echo $GREETING; whoami")
        expected_user = "user" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        assert out.stdout.splitlines() == ["hello", expected_user]
        assert out.exit_code == 0

        path = f"/tmp/e2b-serve-py-{tag}.txt"
        sbx.files.write(path, "from the sdk")
        assert sbx.files.read(path) == "from the sdk"
        # Signed URLs, used without the SDK's headers (as a browser or curl would).
        with urllib.request.urlopen(sbx.download_url(path, use_signature_expiration=60)) as r:
            assert r.read() == b"from the sdk"
        up = urllib.request.Request(
            sbx.upload_url(path + ".up"), data=b"raw upload", method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(up) as r:
            assert r.status == 200
        assert sbx.files.read(path + ".up") == "raw upload"

        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.state == SandboxState.RUNNING
        assert info.metadata["tag"] == tag
        assert info.template_id == "base"
        assert info.end_at > info.started_at
        assert info.cpu_count >= 1 and info.memory_mb > 0
    finally:
        assert sbx.kill() is True
    assert not sbx.is_running()
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)
    # The contract fixture saw (and validated) the API calls.
    seen = {(m, s) for m, _, s in validate_api_responses}
    assert ("POST", 201) in seen and ("DELETE", 204) in seen and ("GET", 404) in seen, seen


def test_list_with_metadata_filter_and_pages():
    tag = uuid.uuid4().hex
    made = [Sandbox.create(metadata={"tag": tag}, timeout=60) for _ in range(3)]
    try:
        found = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert sorted(s.sandbox_id for s in found) == sorted(s.sandbox_id for s in made)
        pager = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2)
        first = pager.next_items()
        assert len(first) == 2 and pager.has_next
        second = pager.next_items()
        assert len(second) == 1 and not pager.has_next and pager.next_token is None
        # Newest first across pages.
        assert [s.sandbox_id for s in first + second] == [s.sandbox_id for s in reversed(made)]
        assert Sandbox.list(query=SandboxQuery(metadata={"tag": "nothing-" + tag})).next_items() == []
        running = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.RUNNING])).next_items()
        assert len(running) == 3
    finally:
        for s in made:
            s.kill()
    after = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.RUNNING])).next_items()
    assert after == []


def test_set_timeout_expires_and_connect_extends():
    sbx = Sandbox.create(timeout=300)
    end = sbx.get_info().end_at
    # connect with a shorter timeout never shortens.
    again = Sandbox.connect(sbx.sandbox_id, timeout=10)
    assert again.get_info().end_at == end
    assert again.commands.run("echo connected").stdout == "connected\n"
    Sandbox.connect(sbx.sandbox_id, timeout=600)
    assert sbx.get_info().end_at > end
    sbx.set_timeout(2)
    deadline = time.time() + 15
    while time.time() < deadline and sbx.is_running():
        time.sleep(0.2)
    assert not sbx.is_running()
    with pytest.raises(NotFoundException):
        sbx.get_info()


def test_metrics():
    sbx = Sandbox.create(timeout=60)
    try:
        metrics = []
        for _ in range(60):
            metrics = sbx.get_metrics()
            if metrics:
                break
            time.sleep(0.5)
        assert metrics, "no metrics sample"
        m = metrics[0]
        for field in ("cpu_count", "cpu_used_pct", "mem_used", "mem_total", "disk_used", "disk_total"):
            assert getattr(m, field) is not None, field
        assert m.mem_used > 0
        # The sandbox's own size, as info reports it (an isolated sandbox's limit, not the
        # machine's memory): a program that sizes its work by it must fit.
        info = sbx.get_info()
        assert m.mem_total == info.memory_mb * 1024 * 1024, (m.mem_total, info.memory_mb)
        assert m.cpu_count == info.cpu_count, (m.cpu_count, info.cpu_count)
        assert 0 < m.disk_total and m.disk_used <= m.disk_total, (m.disk_used, m.disk_total)
        start = info.started_at
        assert sbx.get_metrics(start=start - timedelta(days=2), end=start - timedelta(days=1)) == []
    finally:
        sbx.kill()


def test_pause_and_resume_keep_processes():
    sbx = Sandbox.create(timeout=120)
    try:
        # The counter lives in the sandbox's own /tmp (isolated sandboxes have a private one):
        # read it through the SDK, before the pause and right after the resume.
        counter = "/tmp/e2b-serve-py-counter"
        sbx.commands.run(f"i=0; while true; do i=$((i+1)); echo $i > {counter}.tmp; mv {counter}.tmp {counter}; sleep 0.05; done", background=True, timeout=0)
        time.sleep(0.5)
        before = int(sbx.files.read(counter))
        assert sbx.pause() is True
        assert not sbx.is_running()
        assert sbx.get_info().state == SandboxState.PAUSED
        assert sbx.pause() is False  # already paused: 409
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sbx.sandbox_id in [s.sandbox_id for s in paused]
        time.sleep(2.0)  # ~40 increments if the loop kept running
        resumed = Sandbox.connect(sbx.sandbox_id)
        assert resumed.sandbox_id == sbx.sandbox_id
        assert resumed.is_running()
        after_resume = int(resumed.files.read(counter))
        assert after_resume - before < 20, f"the process ran while paused ({before} -> {after_resume})"
        time.sleep(0.5)
        assert int(resumed.files.read(counter)) > after_resume, "the process did not continue"
    finally:
        sbx.kill()


def test_errors():
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="e2b_" + "f" * 40).next_items()
    with pytest.raises(NotFoundException):
        Sandbox.connect("nonexistingsandbox")
    with pytest.raises(SandboxException):
        Sandbox.create(template="no-such-template")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_page(sbx, port: int, text: str) -> None:
    """Starts a web server in the sandbox on `port` whose /index.html is `text`."""
    sbx.commands.run(f"mkdir -p site && echo {text} > site/index.html")
    sbx.commands.run(f"python3 -m http.server {port} --bind 127.0.0.1 --directory site", background=True)


def _fetch_port(host: str, headers=None, tries: int = 100):
    """GET /index.html through the edge with `Host: host`: (status, body), retried while the
    server in the sandbox is not up yet (502)."""
    url = os.environ["E2B_SANDBOX_URL"].rstrip("/") + "/index.html"
    status, body = None, None
    for _ in range(tries):
        try:
            req = urllib.request.Request(url, headers={"Host": host, **(headers or {})})
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
            if e.code != 502:
                return status, body
            time.sleep(0.1)
    return status, body


def test_get_host_reaches_a_server_in_the_sandbox():
    """`sandbox.get_host(port)` names `<port>-<id>.<domain>`: with that Host, the edge
    (E2B_SANDBOX_URL) proxies to the server the sandbox started on that port."""
    port = _free_port()
    sbx = Sandbox.create(timeout=120)
    try:
        _serve_page(sbx, port, "from-get-host")
        host = sbx.get_host(port)
        # e2b serve answers `domain: localhost:<edge port>`, so the name is this machine's edge
        # (never E2B's cloud, whose default domain the SDK falls back to without one).
        edge_port = urllib.parse.urlsplit(os.environ["E2B_SANDBOX_URL"]).port
        assert host == f"{port}-{sbx.sandbox_id}.localhost:{edge_port}", host
        assert _fetch_port(host) == (200, b"from-get-host\n")
    finally:
        assert sbx.kill() is True


def test_private_ports_and_auto_resume(validate_api_responses):
    """`network={"allow_public_traffic": False}`: the sandbox's ports answer only requests that
    carry `sandbox.traffic_access_token` (403 otherwise, as E2B's proxy). `lifecycle` with
    `auto_resume`: traffic for the paused sandbox resumes it."""
    port = _free_port()
    sbx = Sandbox.create(
        timeout=120,
        network={"allow_public_traffic": False},
        lifecycle={"on_timeout": "pause", "auto_resume": True},
    )
    try:
        token = sbx.traffic_access_token
        assert token and len(token) == 64, token
        _serve_page(sbx, port, "private")
        host = sbx.get_host(port)
        with_token = {"e2b-traffic-access-token": token}
        assert _fetch_port(host, with_token) == (200, b"private\n")
        status, body = _fetch_port(host)
        assert status == 403 and b"missing traffic access token" in body, (status, body)
        status, _ = _fetch_port(host, {"e2b-traffic-access-token": "0" * 64})
        assert status == 403

        assert sbx.pause() is True
        assert sbx.get_info().state == SandboxState.PAUSED
        # Any call through the edge wakes it.
        assert sbx.commands.run("echo awake").stdout == "awake\n"
        assert sbx.get_info().state == SandboxState.RUNNING
    finally:
        sbx.kill()


def test_what_cannot_be_held_is_refused(validate_api_responses):
    """Egress rules e2b serve cannot enforce are refused with the reason, never dropped: the
    caller must not get an open sandbox it believes restricted."""
    tag = uuid.uuid4().hex
    with pytest.raises(SandboxException, match="network.allowOut"):
        Sandbox.create(
            timeout=30,
            metadata={"refused": tag},
            network={"allow_out": ["example.com"], "deny_out": ["0.0.0.0/0"]},
        )
    assert Sandbox.list(query=SandboxQuery(metadata={"refused": tag})).next_items() == []
