//! `/files` under attack: FIFOs, devices and sockets, multipart bodies that never reach a
//! boundary, gzip bombs, too many parts, partial multipart commits, signature age.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use e2b_test_support::{TestEnvd, spawn_envd, spawn_envd_with};

/// Hang guard: a request that blocks a thread on a FIFO would never answer.
const GUARD: Duration = Duration::from_secs(30);

async fn send(b: reqwest::RequestBuilder) -> (u16, String) {
    let r = tokio::time::timeout(GUARD, b.send())
        .await
        .expect("the daemon did not answer (blocked on a FIFO or device?)")
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

fn get(envd: &TestEnvd, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .get(format!("{}/files", envd.url()))
        .query(&[("path", path)])
        .header(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            envd.access_token().unwrap(),
        )
}

fn post(envd: &TestEnvd, query: &[(&str, &str)]) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{}/files", envd.url()))
        .query(query)
        .header(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            envd.access_token().unwrap(),
        )
}

fn mkfifo(p: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "missing: the `mkfifo` command (needed to create {p:?})");
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn fifos_devices_and_sockets_are_refused_at_once() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let sock = dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for (p, kind) in [
        (fifo.to_str().unwrap(), "a FIFO"),
        ("/dev/zero", "a character device"),
        (sock.to_str().unwrap(), "a socket"),
    ] {
        let (s, m) = send(get(&envd, p)).await;
        assert_eq!(s, 400, "GET {p}: {m}");
        assert!(m.contains(kind) && m.contains("not a regular file"), "{m}");
    }
    // Uploading over a FIFO (old behaviour: written in place, blocking forever).
    let (s, m) = send(
        post(&envd, &[("path", fifo.to_str().unwrap())])
            .header("content-type", "application/octet-stream")
            .body("x"),
    )
    .await;
    assert_eq!(s, 400, "{m}");
    assert!(m.contains("not a regular file"), "{m}");
    // Composing from a FIFO.
    let (s, m) = send(
        reqwest::Client::new()
            .post(format!("{}/files/compose", envd.url()))
            .header(
                e2b_envd_proto::wire::headers::ACCESS_TOKEN,
                envd.access_token().unwrap(),
            )
            .json(&serde_json::json!({
                "source_paths": [fifo.to_str().unwrap()],
                "destination": dir.path().join("out").to_str().unwrap(),
            })),
    )
    .await;
    assert_eq!(s, 400, "{m}");
    assert!(std::fs::metadata(&fifo).is_ok(), "the FIFO was deleted");
    // Many FIFO requests at once do not stall the blocking pool.
    let mut all = Vec::new();
    for _ in 0..64 {
        all.push(send(get(&envd, fifo.to_str().unwrap())));
    }
    for (s, _) in futures::future::join_all(all).await {
        assert_eq!(s, 400);
    }
}

/// `n` bytes of zeros, gzip-compressed as repeated 1 MiB members (cheap to build).
fn zeros_gzip(mib: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&vec![0u8; 1 << 20]).unwrap();
    let member = enc.finish().unwrap();
    member.repeat(mib)
}

