//! `POST /files`: raw (`application/octet-stream`) and multipart uploads, streamed to a
//! temporary file beside the target and renamed into place.
//!
//! Each file goes to a hidden temporary file (`.e2b-upload-<uuid>.part`) in the target's
//! directory: created, chowned to the user, written, fsynced, given its metadata, renamed over
//! the target, and the directory fsynced. A multipart upload writes every part first and renames
//! only once all parts arrived, so a failing part leaves no file of the request behind. The
//! temporary files are removed when the request fails or is dropped (client gone).
//! Only regular files are replaced: a directory, FIFO, device or socket at the target is
//! refused with 400.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State as AxState;
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};

use super::io::{self as files_io, GZIP_ERROR_PREFIX, GzipLimits, LIMIT_ERROR_PREFIX, kind_name};
use super::multipart_guard::{MultipartGuard, MultipartLimits};
use super::{FilesError, authorize, resolve};
use crate::filesystem::entry::METADATA_PREFIX;
use crate::filesystem::paths::make_dirs;
use crate::filesystem::watch::UPLOAD_TMP_PREFIX;
use crate::state::{State, User};

impl FilesError {
    /// Maps an I/O failure while handling `what`: ENOSPC/EDQUOT → 507, a limit → 413, bad
    /// gzip or a failed body read → 400, EACCES → 403, else 500.
    pub(crate) fn io(e: &io::Error, what: &str) -> Self {
        let code = e.raw_os_error();
        let text = e.to_string();
        if code == Some(libc::ENOSPC) || code == Some(libc::EDQUOT) {
            return Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!("not enough disk space available: {what}: {e}"),
            );
        }
        if text.starts_with(LIMIT_ERROR_PREFIX) {
            return Self::new(StatusCode::PAYLOAD_TOO_LARGE, text);
        }
        if (e.kind() == io::ErrorKind::InvalidData && text.starts_with(GZIP_ERROR_PREFIX))
            || text.starts_with("reading the request body failed")
        {
            return Self::bad(text);
        }
        if e.kind() == io::ErrorKind::PermissionDenied {
            return Self::new(StatusCode::FORBIDDEN, format!("{what}: {e}"));
        }
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))
    }
}

/// `X-Metadata-<key>: <value>` headers → `(lowercased key, value)`, validated as envd does:
/// printable ASCII, key ≤ 246 bytes, total ≤ 4096 bytes; a repeated header uses its first value.
fn parse_metadata(headers: &HeaderMap) -> Result<Vec<(String, String)>, FilesError> {
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
            return Err(FilesError::bad(format!(
                "invalid metadata key '{key}': keys must be non-empty printable ASCII"
            )));
        }
        if key.len() > 246 {
            return Err(FilesError::bad(format!(
                "metadata key '{key}' is longer than 246 bytes"
            )));
        }
        if !printable(value.as_bytes()) {
            return Err(FilesError::bad(format!(
                "invalid value for metadata key '{key}': values must be printable ASCII"
            )));
        }
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        total += key.len() + value.len();
        if total > 4096 {
            return Err(FilesError::bad(
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

/// A temporary upload file, removed when dropped unless [`kept`](TempFile::keep).
#[derive(Debug)]
struct TempFile(Option<PathBuf>);

impl TempFile {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    /// The file stays (it was renamed into place).
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A written, fsynced temporary file waiting to be renamed over `target`.
#[derive(Debug)]
struct Written {
    temp: TempFile,
    target: PathBuf,
}

/// Creates the parents, refuses a target that is not a regular file, creates the temporary
/// file and gives it an existing target's owner, group and mode (else chowns it to the user),
/// before any byte is written. Blocking.
fn stage(state: &State, user: &User, target: &Path) -> Result<(File, TempFile), FilesError> {
    let parent = target.parent().unwrap_or(Path::new("/"));
    make_dirs(state, user, parent).map_err(|e| {
        FilesError::bad(format!(
            "error creating directory '{}': {e}",
            parent.display()
        ))
    })?;
    let existing = std::fs::metadata(target).ok();
    if let Some(m) = &existing {
        if m.is_dir() {
            return Err(FilesError::bad(format!(
                "path '{}' is a directory",
                target.display()
            )));
        }
        if !m.is_file() {
            return Err(FilesError::bad(format!(
                "path '{}' is {}, not a regular file: uploads only create or replace regular files",
                target.display(),
                kind_name(m.file_type())
            )));
        }
    }
    let temp = parent.join(format!(
        "{UPLOAD_TMP_PREFIX}{}.part",
        uuid::Uuid::new_v4().simple()
    ));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&temp)
        .map_err(|e| {
            FilesError::io(
                &e,
                &format!("cannot create a file in '{}'", parent.display()),
            )
        })?;
    let guard = TempFile(Some(temp));
    let fix = || -> io::Result<()> {
        match &existing {
            // Replacing a file keeps its owner, group and permission bits, but never the setuid
            // and setgid bits: the new content is the caller's, and a set-id program of another
            // owner with it would hand the caller that owner's rights (a signed URL for one path
            // could plant a set-id-root program). A write by hand clears them the same way.
            Some(m) => {
                match std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid())) {
                    Ok(()) => {}
                    // Not permitted (a daemon that is not root replacing another user's file):
                    // the new file stays the daemon user's.
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) && !state.is_root() => {}
                    Err(e) => return Err(e),
                }
                file.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o1777))?;
            }
            None if state.is_root() => {
                std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid))?;
            }
            None => {}
        }
        Ok(())
    };
    fix().map_err(|e| {
        FilesError::io(
            &e,
            &format!("cannot set the owner of '{}'", target.display()),
        )
    })?;
    Ok((file, guard))
}

