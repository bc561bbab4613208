//! `HEAD /files` and multi-range `GET /files` against the real daemon on a loopback port, as
//! envd serves them through Go's `http.ServeContent`: same headers for HEAD and GET, no body on
//! HEAD; `multipart/byteranges` for several ranges; 416 for unsatisfiable or malformed ranges;
//! the whole file when the ranges add up to more than the file; and a download that fails
//! rather than sending misplaced bytes when the file shrinks under it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use e2b_test_support::{TestEnvd, spawn_envd};
use reqwest::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

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

    fn req(&self, method: Method, path: &Path) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/files", self.envd.url()))
            .query(&[("path", path.to_str().unwrap())])
            .header(
                e2b_envd_proto::wire::headers::ACCESS_TOKEN,
                self.envd.access_token().unwrap(),
            )
    }

    async fn get_range(&self, path: &Path, range: &str) -> reqwest::Response {
        self.req(Method::GET, path)
            .header("range", range)
            .send()
            .await
            .unwrap()
    }

    /// Sends a raw HTTP/1.1 request and returns everything the server sent until it closed
    /// the connection, so a HEAD response can be checked to carry no body bytes at all.
    async fn raw(&self, method: &str, path: &Path, extra: &str) -> Vec<u8> {
        let mut s = tokio::net::TcpStream::connect(self.envd.addr())
            .await
            .unwrap();
        let q = path.to_str().unwrap().replace('/', "%2F");
        let req = format!(
            "{method} /files?path={q} HTTP/1.1\r\nHost: localhost\r\nX-Access-Token: {}\r\n\
             {extra}Connection: close\r\n\r\n",
            self.envd.access_token().unwrap()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(std::time::Duration::from_secs(30), s.read_to_end(&mut out))
            .await
            .expect("the server closes the connection after the response")
            .unwrap();
        out
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect()
}

/// The headers a HEAD and a GET must agree on (and `Content-Type`, whose multipart boundary
/// is random per response).
const SAME: [&str; 6] = [
    "content-length",
    "content-disposition",
    "content-range",
    "accept-ranges",
    "last-modified",
    "vary",
];

/// A parsed `multipart/byteranges` part: its headers (lowercased names) and body.
#[derive(Debug)]
struct Part {
    content_range: String,
    content_type: String,
    body: Vec<u8>,
}

/// Parses a `multipart/byteranges` body strictly: `--B` CRLF, headers, CRLF, data, then
/// CRLF `--B` for the next part or CRLF `--B--` CRLF at the end, with nothing after it.
fn parse_multipart(body: &[u8], boundary: &str) -> Vec<Part> {
    let delim = format!("--{boundary}");
    let next = format!("\r\n--{boundary}");
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    assert!(body.starts_with(delim.as_bytes()), "no opening delimiter");
    let mut rest = &body[delim.len()..];
    let mut parts = Vec::new();
    loop {
        if rest == b"--\r\n" {
            return parts;
        }
        assert!(rest.starts_with(b"\r\n"), "delimiter not followed by CRLF");
        rest = &rest[2..];
        let end = find(rest, b"\r\n\r\n").expect("end of part headers");
        let headers = std::str::from_utf8(&rest[..end]).unwrap();
        let (mut content_range, mut content_type) = (String::new(), String::new());
        for line in headers.split("\r\n") {
            let (k, v) = line.split_once(':').unwrap();
            match k.trim().to_ascii_lowercase().as_str() {
                "content-range" => content_range = v.trim().to_string(),
                "content-type" => content_type = v.trim().to_string(),
                other => panic!("unexpected part header {other}"),
            }
        }
        rest = &rest[end + 4..];
        let stop = find(rest, next.as_bytes()).expect("next delimiter");
        parts.push(Part {
            content_range,
            content_type,
            body: rest[..stop].to_vec(),
        });
        rest = &rest[stop + next.len()..];
    }
}

fn boundary_of(resp: &reqwest::Response) -> String {
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    ct.strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("content type {ct}"))
        .to_string()
}