#[tokio::test]
async fn gzip_bombs_are_refused() {
    let envd = spawn_envd_with(|mut c| {
        c.max_decompressed_bytes = 8 << 20;
        c
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("bomb");
    let (s, m) = send(
        post(&envd, &[("path", t.to_str().unwrap())])
            .header("content-type", "application/octet-stream")
            .header("content-encoding", "gzip")
            .body(zeros_gzip(32)),
    )
    .await;
    assert_eq!(s, 413, "{m}");
    assert!(m.contains("decompresses to more than"), "{m}");
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // The ratio limit (default 200 past 64 MiB): 100 MiB from ~100 KiB.
    let envd = spawn_envd().await;
    let (s, m) = send(
        post(&envd, &[("path", t.to_str().unwrap())])
            .header("content-type", "application/octet-stream")
            .header("content-encoding", "gzip")
            .body(zeros_gzip(100)),
    )
    .await;
    assert_eq!(s, 413, "{m}");
    assert!(m.contains("expands more than 200-fold"), "{m}");
    assert!(entries(dir.path()).is_empty());
}

#[tokio::test]
async fn multipart_without_a_boundary_is_refused_early() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    // 64 MiB of preamble that never reaches the boundary, sent gzip-compressed: the old parser
    // buffered all of it.
    let (s, m) = send(
        post(&envd, &[("path", dir.path().join("x").to_str().unwrap())])
            .header("content-type", "multipart/form-data; boundary=NEVER")
            .header("content-encoding", "gzip")
            .body(zeros_gzip(64)),
    )
    .await;
    assert_eq!(s, 413, "{m}");
    assert!(m.contains("before the first multipart boundary"), "{m}");
    // A part whose header block never ends.
    let mut body =
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\nX: ".to_vec();
    body.extend(std::iter::repeat_n(b'h', 1 << 20));
    let (s, m) = send(
        post(&envd, &[])
            .header("content-type", "multipart/form-data; boundary=B")
            .body(body),
    )
    .await;
    assert_eq!(s, 413, "{m}");
    assert!(m.contains("headers are longer than"), "{m}");
}

fn part(body: &mut Vec<u8>, name: &str, filename: &str, data: &[u8]) {
    write!(
        body,
        "--B\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n\r\n"
    )
    .unwrap();
    body.extend_from_slice(data);
    body.extend_from_slice(b"\r\n");
}

#[tokio::test]
async fn too_many_parts_are_refused() {
    let envd = spawn_envd_with(|mut c| {
        c.max_multipart_parts = 4;
        c
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut body = Vec::new();
    for i in 0..10 {
        part(&mut body, "other", &format!("f{i}"), b"x");
    }
    body.extend_from_slice(b"--B--\r\n");
    let (s, m) = send(
        post(&envd, &[])
            .header("content-type", "multipart/form-data; boundary=B")
            .body(body),
    )
    .await;
    assert_eq!(s, 413, "{m}");
    assert!(m.contains("more than 4 parts"), "{m}");
    assert!(entries(dir.path()).is_empty());
}

#[tokio::test]
async fn a_multipart_upload_is_all_or_nothing() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("taken")).unwrap();
    std::fs::write(d.join("keep.txt"), "old").unwrap();
    let mut body = Vec::new();
    part(
        &mut body,
        "file",
        d.join("keep.txt").to_str().unwrap(),
        b"new",
    );
    part(
        &mut body,
        "file",
        d.join("first.txt").to_str().unwrap(),
        b"1",
    );
    // The third part's target is a directory: the whole upload fails.
    part(&mut body, "file", d.join("taken").to_str().unwrap(), b"2");
    body.extend_from_slice(b"--B--\r\n");
    let (s, m) = send(
        post(&envd, &[])
            .header("content-type", "multipart/form-data; boundary=B")
            .body(body),
    )
    .await;
    assert_eq!(s, 400, "{m}");
    assert_eq!(
        entries(d),
        vec!["keep.txt", "taken"],
        "a part was committed"
    );
    assert_eq!(std::fs::read_to_string(d.join("keep.txt")).unwrap(), "old");
}

/// A `/files` URL signature for a read by the default user (the SDKs' `username` omitted).
fn sign(path: &str, token: &str, exp: Option<i64>) -> String {
    e2b_envd_proto::wire::file_signature(
        path,
        e2b_envd_proto::wire::FileOperation::Read,
        "",
        token,
        exp,
    )
}

#[tokio::test]
async fn signature_max_age_is_enforced_when_configured() {
    let envd = spawn_envd_with(|mut c| {
        c.signature_max_age = Some(Duration::from_secs(60));
        c
    })
    .await;
    let token = envd.access_token().unwrap();
    let f = envd.workdir().join("s.txt");
    std::fs::write(&f, "signed").unwrap();
    let p = f.to_str().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let http = reqwest::Client::new();
    let url = format!("{}/files", envd.url());
    let (s, m) = send(
        http.get(&url)
            .query(&[("path", p), ("signature", &sign(p, &token, None))]),
    )
    .await;
    assert_eq!(s, 401, "{m}");
    assert!(m.contains("without an expiration"), "{m}");
    let far = (now + 3600).to_string();
    let (s, _) = send(http.get(&url).query(&[
        ("path", p),
        ("signature", &sign(p, &token, Some(now + 3600))),
        ("signature_expiration", &far),
    ]))
    .await;
    assert_eq!(s, 401);
    let soon = (now + 30).to_string();
    let (s, m) = send(http.get(&url).query(&[
        ("path", p),
        ("signature", &sign(p, &token, Some(now + 30))),
        ("signature_expiration", &soon),
    ]))
    .await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m, "signed");
}

/// Waits (hang guard only) until `dir` holds an upload temp file (`.e2b-upload-*.part`), or
/// none when `present` is false.
async fn await_part_file(dir: &Path, present: bool) {
    let has_part = |d: &Path| entries(d).iter().any(|e| e.ends_with(".part"));
    let deadline = tokio::time::Instant::now() + GUARD;
    while has_part(dir) != present {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: {:?}",
            if present {
                "the upload never created its temp file"
            } else {
                "the upload's temp file was left behind"
            },
            entries(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The head of a raw upload of `len` bytes to `target`.
fn raw_upload_head(envd: &TestEnvd, target: &Path, len: usize) -> String {
    format!(
        "POST /files?path={} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-access-token: {}\r\ncontent-type: application/octet-stream\r\ncontent-length: {len}\r\n\r\n",
        target.display(),
        envd.access_token().unwrap()
    )
}

/// An upload whose handler is dropped mid-body (the connection closed under it by the idle
/// timeout while the client stalls; or the client going away) leaves no `.part` file.
#[tokio::test]
async fn a_dropped_upload_leaves_no_part_file() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let envd = spawn_envd_with(|mut c| {
        c.idle_timeout = Duration::from_millis(500);
        c
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("big.bin");

    // Stalls mid-body: the daemon's idle timeout drops the connection with the handler in it.
    let mut s = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    s.write_all(raw_upload_head(&envd, &target, 10 << 20).as_bytes())
        .await
        .unwrap();
    s.write_all(&vec![7u8; 1 << 20]).await.unwrap();
    await_part_file(dir.path(), true).await;
    let mut answer = Vec::new();
    tokio::time::timeout(GUARD, s.read_to_end(&mut answer))
        .await
        .expect("the daemon kept a stalled upload open past its idle timeout")
        .ok();
    await_part_file(dir.path(), false).await;
    assert!(!target.exists());

    // Goes away mid-body.
    let mut s = tokio::net::TcpStream::connect(envd.addr()).await.unwrap();
    s.write_all(raw_upload_head(&envd, &target, 10 << 20).as_bytes())
        .await
        .unwrap();
    s.write_all(&vec![7u8; 1 << 20]).await.unwrap();
    await_part_file(dir.path(), true).await;
    drop(s);
    await_part_file(dir.path(), false).await;
    assert!(!target.exists());

    // The daemon still serves uploads.
    let (status, body) = send(
        post(&envd, &[("path", &target.display().to_string())])
            .header("content-type", "application/octet-stream")
            .body("ok"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(std::fs::read(&target).unwrap(), b"ok");
}