/// Writes `chunks` to a new temporary file for `target` and fsyncs it. On failure, or when the
/// future is dropped, the temporary file is removed.
async fn write_temp<S>(
    state: &Arc<State>,
    user: &User,
    target: PathBuf,
    chunks: S,
) -> Result<Written, FilesError>
where
    S: Stream<Item = io::Result<Bytes>> + Send,
{
    let (st, u, t) = (state.clone(), user.clone(), target.clone());
    let (file, temp) = super::blocking(move || stage(&st, &u, &t)).await??;
    let mut sink = files_io::file_sink(file);
    let mut chunks = std::pin::pin!(chunks);
    let mut failure: Option<FilesError> = None;
    while let Some(item) = chunks.next().await {
        match item {
            Ok(chunk) => {
                if sink.write(chunk).await.is_err() {
                    break; // the writer failed; `finish` says why
                }
            }
            Err(e) => {
                failure = Some(FilesError::io(&e, "upload failed"));
                break;
            }
        }
    }
    let written = sink.finish().await;
    if let Some(f) = failure {
        return Err(f);
    }
    written.map_err(|e| FilesError::io(&e, &format!("error writing '{}'", target.display())))?;
    let path = temp.path().to_path_buf();
    super::blocking(move || File::open(&path).and_then(|f| f.sync_all()))
        .await?
        .map_err(|e| FilesError::io(&e, &format!("error writing '{}'", target.display())))?;
    Ok(Written { temp, target })
}

/// Sets the metadata xattrs on each written file, renames it into place and fsyncs its
/// directory. Blocking.
fn commit(files: Vec<Written>, metadata: &[(String, String)]) -> Result<Vec<Uploaded>, FilesError> {
    for w in &files {
        for (k, v) in metadata {
            xattr::set_deref(w.temp.path(), format!("{METADATA_PREFIX}{k}"), v.as_bytes())
                .map_err(|e| {
                    FilesError::io(
                        &e,
                        &format!("cannot store metadata on '{}'", w.target.display()),
                    )
                })?;
        }
    }
    let mut done = Vec::with_capacity(files.len());
    for w in files {
        std::fs::rename(w.temp.path(), &w.target).map_err(|e| {
            FilesError::io(
                &e,
                &format!("cannot move the upload to '{}'", w.target.display()),
            )
        })?;
        w.temp.keep();
        if let Some(dir) = w.target.parent()
            && let Err(e) = File::open(dir).and_then(|d| d.sync_all())
        {
            tracing::debug!(dir = %dir.display(), error = %e, "fsync of an upload's directory failed");
        }
        done.push(Uploaded {
            name: crate::filesystem::entry::base_name(&w.target),
            path: w.target.to_string_lossy().into_owned(),
            ty: "file",
            metadata: metadata.iter().cloned().collect(),
        });
    }
    Ok(done)
}

