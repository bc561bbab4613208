//! `GET /files` (download), `POST /files` (upload) and `POST /files/compose`, as envd serves
//! them (`internal/api/{download,upload,compose}.go`), streamed both ways.
//!
//! Downloads follow Go's `http.ServeContent`, which envd uses: `HEAD` gets GET's status and
//! headers without a body; `Range` with one range gets a 206 with `Content-Range`, with several
//! a 206 `multipart/byteranges` body read range by range from disk; see [`parse_ranges`] for
//! the 416 cases and when the whole file is sent instead.
//!
//! Uploads go to a hidden temporary file in the target's directory (created, chowned to the
//! user, written, given its metadata) that is renamed over the target once complete, so a
//! failed upload leaves no partial file. Watchers see envd's CREATE, CHMOD, WRITE for it (see
//! `filesystem::watch`).

#![allow(clippy::result_large_err)] // handlers return ready-made responses as errors

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State as AxState};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};

use super::files_auth::{self, FilesQuery, Refusal};
use super::files_io::{self, GZIP_ERROR_PREFIX};
use super::json_error;
use crate::filesystem::entry::{METADATA_PREFIX, entry_info};
use crate::filesystem::paths::{self, PathError, make_dirs};
use crate::filesystem::watch::UPLOAD_TMP_PREFIX;
use crate::state::{State, User};

/// The `/files` routes, merged into the REST router.
pub(crate) fn router() -> Router<Arc<State>> {
    Router::new()
        .route("/files", get(download).post(upload))
        .route("/files/compose", post(compose))
}

fn refuse((status, message): Refusal) -> Response<Body> {
    json_error(status, &message)
}

fn query(req_uri: &http::Uri) -> Result<FilesQuery, Response<Body>> {
    match Query::<FilesQuery>::try_from_uri(req_uri) {
        Ok(Query(q)) => Ok(q),
        Err(e) => Err(json_error(
            StatusCode::BAD_REQUEST,
            &format!("invalid query parameters: {e}"),
        )),
    }
}

fn lookup_user(state: &State, name: Option<&str>) -> Result<User, Response<Body>> {
    state.resolve_user(name).map_err(|e| {
        let shown = name
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| state.default_user_name());
        json_error(
            StatusCode::UNAUTHORIZED,
            &format!("error looking up user '{shown}': {e}"),
        )
    })
}