#[tokio::test]
async fn head_has_get_headers_and_no_body() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("notes.txt");
    let data = pattern(3 * 1024 * 1024 + 17);
    std::fs::write(&f, &data).unwrap();

    for range in [
        None,
        Some("bytes=5-9"),
        Some("bytes=-4"),
        Some("bytes=0-1,10-19"),
    ] {
        let with = |b: reqwest::RequestBuilder| match range {
            Some(r) => b.header("range", r),
            None => b,
        };
        let get = with(h.req(Method::GET, &f)).send().await.unwrap();
        let head = with(h.req(Method::HEAD, &f)).send().await.unwrap();
        assert_eq!(head.status(), get.status(), "{range:?}");
        for name in SAME {
            assert_eq!(
                head.headers().get(name),
                get.headers().get(name),
                "{name} for {range:?}"
            );
        }
        // Multipart boundaries are random per response; the rest of the type must agree.
        let (gt, ht) = (
            get.headers()["content-type"].to_str().unwrap().to_string(),
            head.headers()["content-type"].to_str().unwrap().to_string(),
        );
        assert_eq!(gt.split(';').next(), ht.split(';').next());
        let got = get.bytes().await.unwrap();
        assert_eq!(
            head.headers()["content-length"].to_str().unwrap(),
            got.len().to_string(),
            "HEAD's Content-Length is the GET body's length for {range:?}"
        );
    }

    // On the wire: headers, then nothing, though the file is 3 MiB.
    let raw = h.raw("HEAD", &f, "").await;
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains(&format!("\r\ncontent-length: {}\r\n", data.len())),
        "{text}"
    );
    assert!(
        text.ends_with("\r\n\r\n"),
        "a HEAD response carries no body"
    );
    let raw = h.raw("HEAD", &f, "Range: bytes=0-0,2-2\r\n").await;
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.starts_with("HTTP/1.1 206 Partial Content\r\n"),
        "{text}"
    );
    assert!(
        text.ends_with("\r\n\r\n"),
        "a HEAD response carries no body"
    );

    // A client that accepts gzip learns the file's size from HEAD: HEAD describes the identity
    // representation (a gzip body's length is not known before compressing it).
    let r = h
        .req(Method::HEAD, &f)
        .header("accept-encoding", "gzip, deflate")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(r.headers()["content-length"], data.len().to_string());

    // Errors are the same statuses as GET's, without a body.
    let missing = dir.path().join("missing");
    let r = h.req(Method::HEAD, &missing).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.bytes().await.unwrap().is_empty());
    let r = h.req(Method::HEAD, dir.path()).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let r = h
        .req(Method::HEAD, &f)
        .header("range", "bytes=9999999-")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes */{}", data.len())
    );
    // Without the token, HEAD is refused like GET.
    let r = h
        .http
        .head(format!("{}/files", h.envd.url()))
        .query(&[("path", f.to_str().unwrap())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn several_ranges_are_multipart_byteranges() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("ten.txt");
    std::fs::write(&small, "0123456789").unwrap();

    let r = h.get_range(&small, "bytes=0-1,5-9").await;
    assert_eq!(r.status(), 206);
    assert!(r.headers().get("content-range").is_none());
    assert_eq!(r.headers()["accept-ranges"], "bytes");
    let boundary = boundary_of(&r);
    assert!(!boundary.is_empty());
    let len: usize = r.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = r.bytes().await.unwrap();
    assert_eq!(body.len(), len);
    let parts = parse_multipart(&body, &boundary);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].content_range, "bytes 0-1/10");
    assert_eq!(parts[0].content_type, "text/plain");
    assert_eq!(parts[0].body, b"01");
    assert_eq!(parts[1].content_range, "bytes 5-9/10");
    assert_eq!(parts[1].body, b"56789");

    // Suffix and open ranges mixed in, out of order, spaces and empty elements, a range past
    // the end dropped; overlapping ranges (8-9 is in 4-9) are served as asked as long as they
    // add up to no more than the file (here exactly 10 bytes).
    let r = h.get_range(&small, "bytes= -2 , 4-, ,100-200, 1-2").await;
    assert_eq!(r.status(), 206);
    let boundary = boundary_of(&r);
    let parts = parse_multipart(&r.bytes().await.unwrap(), &boundary);
    let got: Vec<(&str, &[u8])> = parts
        .iter()
        .map(|p| (p.content_range.as_str(), p.body.as_slice()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("bytes 8-9/10", &b"89"[..]),
            ("bytes 4-9/10", &b"456789"[..]),
            ("bytes 1-2/10", &b"12"[..]),
        ]
    );

    // A large file: parts that cross the daemon's 1 MiB read chunks, read from disk.
    let big = dir.path().join("big.bin");
    let data = pattern(5 * 1024 * 1024 + 3);
    std::fs::write(&big, &data).unwrap();
    let mib = 1024 * 1024;
    let asked = [(10, 20), (mib - 5, 2 * mib + 5), (3 * mib, 4 * mib - 1)];
    let spec = asked
        .iter()
        .map(|(a, b)| format!("{a}-{b}"))
        .collect::<Vec<_>>()
        .join(",");
    let r = h.get_range(&big, &format!("bytes={spec},-7")).await;
    assert_eq!(r.status(), 206);
    let boundary = boundary_of(&r);
    let parts = parse_multipart(&r.bytes().await.unwrap(), &boundary);
    assert_eq!(parts.len(), 4);
    let n = data.len();
    for (p, (a, b)) in parts
        .iter()
        .zip(asked.iter().copied().chain([(n - 7, n - 1)]))
    {
        assert_eq!(p.content_range, format!("bytes {a}-{b}/{n}"));
        assert_eq!(p.content_type, "application/octet-stream");
        assert!(p.body == data[a..=b], "bytes {a}-{b}");
    }
}