/// Writes one file from `chunks` and renames it into place, as an upload without metadata
/// (compose's destination).
pub(super) async fn write_file<S>(
    state: &Arc<State>,
    user: &User,
    target: PathBuf,
    chunks: S,
) -> Result<(), FilesError>
where
    S: Stream<Item = io::Result<Bytes>> + Send,
{
    let w = write_temp(state, user, target, chunks).await?;
    super::blocking(move || commit(vec![w], &[])).await??;
    Ok(())
}

type BodyStream = std::pin::Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// `POST /files`.
pub(super) async fn upload(
    AxState(state): AxState<Arc<State>>,
    req: Request<Body>,
) -> Result<Response<Body>, FilesError> {
    let (q, user) = authorize(&state, &req, e2b_envd_proto::wire::FileOperation::Write)?;
    let metadata = parse_metadata(req.headers())?;
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
            return Err(FilesError::bad(format!(
                "unsupported Content-Encoding '{v}': send identity or gzip"
            )));
        }
    };
    let limits = state.limits();
    let raw = body
        .into_data_stream()
        .map(|r| r.map_err(|e| io::Error::other(format!("reading the request body failed: {e}"))));
    let stream: BodyStream = if gzip {
        Box::pin(files_io::gunzip(
            raw,
            GzipLimits::new(limits.max_decompressed_bytes, limits.max_gzip_ratio),
        ))
    } else {
        Box::pin(raw)
    };
    let content_type = crate::rest::content_type(&parts.headers).to_string();
    let mime = super::super::media_type(&parts.headers);
    let path_param = q.path.clone().filter(|p| !p.is_empty());
    let mut written: Vec<Written> = Vec::new();
    if mime == "application/octet-stream" {
        let Some(p) = path_param else {
            return Err(FilesError::bad(
                "path query parameter is required for raw body upload",
            ));
        };
        let target = resolve(&state, &user, &p)?;
        written.push(write_temp(&state, &user, target, stream).await?);
    } else if mime.starts_with("multipart/") {
        let boundary = multer::parse_boundary(&content_type)
            .map_err(|e| FilesError::bad(format!("invalid multipart Content-Type: {e}")))?;
        let guarded = MultipartGuard::new(
            stream,
            &boundary,
            MultipartLimits {
                max_header_bytes: limits.max_multipart_header_bytes,
                max_parts: limits.max_multipart_parts,
            },
        );
        let mut multipart = multer::Multipart::new(guarded, boundary);
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
                return Err(FilesError::bad(
                    "a 'file' part has no filename and no path parameter was given",
                ));
            };
            let target = resolve(&state, &user, &p)?;
            if !seen.insert(target.clone()) {
                return Err(FilesError::bad(format!(
                    "cannot upload the same file twice in one request: '{}'",
                    target.display()
                )));
            }
            let chunks = futures::stream::unfold(field, |mut f| async move {
                match f.chunk().await {
                    Ok(Some(c)) => Some((Ok(c), f)),
                    Ok(None) => None,
                    Err(e) => Some((Err(io::Error::other(multipart_message(&e))), f)),
                }
            });
            written.push(write_temp(&state, &user, target, chunks).await?);
        }
        if written.is_empty() {
            return Err(FilesError::bad(
                "the multipart body has no part named 'file'",
            ));
        }
    } else {
        return Err(FilesError::bad(format!(
            "unsupported content type '{mime}': use multipart/form-data or application/octet-stream"
        )));
    }
    let results = super::blocking(move || commit(written, &metadata)).await??;
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
            if s.starts_with(GZIP_ERROR_PREFIX)
                || s.starts_with(LIMIT_ERROR_PREFIX)
                || s.starts_with("reading the request body failed")
            {
                s
            } else {
                format!("reading the request body failed: {s}")
            }
        }
        other => format!("reading the request body failed: invalid multipart body: {other}"),
    }
}

fn multipart_error(e: &multer::Error) -> FilesError {
    let m = multipart_message(e);
    if m.starts_with(LIMIT_ERROR_PREFIX) {
        FilesError::new(StatusCode::PAYLOAD_TOO_LARGE, m)
    } else {
        FilesError::bad(m)
    }
}
