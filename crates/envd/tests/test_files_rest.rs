//! `GET/POST /files` and `/files/compose` over plain HTTP: envd's status codes and messages,
//! streaming details, bad input, signatures and root confinement.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read as _, Write as _};
use std::path::Path;

use base64::Engine as _;
use e2b_test_support::{TestEnvd, spawn_envd, spawn_envd_with};
use sha2::Digest as _;

/// A whole `/files` answer, read at once: status, headers and body.
struct Reply {
    status: reqwest::StatusCode,
    headers: reqwest::header::HeaderMap,
    body: bytes::Bytes,
}

impl Reply {
    fn status(&self) -> reqwest::StatusCode {
        self.status
    }
    fn headers(&self) -> &reqwest::header::HeaderMap {
        &self.headers
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn bytes(&self) -> bytes::Bytes {
        self.body.clone()
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Sends a request and reads its whole answer (the one place that awaits and unwraps).
trait Fetch {
    async fn fetch(self) -> Reply;
}

impl Fetch for reqwest::RequestBuilder {
    async fn fetch(self) -> Reply {
        let r = self.send().await.unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        let body = r.bytes().await.unwrap();
        Reply {
            status,
            headers,
            body,
        }
    }
}

struct H {
    envd: TestEnvd,
    http: reqwest::Client,
}

impl H {
    async fn new() -> Self {
        Self {
            envd: spawn_envd().await,
            http: reqwest::Client::new(),
        }
    }
    fn token(&self) -> String {
        self.envd.access_token().unwrap()
    }
    fn get(&self, query: &[(&str, &str)]) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}/files", self.envd.url()))
            .query(query)
            .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, self.token())
    }
    fn post(&self, query: &[(&str, &str)]) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}/files", self.envd.url()))
            .query(query)
            .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, self.token())
    }
    async fn healthy(&self) {
        let r = self
            .http
            .get(format!("{}/health", self.envd.url()))
            .fetch()
            .await;
        assert_eq!(r.status(), 204);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn sign(path: &str, op: &str, user: &str, token: &str, exp: Option<i64>) -> String {
    let mut s = format!("{path}:{op}:{user}:{token}");
    if let Some(e) = exp {
        s.push_str(&format!(":{e}"));
    }
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(s.as_bytes()))
    )
}

#[tokio::test]
async fn download_statuses_and_headers() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("sub/c.txt");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "0123456789").unwrap();
    let fp = f.to_str().unwrap();

    let r = h.get(&[("path", fp)]).fetch().await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-disposition"],
        "inline; filename=\"c.txt\""
    );
    assert_eq!(r.headers()["content-length"], "10");
    assert!(r.headers().contains_key("last-modified"));
    assert_eq!(r.text(), "0123456789");

    let missing = dir.path().join("nope");
    let r = h.get(&[("path", missing.to_str().unwrap())]).fetch().await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    assert_eq!(
        r.text(),
        format!(
            r#"{{"code":404,"message":"path '{}' does not exist"}}"#,
            missing.display()
        )
    );

    let r = h
        .get(&[("path", dir.path().to_str().unwrap())])
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("is a directory"));

    let r = h
        .get(&[("path", fp)])
        .header("range", "bytes=2-4")
        .fetch()
        .await;
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["content-range"], "bytes 2-4/10");
    assert_eq!(r.text(), "234");
    let r = h
        .get(&[("path", fp)])
        .header("range", "bytes=-3")
        .fetch()
        .await;
    assert_eq!(r.text(), "789");
    let r = h
        .get(&[("path", fp)])
        .header("range", "bytes=50-")
        .fetch()
        .await;
    assert_eq!(r.status(), 416);

    // gzip when asked (reqwest here has no automatic decompression).
    let r = h
        .get(&[("path", fp)])
        .header("accept-encoding", "gzip")
        .fetch()
        .await;
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let gz = r.bytes();
    let mut out = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "0123456789");
    let r = h
        .get(&[("path", fp)])
        .header("accept-encoding", "gzip, identity;q=0")
        .header("range", "bytes=0-1")
        .fetch()
        .await;
    assert_eq!(r.status(), 406);
    let r = h
        .get(&[("path", fp)])
        .header("accept-encoding", "br, identity;q=0")
        .fetch()
        .await;
    assert_eq!(r.status(), 406);

    // Wrong token / missing user.
    let r = h
        .http
        .get(format!("{}/files", h.envd.url()))
        .query(&[("path", fp)])
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, "bad")
        .fetch()
        .await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.text(),
        r#"{"code":401,"message":"access token present in header but does not match"}"#
    );
    let r = h
        .get(&[("path", fp), ("username", "no-such-user-xyz")])
        .fetch()
        .await;
    assert_eq!(r.status(), 401);
    assert!(
        r.text()
            .contains("error looking up user 'no-such-user-xyz'")
    );
}

