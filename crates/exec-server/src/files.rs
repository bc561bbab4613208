//! `upload_file` / `download_file`: strict base64, chunks, offsets, sha256, DeepAgents' literals.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::collections::HashMap;

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::backend::SandboxBackend;
use crate::error::{FileError, FileErrorKind};

/// Arguments of `upload_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UploadArgs {
    /// Absolute path of the file in the sandbox. Parent directories are created.
    pub(crate) path: String,
    /// The bytes, standard base64 with padding and no line breaks.
    pub(crate) content_base64: String,
    /// For a chunked upload: where this chunk starts (0 for the first chunk). Chunks must come
    /// in order, each starting where the previous one ended.
    #[serde(default)]
    pub(crate) offset: Option<u64>,
    /// For a chunked upload: the whole file's size, on every chunk. Chunks are staged next to
    /// the destination and published with one atomic rename when the last byte arrives; the
    /// destination is untouched until then. Absent: this call carries the whole file.
    #[serde(default)]
    pub(crate) total_size: Option<u64>,
    /// Append to the end of the file instead (created when missing); the result is published
    /// atomically.
    #[serde(default)]
    pub(crate) append: Option<bool>,
}

/// Arguments of `download_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DownloadArgs {
    /// Absolute path of the file in the sandbox.
    pub(crate) path: String,
    /// Byte offset to start at (default 0).
    #[serde(default)]
    pub(crate) offset: Option<u64>,
    /// Most bytes to return (at most the server's chunk size). Giving offset or length asks
    /// for one chunk; `_meta.eof` tells whether the end of the file was reached.
    #[serde(default)]
    pub(crate) length: Option<u64>,
}

/// The most chunked uploads staged at once; starting one more drops the oldest.
const MAX_STAGED_UPLOADS: usize = 64;

/// How long a chunked upload may wait for its next chunk before it is abandoned and its staged
/// parts are removed (`--upload-idle-seconds`).
pub(crate) const DEFAULT_UPLOAD_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// A chunked upload in progress: its parts, staged next to the destination.
struct Staged {
    total: u64,
    next: u64,
    parts: Vec<String>,
    hasher: Sha256,
    nonce: u64,
    started: std::time::Instant,
    /// When the last chunk arrived.
    touched: std::time::Instant,
}

/// The chunked uploads in progress, by destination path. An upload dropped for any reason
/// (restarted, evicted by a newer one, idle past the limit, the server stopping) has its
/// staged parts removed.
pub(crate) struct Uploads {
    staged: std::sync::Mutex<HashMap<String, Staged>>,
    idle: std::time::Duration,
}

impl Default for Uploads {
    fn default() -> Self {
        Self::new(DEFAULT_UPLOAD_IDLE)
    }
}

