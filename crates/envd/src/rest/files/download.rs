//! `GET /files` and `HEAD /files`: a file streamed from disk, whole, gzip-compressed, or as
//! one or several byte ranges.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::State as AxState;
use futures::StreamExt as _;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::http_range::{
    ByteRange, RangeError, accept_encoding, boundary, content_disposition, if_range_allows,
    multipart_segments, parse_ranges,
};
use super::io::{self as files_io, OpenError, open_regular};
use super::{FilesError, authorize, blocking, resolve};
use crate::state::State;

/// `GET /files` and `HEAD /files`.
pub(super) async fn download(
    AxState(state): AxState<Arc<State>>,
    req: Request<Body>,
) -> Result<Response<Body>, FilesError> {
    let (q, user) = authorize(&state, &req, e2b_envd_proto::wire::FileOperation::Read)?;
    let path = resolve(&state, &user, q.path.as_deref().unwrap_or(""))?;
    let shown = path.clone();
    let (file, meta) = match blocking(move || open_regular(&path)).await? {
        Ok(v) => v,
        Err(OpenError::NotRegular("a directory")) => {
            return Err(FilesError::bad(format!(
                "path '{}' is a directory",
                shown.display()
            )));
        }
        Err(OpenError::NotRegular(kind)) => {
            return Err(FilesError::bad(format!(
                "path '{}' is {kind}, not a regular file: only regular files can be downloaded",
                shown.display()
            )));
        }
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FilesError::new(
                StatusCode::NOT_FOUND,
                format!("path '{}' does not exist", shown.display()),
            ));
        }
        Err(OpenError::Io(e)) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(FilesError::bad(format!(
                "path '{}' is a socket, not a regular file: only regular files can be downloaded",
                shown.display()
            )));
        }
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(FilesError::new(
                StatusCode::FORBIDDEN,
                format!("cannot read '{}': {e}", shown.display()),
            ));
        }
        Err(OpenError::Io(e)) => {
            return Err(FilesError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot open '{}': {e}", shown.display()),
            ));
        }
    };
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
        return Err(FilesError::new(
            StatusCode::NOT_ACCEPTABLE,
            "no acceptable encoding found: this server sends identity or gzip (ranges only with identity)",
        ));
    }
    if use_gzip && range.is_some() && identity_q <= 0.0 {
        return Err(FilesError::new(
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
                let mut err = FilesError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    match e {
                        RangeError::Invalid => format!("invalid range '{r}'"),
                        RangeError::NoOverlap => {
                            format!("range '{r}' does not overlap the file ({size} bytes)")
                        }
                    },
                );
                if e == RangeError::NoOverlap {
                    err = err.with_content_range(format!("bytes */{size}"));
                }
                return Err(err);
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