fn resolve(state: &State, user: &User, path: &str) -> Result<PathBuf, Response<Body>> {
    paths::resolve(state, user, path).map_err(|e| match e {
        PathError::Invalid(m) => json_error(StatusCode::BAD_REQUEST, &m),
        PathError::OutsideRoot(m) => json_error(StatusCode::FORBIDDEN, &m),
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response<Body>> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("file task failed: {e}"),
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Download

/// Parsed `Accept-Encoding`: the q-values of gzip and identity.
fn accept_encoding(headers: &HeaderMap) -> (f32, f32) {
    let Some(v) = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
    else {
        return (0.0, 1.0);
    };
    let (mut gzip, mut identity, mut star) = (None, None, None);
    for part in v.split(',') {
        let mut it = part.split(';');
        let coding = it.next().unwrap_or("").trim().to_ascii_lowercase();
        if coding.is_empty() {
            continue;
        }
        let mut q = 1.0f32;
        for p in it {
            if let Some(val) = p
                .trim()
                .strip_prefix("q=")
                .or_else(|| p.trim().strip_prefix("Q="))
            {
                q = val.trim().parse().unwrap_or(0.0);
            }
        }
        match coding.as_str() {
            "gzip" | "x-gzip" => gzip = Some(q),
            "identity" => identity = Some(q),
            "*" => star = Some(q),
            _ => {}
        }
    }
    (
        gzip.or(star).unwrap_or(0.0),
        identity.or(star).unwrap_or(1.0),
    )
}

/// One satisfiable byte range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ByteRange {
    /// First byte.
    start: u64,
    /// Number of bytes (at least 1).
    len: u64,
}

impl ByteRange {
    /// The `Content-Range` value for this range of a file of `size` bytes.
    fn content_range(&self, size: u64) -> String {
        format!("bytes {}-{}/{size}", self.start, self.start + self.len - 1)
    }
}

/// Why a `Range` header cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeError {
    /// Not a `bytes=` range set, or a range in it is malformed (416 without `Content-Range`,
    /// as Go's `http.ServeContent`, which envd uses, answers).
    Invalid,
    /// Well-formed, but no range overlaps the file (416 with `Content-Range: bytes */SIZE`).
    NoOverlap,
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses a `Range` header against a file of `size` bytes, as Go's `http.ServeContent` does
/// (envd serves `GET /files` with it): the unit must be `bytes`, each comma-separated range is
/// `first-last`, `first-` or `-suffix` (empty elements are skipped); a malformed range fails
/// the whole header; ranges starting at or past the end are dropped, and if nothing is left
/// the header does not overlap. `Ok` with no ranges = serve the whole file. Unlike Go, a
/// suffix of zero (`-0`) never overlaps, and a suffix range of an empty file leaves the
/// whole (empty) file to be served: a zero-length part has no valid `Content-Range`.
fn parse_ranges(value: &str, size: u64) -> Result<Vec<ByteRange>, RangeError> {
    let value = value.trim();
    let spec = match value.split_once('=') {
        Some((unit, spec)) if unit.trim().eq_ignore_ascii_case("bytes") => spec,
        _ => return Err(RangeError::Invalid),
    };
    let mut ranges = Vec::new();
    let (mut no_overlap, mut empty_suffix) = (false, false);
    for part in spec.split(',') {
        let part = part.trim_matches([' ', '\t']);
        if part.is_empty() {
            continue;
        }
        let Some((first, last)) = part.split_once('-') else {
            return Err(RangeError::Invalid);
        };
        let (first, last) = (
            first.trim_matches([' ', '\t']),
            last.trim_matches([' ', '\t']),
        );
        if first.is_empty() {
            let n = digits(last).ok_or(RangeError::Invalid)?;
            if n == 0 {
                no_overlap = true;
            } else if size == 0 {
                empty_suffix = true;
            } else {
                let n = n.min(size);
                ranges.push(ByteRange {
                    start: size - n,
                    len: n,
                });
            }
            continue;
        }
        let start = digits(first).ok_or(RangeError::Invalid)?;
        if start >= size {
            no_overlap = true;
            continue;
        }
        let end = if last.is_empty() {
            size - 1
        } else {
            match digits(last) {
                Some(e) if e >= start => e.min(size - 1),
                _ => return Err(RangeError::Invalid),
            }
        };
        ranges.push(ByteRange {
            start,
            len: end - start + 1,
        });
    }
    if ranges.is_empty() && no_overlap && !empty_suffix {
        return Err(RangeError::NoOverlap);
    }
    Ok(ranges)
}

/// Whether an `If-Range` precondition lets the `Range` header apply (Go's `checkIfRange`):
/// no header, or a date equal to the file's `Last-Modified` (to the second). We send no
/// `ETag`, so an entity tag never matches and the whole file is served.
fn if_range_allows(headers: &HeaderMap, modified: Option<SystemTime>) -> bool {
    let Some(v) = headers.get(header::IF_RANGE) else {
        return true;
    };
    let Some(v) = v.to_str().ok().map(str::trim) else {
        return false;
    };
    if v.starts_with('"') || v.starts_with("W/") {
        return false;
    }
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .ok()
    };
    match (httpdate::parse_http_date(v).ok(), modified) {
        (Some(since), Some(m)) => secs(since).is_some() && secs(since) == secs(m),
        _ => false,
    }
}

/// A random `multipart/byteranges` boundary (32 hex digits).
fn boundary() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut out = String::with_capacity(32);
    for i in 0..2u8 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u8(i);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// The body of a `multipart/byteranges` response, as segments produced lazily: for each range,
/// its delimiter and headers (`Content-Range`, `Content-Type`) then its bytes from the file;
/// then the closing delimiter.
fn multipart_segments(
    ranges: Vec<ByteRange>,
    boundary: String,
    mime: String,
    size: u64,
) -> impl Iterator<Item = files_io::Segment> + Send + 'static {
    let closing = files_io::Segment::Literal(Bytes::from(format!("\r\n--{boundary}--\r\n")));
    ranges
        .into_iter()
        .enumerate()
        .flat_map(move |(i, r)| {
            let lead = if i == 0 { "" } else { "\r\n" };
            let head = format!(
                "{lead}--{boundary}\r\nContent-Range: {}\r\nContent-Type: {mime}\r\n\r\n",
                r.content_range(size)
            );
            [
                files_io::Segment::Literal(Bytes::from(head)),
                files_io::Segment::File {
                    offset: r.start,
                    len: r.len,
                },
            ]
        })
        .chain(std::iter::once(closing))
}

