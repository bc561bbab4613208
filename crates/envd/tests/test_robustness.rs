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
        let mut s = c
            .start(req(&envd, bash("sleep 1000 & sleep 1000")))
            .await
            .unwrap()
            .into_inner();
        let mut got = Collected::default();
        got.push(s.message().await.unwrap().unwrap().event.unwrap());
        pids.push(got.pid.unwrap() as i32);
        streams.push(s);
    }
    assert!(pids.iter().all(|p| alive(*p)));
    let t = std::time::Instant::now();
    envd.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(6));
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
    let mut s = c
        .start(req(&envd, bash("sleep 1000")))
        .await
        .unwrap()
        .into_inner();
    let mut got = Collected::default();
    got.push(s.message().await.unwrap().unwrap().event.unwrap());
    let pid = got.pid.unwrap() as i32;
    drop(envd);
    let t = std::time::Instant::now();
    while alive(pid) && t.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid));
}
