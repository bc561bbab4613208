//! Bad input never hurts the daemon; no descriptor or process leaks; graceful shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_envd_proto::process::ListRequest;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

async fn raw(envd: &TestEnvd, request: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    s.write_all(request).await.unwrap();
    let _ = s.shutdown().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test]
async fn garbage_and_huge_headers_keep_the_daemon_serving() {
    let envd = spawn_envd().await;
    let _ = raw(&envd, b"\x00\x01\x02 garbage\r\n\r\n").await;
    let big = format!(
        "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    let out = raw(&envd, big.as_bytes()).await;
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 431") || text.starts_with("HTTP/1.1 400"),
        "{text}"
    );
    // Truncated chunked body on a streaming call.
    let token = envd.access_token().unwrap();
    let req = format!(
        "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nx-access-token: {token}\r\ncontent-type: application/connect+json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n\x00\x00\x00"
    );
    let _ = raw(&envd, req.as_bytes()).await;
    let mut c = h2c(&envd).await;
    c.list(req_list(&envd)).await.unwrap();
    assert_eq!(
        reqwest::get(format!("{}/health", envd.url()))
            .await
            .unwrap()
            .status()
            .as_u16(),
        204
    );
}

fn req_list(envd: &TestEnvd) -> tonic::Request<ListRequest> {
    req(envd, ListRequest {})
}

#[tokio::test]
async fn shutdown_kills_and_reaps_every_process() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut pids = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut s = start_bash(&mut c, &envd, "sleep 1000 & sleep 1000").await;
        let mut got = Collected::default();
        got.push(s.message().await.unwrap().unwrap().event.unwrap());
        pids.push(got.pid.unwrap() as i32);
        streams.push(s);
    }
    assert!(pids.iter().all(|p| alive(*p)));
    // A hang guard only (shutdown waits for the processes it kills): what follows asserts
    // the behaviour.
    tokio::time::timeout(Duration::from_secs(30), envd.shutdown())
        .await
        .expect("shutdown hung with processes to kill");
    for p in &pids {
        assert!(!alive(*p), "pid {p} alive after shutdown");
        // Reaped: not even a zombie entry.
        assert!(
            !std::path::Path::new(&format!("/proc/{p}")).exists(),
            "pid {p} not reaped"
        );
    }
    for s in streams {
        let got = collect(s, |m| m.event).await;
        assert!(got.end.is_some() || got.error.is_some());
    }
}

#[tokio::test]
async fn drop_kills_processes() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let mut s = start_bash(&mut c, &envd, "sleep 1000").await;
    let mut got = Collected::default();
    got.push(s.message().await.unwrap().unwrap().event.unwrap());
    let pid = got.pid.unwrap() as i32;
    drop(envd);
    assert!(
        gone_within(pid, Duration::from_secs(10)).await,
        "pid {pid} alive after the daemon was dropped"
    );
}

/// One raw gRPC call over h2c: returns the HTTP status, the `grpc-status` (from the headers of
/// a trailers-only response or from the trailers) and the `grpc-message`.
async fn raw_grpc(
    envd: &TestEnvd,
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let channel = tonic::transport::Endpoint::from_shared(envd.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("{}{path}", envd.url()))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            envd.access_token().unwrap(),
        );
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(tonic::body::Body::new(http_body_util::Full::new(
            bytes::Bytes::from(body),
        )))
        .unwrap();
    let resp = channel.oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let mut fields = resp.headers().clone();
    let collected = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("the response ended")
        .unwrap();
    if let Some(t) = collected.trailers() {
        fields.extend(t.clone());
    }
    let get = |k: &str| fields.get(k).map(|v| v.to_str().unwrap().to_string());
    // tonic's own parser percent-decodes `grpc-message`.
    let message = tonic::Status::from_header_map(&fields)
        .map(|st| st.message().to_string())
        .unwrap_or_default();
    (status, get("grpc-status"), message)
}