fn content_disposition(name: &str) -> HeaderValue {
    let escaped: String = name
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    HeaderValue::from_str(&format!("inline; filename=\"{escaped}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("inline"))
}

async fn download(AxState(state): AxState<Arc<State>>, req: Request<Body>) -> Response<Body> {
    match download_inner(&state, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn download_inner(
    state: &Arc<State>,
    req: Request<Body>,
) -> Result<Response<Body>, Response<Body>> {
    let q = query(req.uri())?;
    files_auth::check(state, req.headers(), &q, "read").map_err(refuse)?;
    let user = lookup_user(state, q.username.as_deref())?;
    let path = resolve(state, &user, q.path.as_deref().unwrap_or(""))?;
    let shown = path.clone();
    let opened = blocking(move || -> io::Result<(File, std::fs::Metadata)> {
        let f = File::open(&path)?;
        let m = f.metadata()?;
        Ok((f, m))
    })
    .await?;
    let (file, meta) = match opened {
        Ok(v) => v,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(json_error(
                StatusCode::NOT_FOUND,
                &format!("path '{}' does not exist", shown.display()),
            ));
        }
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(json_error(
                StatusCode::BAD_REQUEST,
                &format!("path '{}' is a directory", shown.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(json_error(
                StatusCode::FORBIDDEN,
                &format!("cannot read '{}': {e}", shown.display()),
            ));
        }
        Err(e) => {
            return Err(json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot open '{}': {e}", shown.display()),
            ));
        }
    };
    if meta.is_dir() {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            &format!("path '{}' is a directory", shown.display()),
        ));
    }
    let headers = req.headers();
    let size = meta.len();
    let name = crate::filesystem::entry::base_name(&shown);
    let mime = mime_guess::from_path(&shown)
        .first_raw()
        .unwrap_or("application/octet-stream");
    let (gzip_q, identity_q) = accept_encoding(headers);
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // HEAD: the same status and headers as GET (`Content-Length` included), no body and no
    // reader. A gzip body's length is only known once compressed, and the router would announce
    // `Content-Length: 0` for a HEAD without one, so HEAD describes the identity representation
    // (the file's real size) whenever the client accepts it.
    let head = req.method() == Method::HEAD;
    let use_gzip = gzip_q > 0.0
        && (gzip_q > identity_q || (gzip_q >= identity_q && range.is_none()))
        && !(head && identity_q > 0.0);
    if !use_gzip && identity_q <= 0.0 {
        return Err(json_error(
            StatusCode::NOT_ACCEPTABLE,
            "no acceptable encoding found: this server sends identity or gzip (ranges only with identity)",
        ));
    }
    if use_gzip && range.is_some() && identity_q <= 0.0 {
        return Err(json_error(
            StatusCode::NOT_ACCEPTABLE,
            "no acceptable encoding found: a range request needs the identity encoding",
        ));
    }
    let mut resp = Response::new(Body::empty());
    let h = resp.headers_mut();
    h.insert(header::CONTENT_DISPOSITION, content_disposition(&name));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(mime).unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    let modified = meta.modified().ok();
    if let Some(m) = modified
        && let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(m))
    {
        h.insert(header::LAST_MODIFIED, v);
    }
    if use_gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        if !head {
            *resp.body_mut() = Body::from_stream(files_io::gzip_stream(file));
        }
        return Ok(resp);
    }
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // If-Modified-Since is checked before Range (RFC 9110 §13.2.2, and Go's ServeContent).
    if let (Some(m), Some(ims)) = (
        modified,
        headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok()),
    ) && let Ok(ims) = httpdate::parse_http_date(ims)
        && m.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(u64::MAX)
            <= ims
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
    {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        return Ok(resp);
    }
    let ranges = match range.filter(|_| if_range_allows(headers, modified)) {
        None => Vec::new(),
        Some(r) => match parse_ranges(r, size) {
            Ok(ranges) => ranges,
            Err(e) => {
                let mut r = json_error(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    &match e {
                        RangeError::Invalid => format!("invalid range '{r}'"),
                        RangeError::NoOverlap => {
                            format!("range '{r}' does not overlap the file ({size} bytes)")
                        }
                    },
                );
                if e == RangeError::NoOverlap
                    && let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}"))
                {
                    r.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                return Err(r);
            }
        },
    };
    // Ranges adding up to more than the file (overlaps, repeats) are ignored and the whole
    // file is sent, as Go's ServeContent does: cheaper for both sides, and no amplification.
    let total = ranges.iter().try_fold(0u64, |t, r| t.checked_add(r.len));
    let ranges = if total.is_none_or(|t| t > size) {
        Vec::new()
    } else {
        ranges
    };
    let (len, body) = match ranges.as_slice() {
        [] => (
            size,
            (!head).then(|| files_io::read_stream(file, 0, size).boxed()),
        ),
        [r] => {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = HeaderValue::from_str(&r.content_range(size)) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            (
                r.len,
                (!head).then(|| files_io::read_stream(file, r.start, r.len).boxed()),
            )
        }
        _ => {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            let boundary = boundary();
            let longest = ranges.iter().map(|r| r.len).max().unwrap_or(1);
            let segments = |ranges: Vec<ByteRange>| {
                multipart_segments(ranges, boundary.clone(), mime.to_string(), size)
            };
            let len = segments(ranges.clone()).map(|s| s.len()).sum();
            if let Ok(v) =
                HeaderValue::from_str(&format!("multipart/byteranges; boundary={boundary}"))
            {
                resp.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            let chunk = usize::try_from(longest).unwrap_or(usize::MAX);
            (
                len,
                (!head).then(|| files_io::read_segments(file, chunk, segments(ranges)).boxed()),
            )
        }
    };
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Some(body) = body {
        *resp.body_mut() = Body::from_stream(body);
    }
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------
// Upload

/// An upload failure: HTTP status and message.
#[derive(Debug)]
struct UploadError(StatusCode, String);

impl UploadError {
    fn bad(m: impl Into<String>) -> Self {
        Self(StatusCode::BAD_REQUEST, m.into())
    }

    fn io(e: &io::Error, what: &str) -> Self {
        let code = e.raw_os_error();
        if code == Some(libc::ENOSPC) || code == Some(libc::EDQUOT) {
            return Self(
                StatusCode::INSUFFICIENT_STORAGE,
                format!("not enough disk space available: {what}: {e}"),
            );
        }
        if e.kind() == io::ErrorKind::InvalidData && e.to_string().starts_with(GZIP_ERROR_PREFIX) {
            return Self::bad(format!("{e}"));
        }
        if e.to_string().starts_with("reading the request body failed") {
            return Self::bad(format!("{e}"));
        }
        if e.kind() == io::ErrorKind::PermissionDenied {
            return Self(StatusCode::FORBIDDEN, format!("{what}: {e}"));
        }
        Self(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))
    }

    fn response(&self) -> Response<Body> {
        json_error(self.0, &self.1)
    }
}

