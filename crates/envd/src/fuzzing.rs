//! Entry points for the fuzz targets in `crates/envd/fuzz` (and their regression tests).
//!
//! **Unstable, not part of the public API**: hidden from the docs, changed without notice. Each
//! function feeds arbitrary bytes to one of the daemon's real parsers and checks the properties
//! that must hold for any input; a violated property panics, which is what the fuzzer reports.
//! Errors from the parsers are expected outcomes, not failures.

#![allow(clippy::panic, missing_docs)]

use std::path::{Component, Path};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use e2b_envd_proto::filesystem::{ListDirRequest, MakeDirRequest, MoveRequest, StatRequest};
use e2b_envd_proto::process::{
    ConnectRequest, SendInputRequest, SendSignalRequest, StartRequest, UpdateRequest,
};

use crate::connect::{Codec, ConnectMessage, parse_single_envelope};
pub use crate::rest::files::multipart_guard::{MultipartGuard, MultipartLimits, MultipartScanner};

/// Decodes `data` as every request message the Connect router accepts, in `codec`.
fn decode_all(codec: Codec, data: &[u8]) {
    fn one<T: ConnectMessage + PartialEq>(codec: Codec, data: &[u8]) {
        if let Ok(msg) = codec.decode::<T>(data) {
            // Whatever decodes re-encodes, and the re-encoding decodes to the same message.
            let again = codec
                .encode(&msg)
                .unwrap_or_else(|e| panic!("a decoded message failed to encode: {e}"));
            let back = codec
                .decode::<T>(&again)
                .unwrap_or_else(|e| panic!("a re-encoded message failed to decode: {e}"));
            assert!(back == msg, "decode(encode(m)) != m");
        }
    }
    one::<StartRequest>(codec, data);
    one::<ConnectRequest>(codec, data);
    one::<SendInputRequest>(codec, data);
    one::<SendSignalRequest>(codec, data);
    one::<UpdateRequest>(codec, data);
    one::<StatRequest>(codec, data);
    one::<ListDirRequest>(codec, data);
    one::<MakeDirRequest>(codec, data);
    one::<MoveRequest>(codec, data);
}

/// A Connect streaming request body: one envelope, then its message as JSON and as protobuf.
pub fn connect_envelope(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    if let Ok(msg) = parse_single_envelope(&body, 1 << 20) {
        assert!(
            msg.len() + 5 <= data.len(),
            "the message is longer than the body"
        );
        decode_all(Codec::Json, &msg);
        decode_all(Codec::Proto, &msg);
    }
}

/// A Connect unary JSON request body, decoded as each request message.
pub fn connect_json(data: &[u8]) {
    decode_all(Codec::Json, data);
}

/// `Range`, `Accept-Encoding` and `If-Range` of `GET /files`. The first 8 bytes are the file
/// size, the rest the header value.
pub fn files_range(data: &[u8]) {
    use crate::rest::files::http_range::{accept_encoding, if_range_allows, parse_ranges};
    if data.len() < 8 {
        return;
    }
    let mut size_bytes = [0u8; 8];
    size_bytes.copy_from_slice(&data[..8]);
    let size = u64::from_le_bytes(size_bytes) % (1 << 50);
    let Ok(value) = std::str::from_utf8(&data[8..]) else {
        return;
    };
    if let Ok(ranges) = parse_ranges(value, size) {
        for r in &ranges {
            assert!(r.len >= 1, "an empty range");
            assert!(
                r.start.checked_add(r.len).is_some_and(|end| end <= size),
                "range {}+{} past the end of a {size}-byte file",
                r.start,
                r.len
            );
            let _ = r.content_range(size);
        }
    }
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(value) {
        headers.insert(http::header::ACCEPT_ENCODING, v.clone());
        headers.insert(http::header::IF_RANGE, v);
    }
    let (gzip, identity) = accept_encoding(&headers);
    assert!(
        (0.0..=1.0).contains(&gzip),
        "gzip q-value {gzip} outside 0..=1"
    );
    assert!(
        (0.0..=1.0).contains(&identity),
        "identity q-value {identity} outside 0..=1"
    );
    let _ = if_range_allows(&headers, Some(std::time::SystemTime::UNIX_EPOCH));
}

