//! `upload_file` / `download_file`: strict base64, chunks, offsets, sha256, DeepAgents' literals.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::backend::{SandboxBackend, WriteMode};
use crate::error::{FileError, FileErrorKind};

/// Arguments of `upload_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct UploadArgs {
    /// Absolute path of the file in the sandbox. Parent directories are created.
    pub(crate) path: String,
    /// The bytes, standard base64 with padding and no line breaks.
    pub(crate) content_base64: String,
    /// Write at this byte offset: the file keeps its first `offset` bytes, anything after them is
    /// replaced by this chunk. `0` or absent (without `append`) replaces the whole file atomically.
    /// Send a large file as consecutive chunks with increasing offsets.
    #[serde(default)]
    pub(crate) offset: Option<u64>,
    /// Append to the end of the file instead (created when missing).
    #[serde(default)]
    pub(crate) append: Option<bool>,
}

/// Arguments of `download_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct DownloadArgs {
    /// Absolute path of the file in the sandbox.
    pub(crate) path: String,
    /// Byte offset to start at (default 0).
    #[serde(default)]
    pub(crate) offset: Option<u64>,
    /// Most bytes to return (default and maximum: the server's chunk size). `_meta.eof` tells
    /// whether the end of the file was reached.
    #[serde(default)]
    pub(crate) length: Option<u64>,
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

/// `upload_file`.
pub(crate) async fn upload(
    backend: &dyn SandboxBackend,
    args: UploadArgs,
) -> Result<FileOk, FileError> {
    validate_path(&args.path)?;
    let append = args.append.unwrap_or(false);
    let mode = match (args.offset, append) {
        (Some(o), true) if o > 0 => {
            return Err(FileError::other("give either offset or append, not both"));
        }
        (_, true) => WriteMode::Append,
        (None | Some(0), false) => WriteMode::Replace,
        (Some(o), false) => WriteMode::At(o),
    };
    let data = decode_strict(&args.content_base64).map_err(FileError::other)?;
    if let WriteMode::At(o) = mode {
        let st = backend.stat(&args.path).await?;
        if st.is_dir {
            return Err(FileError::new(
                FileErrorKind::IsDirectory,
                format!("{} is a directory", args.path),
            ));
        }
        if st.size < o {
            return Err(FileError::other(format!(
                "offset {o} is past the end of {} ({} bytes); send the chunks in order",
                args.path, st.size
            )));
        }
    }
    let n = data.len();
    let sha = sha256_hex(&data);
    let size = backend
        .write_chunk(&args.path, Bytes::from(data), mode)
        .await?;
    let mut meta = serde_json::Map::new();
    meta.insert("exit_code".into(), 0.into());
    meta.insert("bytes_written".into(), (n as u64).into());
    meta.insert("size".into(), size.into());
    meta.insert("sha256".into(), sha.into());
    let offset = match mode {
        WriteMode::Replace => 0,
        WriteMode::At(o) => o,
        WriteMode::Append => size.saturating_sub(n as u64),
    };
    meta.insert("offset".into(), offset.into());
    Ok(FileOk {
        text: format!("Written {n} bytes to {}", args.path),
        meta,
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
    let offset = args.offset.unwrap_or(0);
    let length = args.length.unwrap_or(max_chunk).min(max_chunk);
    let chunk = backend.read_chunk(&args.path, offset, length).await?;
    let got = chunk.data.len() as u64;
    let eof = offset.saturating_add(got) >= chunk.size;
    let mut meta = serde_json::Map::new();
    meta.insert("exit_code".into(), 0.into());
    meta.insert("size".into(), chunk.size.into());
    meta.insert("offset".into(), offset.into());
    meta.insert("length".into(), got.into());
    meta.insert("eof".into(), eof.into());
    meta.insert("truncated".into(), (!eof && args.length.is_none()).into());
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