/// `X-Metadata-<key>: <value>` headers → `(lowercased key, value)`, validated as envd does:
/// printable ASCII, key ≤ 246 bytes, total ≤ 4096 bytes; a repeated header uses its first value.
fn parse_metadata(headers: &HeaderMap) -> Result<Vec<(String, String)>, UploadError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut total = 0usize;
    for name in headers.keys() {
        let Some(key) = name.as_str().strip_prefix("x-metadata-") else {
            continue;
        };
        if out.iter().any(|(k, _)| k == key) {
            continue;
        }
        let Some(value) = headers.get(name) else {
            continue;
        };
        let printable = |b: &[u8]| b.iter().all(|c| (0x20..=0x7e).contains(c));
        if key.is_empty() || !printable(key.as_bytes()) {
            return Err(UploadError::bad(format!(
                "invalid metadata key '{key}': keys must be non-empty printable ASCII"
            )));
        }
        if key.len() > 246 {
            return Err(UploadError::bad(format!(
                "metadata key '{key}' is longer than 246 bytes"
            )));
        }
        if !printable(value.as_bytes()) {
            return Err(UploadError::bad(format!(
                "invalid value for metadata key '{key}': values must be printable ASCII"
            )));
        }
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        total += key.len() + value.len();
        if total > 4096 {
            return Err(UploadError::bad(
                "metadata is larger than 4096 bytes in total",
            ));
        }
        out.push((key.to_string(), value));
    }
    Ok(out)
}

/// One finished upload, as reported in the JSON reply.
#[derive(Debug, serde::Serialize)]
struct Uploaded {
    path: String,
    name: String,
    #[serde(rename = "type")]
    ty: &'static str,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    metadata: HashMap<String, String>,
}

fn temp_name() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{UPLOAD_TMP_PREFIX}{:016x}.part", h.finish())
}

/// Where an upload writes before it is renamed into place.
struct Staged {
    file: File,
    /// The temporary file, or `None` when writing in place (the target is not a regular file,
    /// for example a device or a FIFO).
    temp: Option<PathBuf>,
}

