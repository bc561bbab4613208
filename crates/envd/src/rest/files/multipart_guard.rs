//! Bounds on a multipart body, applied before the multipart parser sees it.
//!
//! The parser (`multer`) buffers everything it reads while it looks for the first boundary and
//! for the end of a part's headers, and it reads as long as its input is ready: a body that
//! never reaches a boundary (or a gzip body that expands without end) would be buffered whole.
//! [`MultipartGuard`] follows the body's structure with a small state machine
//! ([`MultipartScanner`]) and fails the stream when the preamble, a part's header block or the
//! number of parts passes its limit; it also hands the parser one chunk per poll, so the
//! parser's buffer holds about one chunk.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;

use super::io::LIMIT_ERROR_PREFIX;

/// Limits of [`MultipartScanner`].
#[derive(Debug, Clone, Copy)]
pub struct MultipartLimits {
    /// Most bytes before the first boundary, and most bytes in one part's header block.
    pub max_header_bytes: usize,
    /// Most parts.
    pub max_parts: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the first `--boundary`.
    Preamble,
    /// Right after a delimiter: `--` (the end) or the part's headers follow.
    AfterDelimiter,
    /// In a part's header block, up to the empty line.
    Headers,
    /// In a part's content, up to `\r\n--boundary`.
    Body,
    /// After the closing delimiter: the rest is ignored.
    Done,
}

/// Follows a multipart body's structure chunk by chunk, with bounded memory (a carry of less
/// than a delimiter's length), and reports the first limit it passes.
#[derive(Debug)]
pub struct MultipartScanner {
    /// `--boundary`.
    first: Vec<u8>,
    /// `\r\n--boundary`.
    next: Vec<u8>,
    limits: MultipartLimits,
    stage: Stage,
    /// Bytes of the stream before `carry`.
    offset: u64,
    /// Where the current stage began (stream offset).
    stage_start: u64,
    /// The unscanned tail of the previous chunk.
    carry: Vec<u8>,
    parts: usize,
}

impl MultipartScanner {
    /// A scanner for a body whose boundary is `boundary`.
    pub fn new(boundary: &str, limits: MultipartLimits) -> Self {
        let first = format!("--{boundary}").into_bytes();
        let next = format!("\r\n--{boundary}").into_bytes();
        Self {
            first,
            next,
            limits,
            stage: Stage::Preamble,
            offset: 0,
            stage_start: 0,
            carry: Vec::new(),
            parts: 0,
        }
    }

    /// The number of parts seen so far.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Scans the next chunk of the body. `Err` carries a message naming the limit passed.
    ///
    /// # Errors
    ///
    /// When the preamble or a part's header block is longer than `max_header_bytes`, or the
    /// body has more than `max_parts` parts.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.stage == Stage::Done {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        let mut pos = 0usize;
        loop {
            let needle: &[u8] = match self.stage {
                Stage::Preamble => &self.first,
                Stage::Headers => b"\r\n\r\n",
                Stage::Body => &self.next,
                Stage::Done => break,
                Stage::AfterDelimiter => {
                    let rest = &buf[pos..];
                    if rest.len() < 2 {
                        break;
                    }
                    if rest.starts_with(b"--") {
                        self.stage = Stage::Done;
                        break;
                    }
                    self.parts += 1;
                    if self.parts > self.limits.max_parts {
                        return Err(format!(
                            "{LIMIT_ERROR_PREFIX}: the multipart body has more than {} parts",
                            self.limits.max_parts
                        ));
                    }
                    self.stage = Stage::Headers;
                    self.stage_start = self.offset + pos as u64;
                    continue;
                }
            };
            match memchr::memmem::find(&buf[pos..], needle) {
                Some(i) => {
                    let at = self.offset + (pos + i) as u64;
                    self.check_len(at)?;
                    pos += i + needle.len();
                    self.stage = match self.stage {
                        Stage::Preamble | Stage::Body => Stage::AfterDelimiter,
                        _ => Stage::Body,
                    };
                    self.stage_start = self.offset + pos as u64;
                }
                None => {
                    let keep = (needle.len() - 1).min(buf.len() - pos);
                    let scanned_to = self.offset + (buf.len() - keep) as u64;
                    self.check_len(scanned_to)?;
                    pos = buf.len() - keep;
                    break;
                }
            }
        }
        self.carry = buf[pos..].to_vec();
        self.offset += pos as u64;
        Ok(())
    }

    /// Fails when the current stage (preamble or headers) reaches `at` beyond its limit.
    fn check_len(&self, at: u64) -> Result<(), String> {
        let len = at.saturating_sub(self.stage_start);
        let limit = self.limits.max_header_bytes as u64;
        match self.stage {
            Stage::Preamble if len > limit => Err(format!(
                "{LIMIT_ERROR_PREFIX}: more than {limit} bytes before the first multipart boundary"
            )),
            Stage::Headers if len > limit => Err(format!(
                "{LIMIT_ERROR_PREFIX}: a multipart part's headers are longer than {limit} bytes"
            )),
            _ => Ok(()),
        }
    }
}

