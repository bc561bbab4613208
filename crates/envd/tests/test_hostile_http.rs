//! The daemon's HTTP surface under attack: `/files/compose` and signatures, browsers (CORS,
//! `Origin`, DNS rebinding), `/init`'s token rules, the non-loopback start check, connection
//! hygiene (header timeout, connection cap) and handler panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use e2b_envd_proto::wire::FileOperation;
use e2b_test_support::{spawn_envd, spawn_envd_open, spawn_envd_with};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

async fn message(r: reqwest::Response) -> String {
    let v: serde_json::Value = r.json().await.unwrap();
    v["message"].as_str().unwrap_or_default().to_string()
}

/// A signed upload URL for one file must not let its holder compose (read, write, delete)
/// other files: compose needs the access token, and query/body disagreements are refused.
#[tokio::test]
async fn compose_is_not_reachable_with_a_signed_upload_url() {
    let envd = spawn_envd().await;
    let token = envd.access_token().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let secret = format!("{d}/secret");
    std::fs::write(&secret, "do not read").unwrap();
    let signed_path = format!("{d}/upload.txt");
    let sig =
        e2b_envd_proto::wire::file_signature(&signed_path, FileOperation::Write, "", &token, None);
    let http = reqwest::Client::new();
    let evil = json!({"source_paths": [secret], "destination": format!("{d}/stolen")});
    let r = http
        .post(format!("{}/files/compose", envd.url()))
        .query(&[("path", signed_path.as_str()), ("signature", sig.as_str())])
        .json(&evil)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a signature must not authorise compose");
    assert!(std::path::Path::new(&secret).exists());
    assert!(!std::path::Path::new(&format!("{d}/stolen")).exists());

    // With the token, the query may not contradict the body.
    let r = http
        .post(format!("{}/files/compose", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
        .query(&[("path", signed_path.as_str())])
        .json(&evil)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(
        message(r)
            .await
            .contains("differs from the body's destination")
    );
    let r = http
        .post(format!("{}/files/compose", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
        .query(&[("username", "root")])
        .json(&json!({"source_paths": [format!("{d}/secret")], "destination": format!("{d}/x"), "username": "nobody"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(std::path::Path::new(&secret).exists());

    // Only JSON, and a bounded body.
    let r = http
        .post(format!("{}/files/compose", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
        .header("content-type", "text/plain")
        .body(evil.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let huge = format!(
        "{{\"destination\":\"x\",\"source_paths\":[\"{}\"]}}",
        "a".repeat(2 << 20)
    );
    let r = http
        .post(format!("{}/files/compose", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
}

/// A web page's request carries its `Origin`: refused unless configured, on every route,
/// preflights included; no CORS headers are given by default.
#[tokio::test]
async fn token_less_daemon_refuses_foreign_origins() {
    let envd = spawn_envd_open().await;
    let http = reqwest::Client::new();
    let f = envd.workdir().join("id_rsa");
    std::fs::write(&f, "PRIVATE").unwrap();
    let r = http
        .get(format!("{}/files", envd.url()))
        .query(&[("path", f.to_str().unwrap())])
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert!(message(r).await.contains("--allow-origin"));
    let r = http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/process.Process/Start", envd.url()),
        )
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = http
        .post(format!("{}/process.Process/List", envd.url()))
        .header("origin", "null")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Without an Origin (SDKs, curl) it works.
    let r = http
        .get(format!("{}/files", envd.url()))
        .query(&[("path", f.to_str().unwrap())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn configured_origin_gets_cors() {
    let envd = spawn_envd_with(|mut c| {
        c.access_token = None;
        c.allow_origins.push("http://app.local:3000".into());
        c
    })
    .await;
    let http = reqwest::Client::new();
    let r = http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/process.Process/List", envd.url()),
        )
        .header("origin", "http://app.local:3000")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://app.local:3000"
    );
    let r = http
        .get(format!("{}/health", envd.url()))
        .header("origin", "http://other.local:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

/// DNS rebinding: the browser sends the attacker's name in `Host`.
#[tokio::test]
async fn foreign_host_is_refused() {
    let envd = spawn_envd_with(|mut c| {
        c.access_token = None;
        c.allow_hosts.push("*.sbx.test".into());
        c
    })
    .await;
    let http = reqwest::Client::new();
    for (host, want) in [
        ("rebind.evil.example", 403),
        ("rebind.evil.example:49983", 403),
        ("sbx.test", 403),
        ("localhost:1", 200),
        ("127.0.0.1", 200),
        ("[::1]:49983", 200),
        ("49983-abc.sbx.test", 200),
    ] {
        let r = http
            .get(format!("{}/envs", envd.url()))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "Host: {host}");
    }
}

/// envd's `/init` rules: JSON only, and once a token is set it may be changed only by a caller
/// that knows it.
#[tokio::test]
async fn init_follows_envds_token_rules() {
    let envd = spawn_envd_open().await;
    let http = reqwest::Client::new();
    let url = format!("{}/init", envd.url());
    // A browser's "simple" request (text/plain) cannot lock the owner out.
    let r = http
        .post(&url)
        .header("content-type", "text/plain")
        .body(r#"{"accessToken":"attacker"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(envd.access_token(), None);
    // First-time setup.
    let r = http
        .post(&url)
        .json(&json!({"accessToken": "t1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(envd.access_token().as_deref(), Some("t1"));
    // No token in the body: no reset.
    let r = http.post(&url).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(message(r).await.contains("reset not authorized"));
    // Another token: refused.
    let r = http
        .post(&url)
        .json(&json!({"accessToken": "t2", "envVars": {"X": "1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(message(r).await.contains("validation failed"));
    assert_eq!(envd.access_token().as_deref(), Some("t1"));
    // The same token: allowed (envd re-initialises with it).
    let r = http
        .post(&url)
        .json(&json!({"accessToken": "t1", "envVars": {"X": "1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // The header authorises a change.
    let r = http
        .post(&url)
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, "t1")
        .json(&json!({"accessToken": "t2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(envd.access_token().as_deref(), Some("t2"));
}

#[tokio::test]
async fn non_loopback_bind_needs_a_token() {
    let mut config = e2b_envd::EnvdConfig::ephemeral();
    config.bind = "0.0.0.0:0".parse().unwrap();
    let err = e2b_envd::Envd::start(config.clone()).await.unwrap_err();
    assert!(err.to_string().contains("--insecure-no-token"), "{err}");
    let mut tokened = config.clone();
    tokened.access_token = Some("t".into());
    let with_token = e2b_envd::Envd::start(tokened).await.unwrap();
    with_token.shutdown().await;
    let mut insecure = config;
    insecure.insecure_no_token = true;
    let h = e2b_envd::Envd::start(insecure).await.unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn access_token_file_is_read() {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: e2b_envd::EnvdArgs,
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("token");
    std::fs::write(&p, "from-file\n").unwrap();
    let cli = Cli::try_parse_from(["x", "--access-token-file", p.to_str().unwrap()]).unwrap();
    let config = cli.args.resolve_config().unwrap();
    assert_eq!(config.access_token.as_deref(), Some("from-file"));
    let cli = Cli::try_parse_from(["x", "--access-token-file", "/nonexistent/token"]).unwrap();
    assert!(cli.args.resolve_config().is_err());
    assert!(Cli::try_parse_from(["x", "--access-token-file", "f", "--access-token", "t"]).is_err());
}

/// Sends `raw` on a new connection and reads until the daemon closes it; returns what it
/// answered. The guard timeout only catches a hang.
async fn read_until_closed(addr: std::net::SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .expect("the daemon kept a half-sent request open (no header timeout)")
        .ok();
    out
}

#[tokio::test]
async fn half_sent_request_is_closed_after_the_header_timeout() {
    let envd = spawn_envd_with(|mut c| {
        c.header_read_timeout = Duration::from_millis(500);
        c
    })
    .await;
    // Headers never finished.
    read_until_closed(
        envd.addr(),
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ",
    )
    .await;
    // Nothing sent at all.
    read_until_closed(envd.addr(), b"").await;
    // Part of the HTTP/2 preface.
    read_until_closed(envd.addr(), b"PRI * HTTP/2.0\r\n").await;
    let r = reqwest::get(format!("{}/health", envd.url()))
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let envd = spawn_envd_with(|mut c| {
        c.idle_timeout = Duration::from_millis(500);
        // Longer than the read guard below: only the idle timeout can close the connection.
        c.header_read_timeout = Duration::from_secs(120);
        c
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .expect("an idle keep-alive connection was never closed")
        .ok();
    assert!(
        out.starts_with(b"HTTP/1.1 204"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
}

#[tokio::test]
async fn connections_beyond_the_cap_wait() {
    let envd = spawn_envd_with(|mut c| {
        c.max_connections = 1;
        c
    })
    .await;
    let req = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut first = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    first.write_all(req).await.unwrap();
    let mut buf = [0u8; 512];
    let n = first.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 204"));
    // The first connection stays open: the second waits.
    let mut second = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    second.write_all(req).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(700), second.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "a connection beyond the cap was served at once"
    );
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(30), second.read(&mut buf))
        .await
        .expect("the waiting connection was never served")
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 204"));
}

#[tokio::test]
async fn a_panicking_handler_answers_500_and_the_daemon_keeps_serving() {
    let envd = spawn_envd_with(|mut c| {
        c.debug_panic_route = true;
        c
    })
    .await;
    let token = envd.access_token().unwrap();
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let r = http
            .get(format!("{}/__envd_test/panic", envd.url()))
            .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            500,
            "the panic route answers 500 (it exists in debug builds only)"
        );
        assert!(message(r).await.contains("panicked"));
    }
    // gRPC clients get `internal`.
    let r = http
        .post(format!("{}/__envd_test/panic", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
        .header("content-type", "application/grpc-web+proto")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["grpc-status"], "13");
    let r = http
        .get(format!("{}/health", envd.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

/// HTTP/2 frames in `bytes` (complete ones): `(type, flags)`.
fn h2_frames(mut bytes: &[u8]) -> Vec<(u8, u8)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len =
            (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
        if bytes.len() < 9 + len {
            break;
        }
        out.push((bytes[3], bytes[4]));
        bytes = &bytes[9 + len..];
    }
    out
}

/// The daemon pings an idle HTTP/2 connection and closes one whose peer does not answer
/// within the keepalive timeout; a peer that answers (a real h2 client) keeps its connection.
#[tokio::test]
async fn http2_peer_that_never_answers_pings_is_disconnected() {
    const PING: u8 = 6;
    const SETTINGS: u8 = 4;
    let envd = spawn_envd_with(|mut c| {
        c.http2_keepalive_interval = Duration::from_millis(200);
        c.http2_keepalive_timeout = Duration::from_millis(300);
        // Far beyond the read guard below: only the keepalive can close the connection.
        c.idle_timeout = Duration::from_secs(600);
        c.header_read_timeout = Duration::from_secs(600);
        c
    })
    .await;

    // A peer that answers pings: hyper's h2 client (h2 acknowledges pings itself), on one
    // connection that is never re-established.
    let tcp = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    let (mut healthy, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let healthy_conn = tokio::spawn(conn);
    let uri = format!("http://{}/health", envd.addr());
    let health = || {
        http::Request::get(uri.as_str())
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap()
    };
    let r = healthy.send_request(health()).await.unwrap();
    assert_eq!(r.status(), 204);

    // A raw h2 peer: preface, empty SETTINGS, the ACK of the server's SETTINGS, then silence
    // (it never reads again, so it never answers a PING).
    let mut s = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !h2_frames(&got)
        .iter()
        .any(|&(t, f)| t == SETTINGS && f & 1 == 0)
    {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("the daemon sent no SETTINGS frame")
            .unwrap();
        assert!(
            n > 0,
            "the daemon closed the connection before its SETTINGS"
        );
        got.extend_from_slice(&buf[..n]);
    }
    s.write_all(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
        .await
        .unwrap();
    // Read only now, until the daemon closes (the guard only catches a connection kept open).
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest))
        .await
        .expect("an h2 connection that never answered a PING was kept open")
        .ok();
    got.extend_from_slice(&rest);
    let frames = h2_frames(&got);
    assert!(
        frames.iter().any(|&(t, f)| t == PING && f & 1 == 0),
        "the connection was closed without a PING first: {frames:?}"
    );

    // The answering peer lived through the same time and still works on its connection.
    assert!(
        !healthy_conn.is_finished(),
        "the answering peer's connection was closed"
    );
    let r = healthy.send_request(health()).await.unwrap();
    assert_eq!(r.status(), 204);
}