/// Creates the parents, refuses a directory target, creates the temporary file (keeping an
/// existing target's permissions) and chowns it to the user, before any byte is written.
fn stage(state: &State, user: &User, target: &Path) -> Result<Staged, UploadError> {
    let parent = target.parent().unwrap_or(Path::new("/"));
    make_dirs(state, user, parent).map_err(|e| {
        UploadError::bad(format!(
            "error creating directory '{}': {e}",
            parent.display()
        ))
    })?;
    let existing = std::fs::metadata(target).ok();
    if let Some(m) = &existing {
        if m.is_dir() {
            return Err(UploadError::bad(format!(
                "path '{}' is a directory",
                target.display()
            )));
        }
        if !m.is_file() {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(target)
                .map_err(|e| UploadError::io(&e, &format!("cannot open '{}'", target.display())))?;
            return Ok(Staged { file, temp: None });
        }
    }
    let temp = parent.join(temp_name());
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&temp)
        .map_err(|e| {
            UploadError::io(
                &e,
                &format!("cannot create a file in '{}'", parent.display()),
            )
        })?;
    let staged = Staged {
        file,
        temp: Some(temp.clone()),
    };
    let fix = || -> io::Result<()> {
        if let Some(m) = &existing {
            staged
                .file
                .set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        }
        if state.is_root() {
            std::os::unix::fs::fchown(&staged.file, Some(user.uid), Some(user.gid))?;
        }
        Ok(())
    };
    if let Err(e) = fix() {
        let _ = std::fs::remove_file(&temp);
        return Err(UploadError::io(
            &e,
            &format!("cannot set the owner of '{}'", target.display()),
        ));
    }
    Ok(staged)
}

/// Sets the metadata xattrs on the written file and renames it into place.
fn commit(
    temp: Option<&Path>,
    target: &Path,
    metadata: &[(String, String)],
) -> Result<HashMap<String, String>, UploadError> {
    let written = temp.unwrap_or(target);
    let result = (|| {
        if temp.is_none() {
            // Written in place: replace the old metadata. Filesystems without xattrs (sysfs, ...)
            // are fine as long as no metadata was asked for.
            if let Ok(names) = xattr::list_deref(written) {
                for n in names {
                    if n.to_str().is_some_and(|s| s.starts_with(METADATA_PREFIX)) {
                        let _ = xattr::remove_deref(written, &n);
                    }
                }
            }
        }
        for (k, v) in metadata {
            xattr::set_deref(written, format!("{METADATA_PREFIX}{k}"), v.as_bytes()).map_err(
                |e| {
                    UploadError::io(
                        &e,
                        &format!("cannot store metadata on '{}'", target.display()),
                    )
                },
            )?;
        }
        if let Some(t) = temp {
            std::fs::rename(t, target).map_err(|e| {
                UploadError::io(
                    &e,
                    &format!("cannot move the upload to '{}'", target.display()),
                )
            })?;
        }
        Ok(metadata.iter().cloned().collect())
    })();
    if result.is_err()
        && let Some(t) = temp
    {
        let _ = std::fs::remove_file(t);
    }
    result
}

/// Writes one file from `chunks` (create → chown → write → rename).
async fn write_one<S>(
    state: &Arc<State>,
    user: &User,
    target: PathBuf,
    chunks: S,
    metadata: &[(String, String)],
) -> Result<Uploaded, UploadError>
where
    S: Stream<Item = io::Result<Bytes>> + Send,
{
    let (st, u, t) = (state.clone(), user.clone(), target.clone());
    let staged = tokio::task::spawn_blocking(move || stage(&st, &u, &t))
        .await
        .map_err(|e| {
            UploadError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("upload task failed: {e}"),
            )
        })??;
    let temp = staged.temp.clone();
    let cleanup = |temp: &Option<PathBuf>| {
        if let Some(t) = temp {
            let _ = std::fs::remove_file(t);
        }
    };
    let mut sink = files_io::file_sink(staged.file);
    let mut chunks = std::pin::pin!(chunks);
    let mut failure: Option<UploadError> = None;
    while let Some(item) = chunks.next().await {
        match item {
            Ok(chunk) => {
                if sink.write(chunk).await.is_err() {
                    break; // the writer failed; `finish` says why
                }
            }
            Err(e) => {
                failure = Some(UploadError::io(&e, "upload failed"));
                break;
            }
        }
    }
    let written = sink.finish().await;
    if let Some(f) = failure {
        cleanup(&temp);
        return Err(f);
    }
    if let Err(e) = written {
        cleanup(&temp);
        return Err(UploadError::io(
            &e,
            &format!("error writing '{}'", target.display()),
        ));
    }
    let md = metadata.to_vec();
    let t = target.clone();
    let meta = tokio::task::spawn_blocking(move || commit(temp.as_deref(), &t, &md))
        .await
        .map_err(|e| {
            UploadError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("upload task failed: {e}"),
            )
        })??;
    Ok(Uploaded {
        name: crate::filesystem::entry::base_name(&target),
        path: target.to_string_lossy().into_owned(),
        ty: "file",
        metadata: meta,
    })
}