/// A body stream checked by a [`MultipartScanner`], yielding to the executor after each chunk
/// (so the consumer reads one chunk per poll).
pub struct MultipartGuard<S> {
    inner: S,
    scanner: MultipartScanner,
    yielded: bool,
    failed: bool,
}

impl<S> MultipartGuard<S> {
    /// Wraps `inner`, a multipart body with `boundary`.
    pub fn new(inner: S, boundary: &str, limits: MultipartLimits) -> Self {
        Self {
            inner,
            scanner: MultipartScanner::new(boundary, limits),
            yielded: false,
            failed: false,
        }
    }
}

impl<S> Stream for MultipartGuard<S>
where
    S: Stream<Item = io::Result<Bytes>> + Unpin,
{
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        if self.yielded {
            self.yielded = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Err(m) = self.scanner.feed(&chunk) {
                    self.failed = true;
                    return Poll::Ready(Some(Err(io::Error::new(io::ErrorKind::InvalidData, m))));
                }
                self.yielded = true;
                Poll::Ready(Some(Ok(chunk)))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: MultipartLimits = MultipartLimits {
        max_header_bytes: 64,
        max_parts: 3,
    };

    fn body(parts: usize) -> Vec<u8> {
        let mut b = b"preamble\r\n".to_vec();
        for i in 0..parts {
            b.extend_from_slice(
                format!(
                    "--XB\r\nContent-Disposition: form-data; name=\"f{i}\"\r\n\r\ndata {i} --X\r\n"
                )
                .as_bytes(),
            );
        }
        b.extend_from_slice(b"--XB--\r\nepilogue");
        b
    }

    fn scan_in_chunks(data: &[u8], size: usize) -> Result<usize, String> {
        let mut s = MultipartScanner::new("XB", LIMITS);
        for c in data.chunks(size.max(1)) {
            s.feed(c)?;
        }
        Ok(s.parts())
    }

    #[test]
    fn counts_parts_whatever_the_chunking() {
        for size in [1, 2, 3, 5, 7, 64, 4096] {
            assert_eq!(scan_in_chunks(&body(3), size), Ok(3), "chunk size {size}");
        }
        assert!(
            scan_in_chunks(&body(4), 5)
                .unwrap_err()
                .contains("more than 3 parts")
        );
    }

    #[test]
    fn long_preamble_and_headers_fail() {
        let mut long = vec![b'a'; 100];
        long.extend_from_slice(&body(1));
        for size in [1, 9, 1000] {
            assert!(
                scan_in_chunks(&long, size)
                    .unwrap_err()
                    .contains("first multipart boundary")
            );
        }
        let headers = format!("--XB\r\nX: {}\r\n\r\nd\r\n--XB--", "h".repeat(100));
        for size in [1, 9, 1000] {
            assert!(
                scan_in_chunks(headers.as_bytes(), size)
                    .unwrap_err()
                    .contains("headers are longer")
            );
        }
        // A body that never reaches a boundary fails once past the limit, not at its end.
        let mut s = MultipartScanner::new("XB", LIMITS);
        let mut failed_at = None;
        for i in 0..100 {
            if s.feed(&[0u8; 16]).is_err() {
                failed_at = Some(i);
                break;
            }
        }
        assert!(failed_at.is_some_and(|i| i < 8), "{failed_at:?}");
    }

    #[test]
    fn big_part_content_is_fine() {
        let mut b = b"--XB\r\n\r\n".to_vec();
        b.extend_from_slice(&vec![b'z'; 10_000]);
        b.extend_from_slice(b"\r\n--XB--");
        assert_eq!(scan_in_chunks(&b, 333), Ok(1));
    }
}
