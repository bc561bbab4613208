//! A file read as a bounded stream of chunks, on a blocking thread, into recycled buffers.

use std::fs::File;
use std::io::{self, Read as _, Seek as _, SeekFrom};

use bytes::Bytes;
use futures_core::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::Recycler;

/// A piece of a streamed body: bytes sent as they are, or a range of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Segment {
    /// Bytes sent as they are (a multipart part's headers, a closing boundary).
    Literal(Bytes),
    /// `len` bytes of the file from `offset`.
    File {
        /// First byte.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
}

impl Segment {
    /// The number of bytes this segment adds to the body.
    pub fn len(&self) -> u64 {
        match self {
            Self::Literal(b) => b.len() as u64,
            Self::File { len, .. } => *len,
        }
    }

    /// Whether the segment adds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How a file is read: chunk size and how many chunks may wait for the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadOptions {
    /// Bytes per read (and per chunk); at least 1.
    pub chunk: usize,
    /// Chunks read ahead of the consumer; at least 1.
    pub depth: usize,
}

impl ReadOptions {
    /// Reads of `chunk` bytes, `depth` chunks ahead.
    pub fn new(chunk: usize, depth: usize) -> Self {
        Self {
            chunk: chunk.max(1),
            depth: depth.max(1),
        }
    }
}

/// Streams `len` bytes of `file` from `offset` (fewer if the file is shorter), read on a
/// blocking thread in chunks of at most `opts.chunk` bytes. Needs a tokio runtime.
pub fn read_stream(
    file: File,
    offset: u64,
    len: u64,
    opts: ReadOptions,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    // A small file gets one buffer of its own size, not a whole chunk.
    let chunk = opts.chunk.min(usize::try_from(len).unwrap_or(opts.chunk));
    read_segments(
        file,
        ReadOptions::new(chunk, opts.depth),
        std::iter::once(Segment::File { offset, len }),
    )
}

/// Streams `segments` in order on a blocking thread: literals as they are, file ranges read in
/// chunks of up to `opts.chunk` bytes straight into recycled, never zero-filled buffers (a
/// buffer comes back once the consumer dropped it, see [`Recycler`]). The segments are produced
/// lazily, so a body of many small parts holds no more than one part's headers at a time. If
/// the file turns out shorter than a range, the stream ends there (a response with a
/// `Content-Length` then fails instead of going on with misplaced bytes). Needs a tokio
/// runtime.
pub fn read_segments<I>(
    mut file: File,
    opts: ReadOptions,
    segments: I,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    I: IntoIterator<Item = Segment>,
    I::IntoIter: Send + 'static,
{
    let segments = segments.into_iter();
    let opts = ReadOptions::new(opts.chunk, opts.depth);
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(opts.depth);
    tokio::task::spawn_blocking(move || {
        // Buffers in the channel, one being read, one held by the consumer, plus slack.
        let mut pool = Recycler::new(opts.chunk, opts.depth + 4);
        // Where the file's offset is, so consecutive ranges need no seek.
        let mut pos = 0u64;
        for segment in segments {
            let (offset, len) = match segment {
                Segment::Literal(b) => {
                    if tx.blocking_send(Ok(b)).is_err() {
                        return;
                    }
                    continue;
                }
                Segment::File { offset, len } => (offset, len),
            };
            if offset != pos {
                if let Err(e) = file.seek(SeekFrom::Start(offset)) {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
                pos = offset;
            }
            let mut left = len;
            while left > 0 {
                let want = left.min(pool.size() as u64);
                let mut buf = pool.take();
                // `read_to_end` reads into the spare capacity without zero-filling it, and
                // retries interrupted reads.
                let n = match (&mut file).take(want).read_to_end(&mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                };
                if n == 0 {
                    return; // the file shrank
                }
                left -= n as u64;
                pos += n as u64;
                let chunk = Bytes::from(buf);
                pool.track(&chunk);
                if tx.blocking_send(Ok(chunk)).is_err() {
                    return;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}