type BodyStream = std::pin::Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

async fn upload(AxState(state): AxState<Arc<State>>, req: Request<Body>) -> Response<Body> {
    match upload_inner(&state, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn upload_inner(
    state: &Arc<State>,
    req: Request<Body>,
) -> Result<Response<Body>, Response<Body>> {
    let q = query(req.uri())?;
    files_auth::check(state, req.headers(), &q, "write").map_err(refuse)?;
    let user = lookup_user(state, q.username.as_deref())?;
    let metadata = parse_metadata(req.headers()).map_err(|e| e.response())?;
    let (parts, body) = req.into_parts();
    let gzip = match parts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
    {
        None => false,
        Some(v) if v.is_empty() || v == "identity" => false,
        Some(v) if v == "gzip" || v == "x-gzip" => true,
        Some(v) => {
            return Err(json_error(
                StatusCode::BAD_REQUEST,
                &format!("unsupported Content-Encoding '{v}': send identity or gzip"),
            ));
        }
    };
    let raw = body
        .into_data_stream()
        .map(|r| r.map_err(|e| io::Error::other(format!("reading the request body failed: {e}"))));
    let stream: BodyStream = if gzip {
        Box::pin(files_io::gunzip(raw))
    } else {
        Box::pin(raw)
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let path_param = q.path.clone().filter(|p| !p.is_empty());
    let mut results: Vec<Uploaded> = Vec::new();
    if mime == "application/octet-stream" {
        let Some(p) = path_param else {
            return Err(json_error(
                StatusCode::BAD_REQUEST,
                "path query parameter is required for raw body upload",
            ));
        };
        let target = resolve(state, &user, &p)?;
        results.push(
            write_one(state, &user, target, stream, &metadata)
                .await
                .map_err(|e| e.response())?,
        );
    } else if mime.starts_with("multipart/") {
        let boundary = multer::parse_boundary(&content_type).map_err(|e| {
            json_error(
                StatusCode::BAD_REQUEST,
                &format!("invalid multipart Content-Type: {e}"),
            )
        })?;
        let mut multipart = multer::Multipart::new(stream, boundary);
        let mut seen = HashSet::new();
        loop {
            let field = match multipart.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(multipart_error(&e)),
            };
            if field.name() != Some("file") {
                continue;
            }
            let Some(p) = path_param
                .clone()
                .or_else(|| field.file_name().map(str::to_string))
                .filter(|p| !p.is_empty())
            else {
                return Err(json_error(
                    StatusCode::BAD_REQUEST,
                    "a 'file' part has no filename and no path parameter was given",
                ));
            };
            let target = resolve(state, &user, &p)?;
            if !seen.insert(target.clone()) {
                return Err(json_error(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "cannot upload the same file twice in one request: '{}'",
                        target.display()
                    ),
                ));
            }
            let chunks = futures::stream::unfold(field, |mut f| async move {
                match f.chunk().await {
                    Ok(Some(c)) => Some((Ok(c), f)),
                    Ok(None) => None,
                    Err(e) => Some((Err(io::Error::other(multipart_message(&e))), f)),
                }
            });
            let done = write_one(state, &user, target, chunks, &metadata)
                .await
                .map_err(|e| e.response())?;
            results.push(done);
        }
        if results.is_empty() {
            return Err(json_error(
                StatusCode::BAD_REQUEST,
                "the multipart body has no part named 'file'",
            ));
        }
    } else {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "unsupported content type '{mime}': use multipart/form-data or application/octet-stream"
            ),
        ));
    }
    let mut resp = Response::new(Body::from(
        serde_json::to_string(&results).unwrap_or_else(|_| "[]".into()),
    ));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn multipart_message(e: &multer::Error) -> String {
    match e {
        multer::Error::StreamReadFailed(inner) => {
            let s = inner.to_string();
            if s.starts_with(GZIP_ERROR_PREFIX) || s.starts_with("reading the request body failed")
            {
                s
            } else {
                format!("reading the request body failed: {s}")
            }
        }
        other => format!("reading the request body failed: invalid multipart body: {other}"),
    }
}