/// Server streams over gRPC are framed by the daemon itself: every malformed request gets a
/// typed status (trailers-only, HTTP 200) and the daemon keeps serving.
#[tokio::test]
async fn malformed_grpc_stream_requests_get_typed_statuses() {
    let envd = spawn_envd_with(|mut c| {
        c.max_message_bytes = 1024;
        c
    })
    .await;
    let start = "/process.Process/Start";
    // (name, request body, extra headers, expected grpc-status, text in grpc-message)
    type Case = (
        &'static str,
        Vec<u8>,
        Vec<(&'static str, &'static str)>,
        &'static str,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "truncated header",
            vec![0, 0, 0],
            vec![],
            "3",
            "incomplete envelope",
        ),
        (
            "short message",
            {
                let mut v = envelope(0, &[0; 10]);
                v[4] = 100;
                v
            },
            vec![],
            "3",
            "promised 100 bytes",
        ),
        (
            "compressed flag",
            envelope(1, b"x"),
            vec![],
            "13",
            "compressed message",
        ),
        (
            "gzip request",
            envelope(0, b""),
            vec![("grpc-encoding", "gzip")],
            "12",
            "gzip",
        ),
        (
            "not protobuf",
            envelope(0, &[0xff, 0xff, 0xff]),
            vec![],
            "3",
            "unmarshal protobuf",
        ),
        (
            "too large",
            envelope(0, &[0; 2048]),
            vec![],
            "8",
            "larger than",
        ),
        (
            "two messages",
            [envelope(0, b""), envelope(0, b"")].concat(),
            vec![],
            "3",
            "exactly one message",
        ),
    ];
    for (name, body, headers, code, text) in cases {
        let (http, status, message) = raw_grpc(&envd, start, body, &headers).await;
        assert_eq!(http, 200, "{name}");
        assert_eq!(status.as_deref(), Some(code), "{name}: {message}");
        assert!(message.contains(text), "{name}: {message:?}");
    }
    // A good request on the same path still works, with its status in the trailers.
    let mut good = prost::Message::encode_to_vec(&bash("printf ok"));
    good = envelope(0, &good);
    let (http, status, _) = raw_grpc(&envd, start, good, &[]).await;
    assert_eq!((http, status.as_deref()), (200, Some("0")));
    let mut c = h2c(&envd).await;
    c.list(req_list(&envd)).await.unwrap();
}

/// A `Start` that arrives while the daemon shuts down is refused as `unavailable` (the client
/// may retry elsewhere) and starts nothing.
#[tokio::test]
async fn start_during_shutdown_is_unavailable() {
    let envd = spawn_envd().await;
    let token = envd.access_token().unwrap();
    // Outside the daemon's workdir, which goes away with it.
    let markers = tempfile::tempdir().unwrap();
    let marker = markers.path().join("started-during-shutdown");
    let mut c = h2c(&envd).await;
    // Keep the connection busy with a running command, so shutdown has something to reap.
    let mut s = start_bash(&mut c, &envd, "sleep 1000").await;
    s.message().await.unwrap().unwrap();
    let shutdown = tokio::spawn(envd.shutdown());
    // The running command's stream ends once the shutdown has closed the process table and
    // killed it: from then on the daemon is shutting down, whatever the machine's load (a
    // fixed sleep here raced the shutdown task on a loaded machine).
    let got = collect(s, |m| m.event).await;
    assert!(
        got.end.is_some(),
        "the shutdown did not end the running command: {got:?}"
    );
    let mut r = tonic::Request::new(bash(&format!("touch {}", marker.display())));
    r.metadata_mut().insert(
        e2b_envd_proto::wire::headers::ACCESS_TOKEN,
        token.parse().unwrap(),
    );
    match c.start(r).await {
        Ok(_) => panic!("a Start during shutdown was accepted"),
        Err(e) => assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}"),
    }
    shutdown.await.unwrap();
    assert!(!marker.exists());
}