#[tokio::test]
async fn signatures() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.txt");
    std::fs::write(&f, "sig").unwrap();
    let fp = f.to_str().unwrap();
    let url = format!("{}/files", h.envd.url());
    let token = h.token();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;

    let ok = sign(fp, "read", "", &token, None);
    let r = h
        .http
        .get(&url)
        .query(&[("path", fp), ("signature", &ok)])
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    let exp = (now + 60).to_string();
    let ok = sign(fp, "read", "", &token, Some(now + 60));
    let r = h
        .http
        .get(&url)
        .query(&[
            ("path", fp),
            ("signature", &ok),
            ("signature_expiration", &exp),
        ])
        .fetch()
        .await;
    assert_eq!(r.status(), 200);

    let cases = [
        (
            vec![("path", fp.to_string())],
            "missing signature query parameter",
        ),
        (
            vec![("path", fp.to_string()), ("signature", "v1_wrong".into())],
            "invalid signature",
        ),
        (
            vec![
                ("path", fp.to_string()),
                ("signature", sign(fp, "write", "", &token, None)),
            ],
            "invalid signature",
        ),
        (
            vec![
                ("path", fp.to_string()),
                ("signature", sign(fp, "read", "", &token, Some(now - 10))),
                ("signature_expiration", (now - 10).to_string()),
            ],
            "signature is already expired",
        ),
    ];
    for (q, msg) in cases {
        let r = h.http.get(&url).query(&q).fetch().await;
        assert_eq!(r.status(), 401, "{msg}");
        assert_eq!(r.text(), format!(r#"{{"code":401,"message":"{msg}"}}"#));
    }
    // Write with a write signature.
    let w = sign(fp, "write", "", &token, None);
    let r = h
        .http
        .post(&url)
        .query(&[("path", fp), ("signature", &w)])
        .header("content-type", "application/octet-stream")
        .body("new")
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
}

fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "XbOuNdArYx";
    let mut body = Vec::new();
    for (field, filename, data) in parts {
        write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\""
        )
        .unwrap();
        if let Some(f) = filename {
            write!(body, "; filename=\"{f}\"").unwrap();
        }
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    write!(body, "--{boundary}--\r\n").unwrap();
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn uploads() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let a = format!("{d}/x/a.txt");
    let b = format!("{d}/y/b.txt");
    let (ct, body) = multipart(&[
        ("file", Some(&a), b"AAA"),
        ("other", None, b"ignored"),
        ("file", Some(&b), b"BB"),
    ]);
    let r = h
        .post(&[])
        .header("content-type", ct)
        .body(body)
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json();
    assert_eq!(
        v,
        serde_json::json!([{"path": a, "name": "a.txt", "type": "file"}, {"path": b, "name": "b.txt", "type": "file"}])
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "AAA");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&a).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // An existing file keeps its mode when overwritten.
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = h
        .post(&[("path", &a)])
        .header("content-type", "application/octet-stream")
        .body("new")
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        std::fs::metadata(&a).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The `path` parameter wins over the part's file name.
    let (ct, body) = multipart(&[("file", Some("ignored-name"), b"P")]);
    let target = format!("{d}/by-param.txt");
    let r = h
        .post(&[("path", &target)])
        .header("content-type", ct)
        .body(body)
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "P");

    // Errors.
    let r = h
        .post(&[])
        .header("content-type", "application/octet-stream")
        .body("x")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.text(),
        r#"{"code":400,"message":"path query parameter is required for raw body upload"}"#
    );
    let r = h
        .post(&[("path", &a)])
        .header("content-type", "text/plain")
        .body("x")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("unsupported content type"));
    let r = h
        .post(&[("path", d)])
        .header("content-type", "application/octet-stream")
        .body("x")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("is a directory"));
    let dup = format!("{d}/dup.txt");
    let (ct, body) = multipart(&[("file", Some(&dup), b"1"), ("file", Some(&dup), b"2")]);
    let r = h
        .post(&[])
        .header("content-type", ct)
        .body(body)
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("same file twice"));
    let r = h
        .post(&[("path", &a)])
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "br")
        .body("x")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    h.healthy().await;
}