fn multipart_error(e: &multer::Error) -> Response<Body> {
    json_error(StatusCode::BAD_REQUEST, &multipart_message(e))
}

// ---------------------------------------------------------------------------------------------
// Compose

#[derive(Debug, serde::Deserialize)]
struct ComposeBody {
    source_paths: Vec<String>,
    destination: String,
    #[serde(default)]
    username: Option<String>,
}

/// Query parameters of a compose request must not contradict its body: the body says what is
/// read, written and deleted, so a `path` or `username` in the query that names something else
/// is refused rather than silently ignored. Signatures are not accepted for compose.
fn compose_query_agrees(q: &FilesQuery, body: &ComposeBody) -> Result<(), String> {
    if q.signature.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(
            "POST /files/compose does not accept URL signatures (they cover one path, and compose reads and deletes several): send the access token in X-Access-Token".into(),
        );
    }
    if let Some(p) = q.path.as_deref()
        && p != body.destination
    {
        return Err(format!(
            "the query's path '{p}' differs from the body's destination '{}': send one, or the same in both",
            body.destination
        ));
    }
    if let Some(u) = q.username.as_deref()
        && Some(u) != body.username.as_deref()
    {
        return Err(format!(
            "the query's username '{u}' differs from the body's username '{}': send one, or the same in both",
            body.username.as_deref().unwrap_or("")
        ));
    }
    Ok(())
}