impl Uploads {
    /// Uploads abandoned after `idle` without a chunk.
    pub(crate) fn new(idle: std::time::Duration) -> Self {
        Self {
            staged: std::sync::Mutex::new(HashMap::new()),
            idle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Staged>> {
        self.staged.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The idle limit.
    pub(crate) fn idle(&self) -> std::time::Duration {
        self.idle
    }

    /// Drops the uploads idle since before `now - idle` and returns their staged parts.
    fn take_expired(&self, now: std::time::Instant) -> Vec<String> {
        let mut map = self.lock();
        let expired: Vec<String> = map
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.touched) >= self.idle)
            .map(|(k, _)| k.clone())
            .collect();
        let mut parts = Vec::new();
        for k in expired {
            if let Some(s) = map.remove(&k) {
                tracing::info!(path = %k, parts = s.parts.len(), "abandoned chunked upload expired; removing its staged parts");
                parts.extend(s.parts);
            }
        }
        parts
    }

    /// Removes the staged parts of every upload idle past the limit.
    pub(crate) async fn reap(&self, backend: &dyn SandboxBackend) -> usize {
        let parts = self.take_expired(std::time::Instant::now());
        remove_parts(backend, &parts).await;
        parts.len()
    }

    /// Drops every upload in progress and removes its staged parts (the server is stopping).
    pub(crate) async fn clear(&self, backend: &dyn SandboxBackend) {
        let parts: Vec<String> = self.lock().drain().flat_map(|(_, s)| s.parts).collect();
        remove_parts(backend, &parts).await;
    }
}

/// A successful file tool outcome: the text and the `_meta` fields.
#[derive(Debug)]
pub(crate) struct FileOk {
    pub(crate) text: String,
    pub(crate) meta: serde_json::Map<String, serde_json::Value>,
}

/// Checks that `path` is an absolute path DeepAgents would accept.
pub(crate) fn validate_path(path: &str) -> Result<(), FileError> {
    if path.is_empty() {
        return Err(FileError::new(
            FileErrorKind::InvalidPath,
            "path is empty; give an absolute path",
        ));
    }
    if !path.starts_with('/') {
        return Err(FileError::new(
            FileErrorKind::InvalidPath,
            format!("{path}: relative paths are not accepted; give an absolute path"),
        ));
    }
    if path.contains('\0') {
        return Err(FileError::new(
            FileErrorKind::InvalidPath,
            "path contains a NUL byte",
        ));
    }
    Ok(())
}

/// Decodes standard, padded base64 with no whitespace; anything else is rejected.
pub(crate) fn decode_strict(b64: &str) -> Result<Vec<u8>, String> {
    STANDARD.decode(b64.as_bytes()).map_err(|e| {
        format!("content_base64 is not standard padded base64 without line breaks: {e}")
    })
}

/// Encodes standard padded base64 without line breaks.
pub(crate) fn encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// Hex sha256.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The name of part `index` of a staged upload of `path` (hidden, next to it, so the final
/// rename stays on one filesystem).
fn part_path(path: &str, nonce: u64, index: usize) -> String {
    let (dir, base) = path.rsplit_once('/').unwrap_or(("", path));
    format!("{dir}/.{base}.e2b-upload-{nonce:016x}.{index}")
}

fn nonce() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

async fn remove_parts(backend: &dyn SandboxBackend, parts: &[String]) {
    for p in parts {
        if let Err(e) = backend.remove(p).await {
            tracing::debug!(part = %p, error = %e, "could not remove a staged upload part");
        }
    }
}

fn written(path: &str, n: usize, size: u64, offset: u64) -> serde_json::Map<String, Value> {
    let mut meta = serde_json::Map::new();
    meta.insert("exit_code".into(), 0.into());
    meta.insert("bytes_written".into(), (n as u64).into());
    meta.insert("size".into(), size.into());
    meta.insert("offset".into(), offset.into());
    meta.insert("path".into(), path.into());
    meta
}

/// `upload_file`.
pub(crate) async fn upload(
    backend: &dyn SandboxBackend,
    uploads: &Uploads,
    args: UploadArgs,
) -> Result<FileOk, FileError> {
    validate_path(&args.path)?;
    uploads.reap(backend).await;
    let path = args.path;
    let data = Bytes::from(decode_strict(&args.content_base64).map_err(FileError::other)?);
    let n = data.len();
    let text = format!("Written {n} bytes to {path}");
    if args.append.unwrap_or(false) {
        if args.offset.is_some_and(|o| o > 0) || args.total_size.is_some() {
            return Err(FileError::other(
                "give either append or offset/total_size, not both",
            ));
        }
        return append(backend, &path, data, text).await;
    }
    let offset = args.offset.unwrap_or(0);
    let end = offset.saturating_add(n as u64);
    let total = match args.total_size {
        None if offset == 0 => end,
        None => {
            return Err(FileError::other(format!(
                "offset {offset} without total_size: a chunked upload gives total_size (the whole file's size) on every chunk, starting with offset 0, so the file can be published at once when complete"
            )));
        }
        Some(t) => t,
    };
    if end > total {
        return Err(FileError::other(format!(
            "this chunk ends at byte {end}, past total_size {total}; check total_size"
        )));
    }
    if offset == 0 && end == total {
        // The whole file in one call: one atomic write (a staged upload of it is dropped).
        let old = uploads.lock().remove(&path);
        if let Some(old) = old {
            remove_parts(backend, &old.parts).await;
        }
        // envd refuses a directory target (`is_directory`) before writing anything.
        let sha = sha256_hex(&data);
        let size = backend.write_file(&path, data).await?;
        let mut meta = written(&path, n, size, 0);
        meta.insert("sha256".into(), sha.into());
        meta.insert("complete".into(), true.into());
        return Ok(FileOk { text, meta });
    }
    // A chunk of a staged upload.
    let mut dropped: Vec<String> = Vec::new();
    let begun = {
        let mut map = uploads.lock();
        if offset == 0 {
            if let Some(old) = map.remove(&path) {
                dropped.extend(old.parts);
            }
            if map.len() >= MAX_STAGED_UPLOADS
                && let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, s)| s.started)
                    .map(|(k, _)| k.clone())
                && let Some(old) = map.remove(&oldest)
            {
                dropped.extend(old.parts);
            }
            map.insert(
                path.clone(),
                Staged {
                    total,
                    next: 0,
                    parts: Vec::new(),
                    hasher: Sha256::new(),
                    nonce: nonce(),
                    started: std::time::Instant::now(),
                    touched: std::time::Instant::now(),
                },
            );
        }
        match map.get(&path) {
            None => Err(FileError::other(format!(
                "no chunked upload of {path} is in progress (the server may have restarted or dropped it: an upload idle for {} s is abandoned); start again at offset 0",
                uploads.idle().as_secs_f64()
            ))),
            Some(s) if s.next != offset || s.total != total => Err(FileError::other(format!(
                "chunk at offset {offset} (total_size {total}) does not continue the upload of {path}, which expects offset {} of {} bytes; send chunks in order, or start again at offset 0",
                s.next, s.total
            ))),
            Some(s) => Ok((s.nonce, s.parts.len())),
        }
    };
    remove_parts(backend, &dropped).await;
    let (nonce_v, index) = begun?;
    if offset == 0
        && let Ok(st) = backend.stat(&path).await
        && st.is_dir
    {
        uploads.lock().remove(&path);
        return Err(FileError::new(
            FileErrorKind::IsDirectory,
            format!("{path} is a directory"),
        ));
    }
    let part = part_path(&path, nonce_v, index);
    if let Err(e) = backend.write_file(&part, data.clone()).await {
        let old = uploads.lock().remove(&path);
        if let Some(old) = old {
            remove_parts(backend, &old.parts).await;
        }
        return Err(FileError {
            kind: e.kind,
            message: e.message.replace(&part, &path),
        });
    }
    let finished = {
        let mut map = uploads.lock();
        match map.get_mut(&path) {
            Some(s) if s.nonce == nonce_v && s.next == offset => {
                s.parts.push(part.clone());
                s.hasher.update(&data);
                s.next = end;
                s.touched = std::time::Instant::now();
                Ok(if end == total {
                    map.remove(&path)
                } else {
                    None
                })
            }
            _ => Err(()),
        }
    };
    let Ok(finished) = finished else {
        remove_parts(backend, std::slice::from_ref(&part)).await;
        return Err(FileError::other(format!(
            "another upload of {path} started while this chunk was written; start again at offset 0"
        )));
    };
    let mut meta = written(&path, n, end, offset);
    match finished {
        None => {
            meta.insert("complete".into(), false.into());
            meta.insert("next_offset".into(), end.into());
            Ok(FileOk { text, meta })
        }
        Some(s) => {
            let size = match backend.compose(&s.parts, &path).await {
                Ok(size) => size,
                Err(e) => {
                    remove_parts(backend, &s.parts).await;
                    return Err(e);
                }
            };
            meta.insert("size".into(), size.into());
            meta.insert("complete".into(), true.into());
            meta.insert("sha256".into(), hex::encode(s.hasher.finalize()).into());
            Ok(FileOk { text, meta })
        }
    }
}