#[tokio::test]
async fn single_suffix_and_open_ranges_stay_single_part() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("ten.txt");
    std::fs::write(&f, "0123456789").unwrap();
    for (range, content_range, body) in [
        ("bytes=2-4", "bytes 2-4/10", "234"),
        ("bytes=-3", "bytes 7-9/10", "789"),
        ("bytes=-30", "bytes 0-9/10", "0123456789"),
        ("bytes=6-", "bytes 6-9/10", "6789"),
        ("bytes=8-100", "bytes 8-9/10", "89"),
        // One satisfiable range among ones past the end is a single-part response.
        ("bytes=50-60,1-1", "bytes 1-1/10", "1"),
    ] {
        let r = h.get_range(&f, range).await;
        assert_eq!(r.status(), 206, "{range}");
        assert_eq!(r.headers()["content-range"], content_range, "{range}");
        assert_eq!(r.headers()["content-type"], "text/plain", "{range}");
        assert_eq!(r.headers()["content-length"], body.len().to_string());
        assert_eq!(r.text().await.unwrap(), body, "{range}");
    }
}

#[tokio::test]
async fn unsatisfiable_invalid_and_excessive_ranges() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("ten.txt");
    std::fs::write(&f, "0123456789").unwrap();

    // Nothing overlaps: 416 with the size.
    for range in [
        "bytes=10-",
        "bytes=100-200,300-",
        "bytes=-0",
        "bytes=10-20,-0",
    ] {
        let r = h.get_range(&f, range).await;
        assert_eq!(r.status(), 416, "{range}");
        assert_eq!(r.headers()["content-range"], "bytes */10", "{range}");
        let body = r.text().await.unwrap();
        assert!(body.contains("\"code\":416"), "{body}");
    }
    // Malformed: 416 without Content-Range (Go's ServeContent answers the same).
    for range in [
        "bytes=5-2",
        "bytes=1",
        "items=0-1",
        "bytes=0-1,x",
        "bytes=a-",
    ] {
        let r = h.get_range(&f, range).await;
        assert_eq!(r.status(), 416, "{range}");
        assert!(r.headers().get("content-range").is_none(), "{range}");
    }
    // Ranges adding up to more than the file: the whole file, 200, no multipart.
    for range in ["bytes=0-7,2-9", "bytes=0-,0-", "bytes=-10,-1"] {
        let r = h.get_range(&f, range).await;
        assert_eq!(r.status(), 200, "{range}");
        assert!(r.headers().get("content-range").is_none());
        assert_eq!(r.headers()["content-type"], "text/plain");
        assert_eq!(r.text().await.unwrap(), "0123456789");
    }
    // An empty file: a suffix range gets the (empty) file, a start range cannot overlap.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let r = h.get_range(&empty, "bytes=-5").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], "0");
    let r = h.get_range(&empty, "bytes=0-").await;
    assert_eq!(r.status(), 416);
    assert_eq!(r.headers()["content-range"], "bytes */0");
}

#[tokio::test]
async fn if_range_and_if_modified_since() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("ten.txt");
    std::fs::write(&f, "0123456789").unwrap();
    let r = h.req(Method::GET, &f).send().await.unwrap();
    let last_modified = r.headers()["last-modified"].to_str().unwrap().to_string();

    let ranged = |if_range: &str| {
        h.req(Method::GET, &f)
            .header("range", "bytes=0-1,4-4")
            .header("if-range", if_range.to_string())
            .send()
    };
    // The file is unchanged since that date: the ranges apply.
    let r = ranged(&last_modified).await.unwrap();
    assert_eq!(r.status(), 206);
    // Another date, or an entity tag (we send none): the whole file.
    let r = ranged("Mon, 01 Jan 2001 00:00:00 GMT").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "0123456789");
    let r = ranged("\"some-etag\"").await.unwrap();
    assert_eq!(r.status(), 200);

    // If-Modified-Since is evaluated before Range.
    let r = h
        .req(Method::GET, &f)
        .header("range", "bytes=0-1")
        .header("if-modified-since", &last_modified)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
}

#[tokio::test]
async fn multipart_download_fails_when_the_file_shrinks() {
    let h = H::new().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("shrinks.bin");
    let size = 64 * 1024 * 1024;
    let data = pattern(size);
    std::fs::write(&f, &data).unwrap();

    // The second part is 60 MiB: more than the socket buffers, the daemon's read-ahead and
    // hyper's queue together, so the daemon is still reading it when the file shrinks.
    let r = h.get_range(&f, "bytes=0-9,1000-60000000").await;
    assert_eq!(r.status(), 206);
    let declared: usize = r.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let boundary = boundary_of(&r);
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(1024 * 1024)
        .unwrap();
    let mut r = r;
    let mut got = Vec::new();
    let failed = loop {
        match r.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(
        failed,
        "the body ended cleanly at {} of {declared} bytes",
        got.len()
    );
    assert!(got.len() < declared);
    // What did arrive is a correct prefix: the first part, then the second part's bytes.
    let head = format!("--{boundary}\r\nContent-Range: bytes 0-9/{size}\r\n");
    assert!(got.starts_with(head.as_bytes()));
    let second = format!("\r\n--{boundary}\r\nContent-Range: bytes 1000-60000000/{size}\r\n");
    let at = got
        .windows(second.len())
        .position(|w| w == second.as_bytes())
        .unwrap();
    let start = at + got[at..].windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let prefix = &got[start..];
    assert!(prefix == &data[1000..1000 + prefix.len()]);
    h.envd.shutdown().await;
}