/// `POST /files/compose`: concatenates `source_paths` into `destination` (written like an
/// upload, so a failure keeps the original), deletes the sources, returns the entry.
async fn compose(AxState(state): AxState<Arc<State>>, req: Request<Body>) -> Response<Body> {
    match compose_inner(&state, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn compose_inner(
    state: &Arc<State>,
    req: Request<Body>,
) -> Result<Response<Body>, Response<Body>> {
    // The access token was checked before routing (compose is not exempt): a `/files` URL
    // signature covers one path and operation, not the sources compose reads and deletes.
    let q = query(req.uri())?;
    let (parts, body) = req.into_parts();
    let bytes = super::json_body(
        &parts.headers,
        body,
        state.limits().max_json_body_bytes,
        "POST /files/compose",
    )
    .await?;
    let parsed: ComposeBody = serde_json::from_slice(&bytes).map_err(|e| {
        json_error(
            StatusCode::BAD_REQUEST,
            &format!("invalid compose body: {e}"),
        )
    })?;
    compose_query_agrees(&q, &parsed).map_err(|m| json_error(StatusCode::BAD_REQUEST, &m))?;
    if parsed.source_paths.is_empty() {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            "source_paths must not be empty",
        ));
    }
    if parsed.destination.is_empty() {
        return Err(json_error(
            StatusCode::BAD_REQUEST,
            "destination must not be empty",
        ));
    }
    let user = lookup_user(state, parsed.username.as_deref())?;
    let mut sources = Vec::new();
    for s in &parsed.source_paths {
        let p = resolve(state, &user, s)?;
        let meta = std::fs::metadata(&p);
        match meta {
            Ok(m) if m.is_file() => sources.push(p),
            Ok(_) => {
                return Err(json_error(
                    StatusCode::BAD_REQUEST,
                    &format!("source '{}' is not a regular file", p.display()),
                ));
            }
            Err(_) => {
                return Err(json_error(
                    StatusCode::NOT_FOUND,
                    &format!("source '{}' does not exist", p.display()),
                ));
            }
        }
    }
    let destination = resolve(state, &user, &parsed.destination)?;
    let srcs = sources.clone();
    let opened = blocking(move || {
        srcs.iter()
            .map(|p| File::open(p).and_then(|f| f.metadata().map(|m| (f, m.len()))))
            .collect::<io::Result<Vec<_>>>()
    })
    .await?
    .map_err(|e| {
        json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot open a source file: {e}"),
        )
    })?;
    let chunks =
        futures::stream::iter(opened).flat_map(|(f, len)| files_io::read_stream(f, 0, len));
    write_one(state, &user, destination.clone(), chunks, &[])
        .await
        .map_err(|e| e.response())?;
    let dest = destination.clone();
    let entry = blocking(move || {
        for s in &sources {
            if s != &dest {
                let _ = std::fs::remove_file(s);
            }
        }
        entry_info(&dest, &dest)
    })
    .await?
    .map_err(|e| {
        json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot stat '{}': {e}", destination.display()),
        )
    })?;
    let body = serde_json::json!({
        "path": entry.path,
        "name": entry.name,
        "type": if entry.r#type == e2b_envd_proto::filesystem::FileType::Directory as i32 { "directory" } else { "file" },
        "size": entry.size,
        "mode": entry.mode,
        "permissions": entry.permissions,
        "owner": entry.owner,
        "group": entry.group,
    });
    let mut resp = Response::new(Body::from(body.to_string()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, len: u64) -> ByteRange {
        ByteRange { start, len }
    }

    #[test]
    fn ranges() {
        use RangeError::{Invalid, NoOverlap};
        assert_eq!(parse_ranges("bytes=0-9", 100), Ok(vec![r(0, 10)]));
        assert_eq!(parse_ranges("bytes=90-", 100), Ok(vec![r(90, 10)]));
        assert_eq!(parse_ranges("bytes=-10", 100), Ok(vec![r(90, 10)]));
        assert_eq!(parse_ranges("bytes=-200", 100), Ok(vec![r(0, 100)]));
        assert_eq!(parse_ranges("bytes=95-200", 100), Ok(vec![r(95, 5)]));
        assert_eq!(parse_ranges("Bytes = 1-1", 100), Ok(vec![r(1, 1)]));
        assert_eq!(parse_ranges("bytes=100-", 100), Err(NoOverlap));
        assert_eq!(parse_ranges("bytes=-0", 100), Err(NoOverlap));
        assert_eq!(parse_ranges("bytes=0-", 0), Err(NoOverlap));
        // A suffix of an empty file: the whole (empty) file.
        assert_eq!(parse_ranges("bytes=-5", 0), Ok(vec![]));
        assert_eq!(
            parse_ranges("bytes=0-1, 3-4,,-2", 100),
            Ok(vec![r(0, 2), r(3, 2), r(98, 2)])
        );
        // Ranges past the end are dropped; only when none is left is it a failure.
        assert_eq!(parse_ranges("bytes=0-1,200-300", 100), Ok(vec![r(0, 2)]));
        assert_eq!(parse_ranges("bytes=200-300,150-", 100), Err(NoOverlap));
        assert_eq!(parse_ranges("bytes=", 100), Ok(vec![]));
        for bad in [
            "items=0-1",
            "0-1",
            "bytes=5-2",
            "bytes=a-b",
            "bytes=1",
            "bytes=-",
            "bytes=--1",
            "bytes=+1-2",
            "bytes=0-1,x",
        ] {
            assert_eq!(parse_ranges(bad, 100), Err(Invalid), "{bad}");
        }
    }

    #[test]
    fn multipart_body_layout() {
        let segs: Vec<_> = multipart_segments(
            vec![r(0, 2), r(5, 5)],
            "XYZ".into(),
            "text/plain".into(),
            10,
        )
        .collect();
        let lit = |s: &str| files_io::Segment::Literal(Bytes::from(s.to_string()));
        assert_eq!(
            segs,
            vec![
                lit("--XYZ\r\nContent-Range: bytes 0-1/10\r\nContent-Type: text/plain\r\n\r\n"),
                files_io::Segment::File { offset: 0, len: 2 },
                lit("\r\n--XYZ\r\nContent-Range: bytes 5-9/10\r\nContent-Type: text/plain\r\n\r\n"),
                files_io::Segment::File { offset: 5, len: 5 },
                lit("\r\n--XYZ--\r\n"),
            ]
        );
        let b = boundary();
        assert_eq!(b.len(), 32);
        assert_ne!(b, boundary());
    }

    #[test]
    fn if_range() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let mut h = HeaderMap::new();
        assert!(if_range_allows(&h, Some(t)));
        h.insert(
            header::IF_RANGE,
            HeaderValue::from_str(&httpdate::fmt_http_date(t)).unwrap(),
        );
        assert!(if_range_allows(&h, Some(t)));
        assert!(!if_range_allows(
            &h,
            Some(t + std::time::Duration::from_secs(1))
        ));
        h.insert(header::IF_RANGE, HeaderValue::from_static("\"abc\""));
        assert!(!if_range_allows(&h, Some(t)));
    }

    #[test]
    fn encodings() {
        let mut h = HeaderMap::new();
        assert_eq!(accept_encoding(&h), (0.0, 1.0));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, deflate"),
        );
        assert_eq!(accept_encoding(&h), (1.0, 1.0));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0.5, identity;q=0"),
        );
        assert_eq!(accept_encoding(&h), (0.5, 0.0));
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("*;q=0"));
        assert_eq!(accept_encoding(&h), (0.0, 0.0));
    }
}