/// `upload_file` with `append`: the chunk is staged, then the file and it are published
/// together atomically.
async fn append(
    backend: &dyn SandboxBackend,
    path: &str,
    data: Bytes,
    text: String,
) -> Result<FileOk, FileError> {
    let n = data.len();
    let existing = match backend.stat(path).await {
        Ok(st) if st.is_dir => {
            return Err(FileError::new(
                FileErrorKind::IsDirectory,
                format!("{path} is a directory"),
            ));
        }
        Ok(st) => Some(st.size),
        Err(e) if e.kind == Some(FileErrorKind::FileNotFound) => None,
        Err(e) => return Err(e),
    };
    let size = match existing {
        None => backend.write_file(path, data).await?,
        Some(_) => {
            let part = part_path(path, nonce(), 0);
            backend.write_file(&part, data).await?;
            match backend
                .compose(&[path.to_owned(), part.clone()], path)
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    remove_parts(backend, std::slice::from_ref(&part)).await;
                    return Err(e);
                }
            }
        }
    };
    let offset = size.saturating_sub(n as u64);
    Ok(FileOk {
        text,
        meta: written(path, n, size, offset),
    })
}

/// `download_file`.
pub(crate) async fn download(
    backend: &dyn SandboxBackend,
    args: DownloadArgs,
    max_chunk: u64,
) -> Result<FileOk, FileError> {
    validate_path(&args.path)?;
    let stat = backend.stat(&args.path).await?;
    if stat.is_dir {
        return Err(FileError::new(
            FileErrorKind::IsDirectory,
            format!("{} is a directory", args.path),
        ));
    }
    if !stat.is_file {
        return Err(FileError::other(format!(
            "{} is not a regular file (a FIFO, socket or device?); only regular files are downloaded",
            args.path
        )));
    }
    let whole = args.offset.is_none() && args.length.is_none();
    if whole && stat.size > max_chunk {
        return Err(FileError::other(format!(
            "{} is {} bytes, more than one download_file result carries ({max_chunk} bytes); read it in chunks: call download_file with offset 0 and length {max_chunk}, then with offset += the bytes received, until _meta.eof is true",
            args.path, stat.size
        )));
    }
    let offset = args.offset.unwrap_or(0);
    let length = args.length.unwrap_or(max_chunk).min(max_chunk);
    let chunk = backend.read_chunk(&args.path, offset, length).await?;
    let got = chunk.data.len() as u64;
    let eof = offset.saturating_add(got) >= chunk.size;
    if whole && !eof {
        // The file grew past one chunk between stat and read.
        return Err(FileError::other(format!(
            "{} grew to {} bytes while it was read; read it in chunks with offset and length {max_chunk}",
            args.path, chunk.size
        )));
    }
    let mut meta = serde_json::Map::new();
    meta.insert("exit_code".into(), 0.into());
    meta.insert("size".into(), chunk.size.into());
    meta.insert("offset".into(), offset.into());
    meta.insert("length".into(), got.into());
    meta.insert("eof".into(), eof.into());
    meta.insert("truncated".into(), false.into());
    meta.insert("sha256".into(), sha256_hex(&chunk.data).into());
    Ok(FileOk {
        text: encode(&chunk.data),
        meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_base64() {
        assert_eq!(decode_strict("aGk=").unwrap_or_default(), b"hi");
        assert!(decode_strict("aGk").is_err(), "missing padding");
        assert!(decode_strict("aG\nk=").is_err(), "newline");
        assert!(decode_strict("aGk= ").is_err(), "space");
        assert!(decode_strict("aGk-").is_err(), "url-safe alphabet");
        assert_eq!(decode_strict("").unwrap_or_default(), b"");
        assert_eq!(encode(&[0xff, 0, 1]), "/wAB");
    }

    #[test]
    fn paths() {
        assert_eq!(
            validate_path("rel/x").err().and_then(|e| e.kind),
            Some(FileErrorKind::InvalidPath)
        );
        assert_eq!(
            validate_path("").err().and_then(|e| e.kind),
            Some(FileErrorKind::InvalidPath)
        );
        assert!(validate_path("/a/b").is_ok());
    }

    #[test]
    fn sha() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
