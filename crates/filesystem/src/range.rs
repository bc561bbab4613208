//! Reading one byte range of a file (`GET /files` with `Range`).

use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;

use crate::{Filesystem, FilesystemError, Result};

/// A slice of a file read with [`Filesystem::read_range`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeRead {
    /// The bytes read: at most the length asked for, fewer at the end of the file.
    pub data: Bytes,
    /// The file's whole size when it was read.
    pub size: u64,
}

/// `(start, size)` of a `Content-Range: bytes a-b/size` or `bytes */size` header.
fn content_range(v: &str) -> Option<(Option<u64>, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, size) = rest.split_once('/')?;
    let size = size.trim().parse().ok()?;
    if range.trim() == "*" {
        return Some((None, size));
    }
    let (a, _) = range.split_once('-')?;
    Some((Some(a.trim().parse().ok()?), size))
}

impl Filesystem {
    /// Reads at most `len` bytes of `path` starting at byte `offset`, and the file's size, in
    /// one `GET /files` with a `Range` header. An `offset` at or past the end gives no bytes;
    /// `len == 0` gives no bytes (and still the size). The body is read up to `len` bytes
    /// whatever the server sends, so memory stays bounded by `len`.
    ///
    /// # Errors
    ///
    /// [`FilesystemError::NotFound`], [`FilesystemError::IsDirectory`],
    /// [`FilesystemError::PermissionDenied`] and the other `/files` errors; a server that does
    /// not answer with the asked range (or the whole file) gives [`FilesystemError::Protocol`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts the request; nothing is changed in the sandbox.
    pub async fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<RangeRead> {
        let mut query = vec![("path", path.to_string())];
        query.extend(self.user_query());
        // `len == 0` still asks for one byte: the answer carries the size.
        let last = offset.saturating_add(len.max(1)) - 1;
        let resp = self
            .conn
            .http()
            .get(self.files_url())
            .query(&query)
            .header("range", format!("bytes={offset}-{last}"))
            .send()
            .await?;
        let header = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(content_range);
        let status = resp.status().as_u16();
        if status == 416 {
            if let Some((None, size)) = header {
                return Ok(RangeRead {
                    data: Bytes::new(),
                    size,
                });
            }
            return Err(Self::check(resp).await.err().unwrap_or_else(|| {
                FilesystemError::Protocol("envd refused the range without a reason".into())
            }));
        }
        let resp = Self::check(resp).await?;
        // 206: the range; 200: the whole file (a server without range support).
        let (skip, size) = match (status, header) {
            (206, Some((Some(start), size))) if start == offset => (0, size),
            (200, _) => {
                let size = resp.content_length().ok_or_else(|| {
                    FilesystemError::Protocol("envd sent the whole file without its length".into())
                })?;
                (offset, size)
            }
            _ => {
                return Err(FilesystemError::Protocol(format!(
                    "envd answered a range read of '{path}' with HTTP {status} and no matching Content-Range"
                )));
            }
        };
        let want = usize::try_from(len.min(size.saturating_sub(offset))).unwrap_or(usize::MAX);
        let mut buf = BytesMut::with_capacity(want.min(8 << 20));
        let mut to_skip = skip;
        let mut body = resp.bytes_stream();
        while buf.len() < want {
            let Some(chunk) = body.next().await else {
                break;
            };
            let mut chunk = chunk?;
            if to_skip > 0 {
                let n = usize::try_from(to_skip.min(chunk.len() as u64)).unwrap_or(chunk.len());
                chunk = chunk.slice(n..);
                to_skip -= n as u64;
            }
            let n = chunk.len().min(want - buf.len());
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok(RangeRead {
            data: buf.freeze(),
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::content_range;

    #[test]
    fn content_range_headers() {
        assert_eq!(content_range("bytes 0-9/100"), Some((Some(0), 100)));
        assert_eq!(content_range("bytes */7"), Some((None, 7)));
        assert_eq!(content_range("bytes x-1/7"), None);
        assert_eq!(content_range("items 0-1/7"), None);
    }
}