/// A multipart upload body: the scanner's limits hold whatever the chunking, and `multer`
/// behind a [`MultipartGuard`] parses the body (or fails) without panicking. The first byte
/// picks the chunk size.
pub fn multipart(data: &[u8]) {
    let Some((&chunk, body)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let limits = MultipartLimits {
        max_header_bytes: 256,
        max_parts: 8,
    };
    let boundary = "fuzzboundary";
    let mut scanner = MultipartScanner::new(boundary, limits);
    let mut whole = Ok(());
    for c in body.chunks(chunk) {
        whole = scanner.feed(c);
        if whole.is_err() {
            break;
        }
    }
    if whole.is_ok() {
        assert!(scanner.parts() <= limits.max_parts);
    }
    let pieces: Vec<std::io::Result<Bytes>> = body
        .chunks(chunk)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let guarded = MultipartGuard::new(futures::stream::iter(pieces), boundary, limits);
    futures::executor::block_on(async move {
        let mut mp = multer::Multipart::new(guarded, boundary);
        let mut fields = 0usize;
        while let Ok(Some(mut field)) = mp.next_field().await {
            fields += 1;
            assert!(fields <= limits.max_parts, "more fields than max_parts");
            while let Ok(Some(_)) = field.chunk().await {}
        }
    });
}

fn fuzz_state() -> &'static Arc<crate::state::State> {
    static STATE: OnceLock<Arc<crate::state::State>> = OnceLock::new();
    STATE.get_or_init(|| crate::state::State::new(&crate::EnvdConfig::default()))
}

/// envd's path expansion (`~`, relative to the home, lexical cleaning) and the root check.
pub fn resolve_path(data: &[u8]) {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let state = fuzz_state();
    let user = state.current_user().clone();
    if let Ok(p) = state.resolve_path(&user, path) {
        if !path.is_empty() {
            assert!(
                p.is_absolute(),
                "'{path}' resolved to a relative path {p:?}"
            );
        }
        assert!(
            !p.components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir)),
            "'{path}' resolved to an uncleaned path {p:?}"
        );
        assert!(
            crate::state::clean(&p) == p,
            "cleaning is not idempotent for {p:?}"
        );
        let root = Path::new("/srv/root");
        if crate::filesystem::paths::confine(Some(root), &p).is_ok() {
            let real = crate::filesystem::paths::real_path(&p);
            assert!(
                real.starts_with(root),
                "'{path}' passed the root check but resolves to {real:?}"
            );
        }
    }
}

fn fuzz_runtime() -> &'static (tokio::runtime::Runtime, crate::LocalService) {
    static DAEMON: OnceLock<(tokio::runtime::Runtime, crate::LocalService)> = OnceLock::new();
    DAEMON.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build a runtime: {e}"));
        let handle = rt
            .block_on(crate::Envd::start(crate::EnvdConfig::ephemeral()))
            .unwrap_or_else(|e| panic!("cannot start the daemon: {e}"));
        let local = handle.local_service();
        // The daemon lives as long as the fuzzing process.
        std::mem::forget(handle);
        (rt, local)
    })
}

/// A gRPC-Web request body for `Process/List` and `Filesystem/Stat`, through the real
/// in-process daemon (tonic-web's decoder, then the services): it must answer, never hang or
/// panic. The first byte picks the procedure and content type.
pub fn grpc_web(data: &[u8]) {
    use tower::ServiceExt as _;
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (rt, local) = fuzz_runtime();
    let path = if pick & 1 == 0 {
        "/process.Process/List"
    } else {
        "/filesystem.Filesystem/Stat"
    };
    let ct = if pick & 2 == 0 {
        "application/grpc-web+proto"
    } else {
        "application/grpc-web-text+proto"
    };
    let req = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, ct)
        .body(axum::body::Body::from(body.to_vec()))
        .unwrap_or_else(|e| panic!("cannot build a request: {e}"));
    let local = local.clone();
    rt.block_on(async move {
        let resp = tokio::time::timeout(std::time::Duration::from_secs(10), local.oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("the gRPC-Web call hung"));
        let Ok(resp) = resp;
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            axum::body::to_bytes(resp.into_body(), 1 << 24),
        )
        .await
        .unwrap_or_else(|_| panic!("the gRPC-Web response body hung"));
    });
}