#[tokio::test]
async fn gzip_uploads() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let gz = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    let raw = format!("{d}/raw.txt");
    let r = h
        .post(&[("path", &raw)])
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(gz(b"hello gzip"))
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read_to_string(&raw).unwrap(), "hello gzip");
    // A multipart body compressed as a whole.
    let m = format!("{d}/multi.txt");
    let (ct, body) = multipart(&[("file", Some(&m), b"in multipart")]);
    let r = h
        .post(&[])
        .header("content-type", ct)
        .header("content-encoding", "gzip")
        .body(gz(&body))
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read_to_string(&m).unwrap(), "in multipart");

    // Invalid and truncated gzip: 400, nothing left behind, the old content kept.
    let bad = format!("{d}/bad.txt");
    let r = h
        .post(&[("path", &bad)])
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body("this is not gzip")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("invalid gzip"));
    let mut truncated = gz(&vec![7u8; 200_000]);
    truncated.truncate(truncated.len() / 2);
    let r = h
        .post(&[("path", &raw)])
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(truncated)
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("invalid gzip"));
    assert_eq!(std::fs::read_to_string(&raw).unwrap(), "hello gzip");
    assert_eq!(entries(dir.path()), vec!["multi.txt", "raw.txt"]);
    h.healthy().await;
}

#[tokio::test]
async fn truncated_multipart_leaves_nothing() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let t = format!("{}/t.bin", dir.path().display());
    let (ct, mut body) = multipart(&[("file", Some(&t), &vec![1u8; 300_000])]);
    body.truncate(200_000);
    let r = h
        .post(&[])
        .header("content-type", ct)
        .body(body)
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    let msg = r.text();
    assert!(msg.contains("reading the request body failed"), "{msg}");
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
    // A client that disconnects mid-upload leaves nothing either.
    let addr = h.envd.addr();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /files?path={t} HTTP/1.1\r\nhost: x\r\nx-access-token: {}\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000000\r\n\r\n",
        h.token()
    );
    tokio::io::AsyncWriteExt::write_all(&mut s, head.as_bytes())
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, &[0u8; 4096])
        .await
        .unwrap();
    drop(s);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
    h.healthy().await;
}

#[tokio::test]
async fn metadata_headers() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = format!("{}/m.txt", dir.path().display());
    let r = h
        .post(&[("path", &f)])
        .header("content-type", "application/octet-stream")
        .header("x-metadata-Color", "blue")
        .header("x-metadata-size", "L")
        .body("m")
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json();
    assert_eq!(
        v[0]["metadata"],
        serde_json::json!({"color": "blue", "size": "L"})
    );
    assert_eq!(xattr::get(&f, "user.e2b.color").unwrap().unwrap(), b"blue");
    let long = "k".repeat(247);
    let r = h
        .post(&[("path", &f)])
        .header("content-type", "application/octet-stream")
        .header(format!("x-metadata-{long}"), "v")
        .body("m")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    let big = "v".repeat(3000);
    let r = h
        .post(&[("path", &f)])
        .header("content-type", "application/octet-stream")
        .header("x-metadata-a", &big)
        .header("x-metadata-b", &big)
        .body("m")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    let r = h
        .post(&[("path", &f)])
        .header("content-type", "application/octet-stream")
        .header(
            "x-metadata-a",
            reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        )
        .body("m")
        .fetch()
        .await;
    assert_eq!(r.status(), 400);
    // The failed uploads changed nothing.
    assert_eq!(xattr::get(&f, "user.e2b.color").unwrap().unwrap(), b"blue");
}

#[tokio::test]
async fn compose() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    std::fs::write(format!("{d}/p1"), "hello ").unwrap();
    std::fs::write(format!("{d}/p2"), "world").unwrap();
    let body = serde_json::json!({"source_paths": [format!("{d}/p1"), format!("{d}/p2")], "destination": format!("{d}/out/all.txt")});
    let r = h
        .http
        .post(format!("{}/files/compose", h.envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, h.token())
        .json(&body)
        .fetch()
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json();
    assert_eq!(v["name"], "all.txt");
    assert_eq!(
        std::fs::read_to_string(format!("{d}/out/all.txt")).unwrap(),
        "hello world"
    );
    assert_eq!(entries(dir.path()), vec!["out"]);
    let body = serde_json::json!({"source_paths": [format!("{d}/missing")], "destination": format!("{d}/out/all.txt")});
    let r = h
        .http
        .post(format!("{}/files/compose", h.envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, h.token())
        .json(&body)
        .fetch()
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        std::fs::read_to_string(format!("{d}/out/all.txt")).unwrap(),
        "hello world"
    );
}

#[tokio::test]
async fn root_confinement() {
    let root = tempfile::tempdir().unwrap();
    let rp = root.path().to_path_buf();
    let envd = spawn_envd_with(move |mut c| {
        c.root = Some(rp);
        c
    })
    .await;
    let h = H {
        envd,
        http: reqwest::Client::new(),
    };
    let d = root.path().to_str().unwrap();
    std::fs::write(format!("{d}/in.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("/etc", format!("{d}/escape")).unwrap();
    let r = h.get(&[("path", &format!("{d}/in.txt"))]).fetch().await;
    assert_eq!(r.status(), 200);
    for p in [
        "/etc/passwd".to_string(),
        format!("{d}/../../etc/passwd"),
        format!("{d}/escape/passwd"),
    ] {
        let r = h.get(&[("path", &p)]).fetch().await;
        assert_eq!(r.status(), 403, "{p}");
        assert!(r.text().contains("outside the daemon's root"));
    }
    let outside = tempfile::tempdir().unwrap();
    let target = format!("{}/nope.txt", outside.path().display());
    let r = h
        .post(&[("path", &target)])
        .header("content-type", "application/octet-stream")
        .body("x")
        .fetch()
        .await;
    assert_eq!(r.status(), 403);
    assert!(!Path::new(&target).exists());
    let r = h
        .post(&[("path", &format!("{d}/escape/evil"))])
        .header("content-type", "application/octet-stream")
        .body("x")
        .fetch()
        .await;
    assert_eq!(r.status(), 403);
    // RPCs too.
    let r = h
        .http
        .post(format!("{}/filesystem.Filesystem/Stat", h.envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, h.token())
        .header("content-type", "application/json")
        .body(r#"{"path":"/etc/passwd"}"#)
        .fetch()
        .await;
    assert_eq!(r.status(), 403);
    let v: serde_json::Value = r.json();
    assert_eq!(v["code"], "permission_denied");
    h.healthy().await;
}

#[tokio::test]
async fn no_space_is_507() {
    // Needs root and a tmpfs mount; fails with that message elsewhere.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs", &d])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "missing: a 256 KiB tmpfs mount at {d} (this test fills a small filesystem; it needs root and `mount -t tmpfs`)"
    );
    let h = H::new().await;
    let f = format!("{d}/big.bin");
    let r = h
        .post(&[("path", &f)])
        .header("content-type", "application/octet-stream")
        .body(vec![0u8; 2 << 20])
        .fetch()
        .await;
    let status = r.status();
    let text = r.text();
    let _ = std::process::Command::new("umount").arg(&d).status();
    assert_eq!(status, 507, "{text}");
    assert!(text.contains("not enough disk space"));
}

/// Replacing an existing file through an upload or compose keeps its owner, group and mode
/// (setuid bit included), as envd's in-place write does; a new file belongs to the request's
/// user. Run as root with a file owned by another uid.
#[tokio::test]
async fn replacing_a_file_keeps_its_owner_and_mode() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    assert!(
        nix::unistd::geteuid().is_root(),
        "missing: root (this test gives a file to another uid)"
    );
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (uid, gid, mode) = (12345, 23456, 0o4640);
    let owned = |name: &str| {
        let p = format!("{d}/{name}");
        std::fs::write(&p, "old").unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    let check = |p: &str, content: &str| {
        let m = std::fs::metadata(p).unwrap();
        assert_eq!(std::fs::read_to_string(p).unwrap(), content);
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            // the setuid bit goes: the content is the caller's (docs/security.md)
            (uid, gid, mode & 0o1777),
            "{p}: owner, group or mode changed (mode {:o})",
            m.mode() & 0o7777
        );
    };

    let raw = owned("raw.txt");
    let r = h
        .post(&[("path", &raw)])
        .header("content-type", "application/octet-stream")
        .body("new raw")
        .fetch()
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    check(&raw, "new raw");

    let multi = owned("multi.txt");
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"new multi".to_vec()).file_name("multi.txt"),
    );
    let r = h.post(&[("path", &multi)]).multipart(form).fetch().await;
    assert_eq!(r.status(), 200, "{}", r.text());
    check(&multi, "new multi");

    let composed = owned("composed.txt");
    std::fs::write(format!("{d}/part"), "new composed").unwrap();
    let r = h
        .http
        .post(format!("{}/files/compose", h.envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, h.token())
        .json(&serde_json::json!({"source_paths": [format!("{d}/part")], "destination": composed}))
        .fetch()
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    check(&composed, "new composed");

    // A new file belongs to the request's user (root here), with the default mode.
    let fresh = format!("{d}/fresh.txt");
    let r = h
        .post(&[("path", &fresh)])
        .header("content-type", "application/octet-stream")
        .body("fresh")
        .fetch()
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    let m = std::fs::metadata(&fresh).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
}
