#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod gzip;
mod read;

pub use gzip::{
    GZIP_CHUNK, GunzipError, GunzipLimits, gunzip_stream, gunzip_stream_limited, gzip_stream,
};
pub use read::{ReadOptions, Segment, read_segments, read_stream};

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write as _};

use bytes::Bytes;
use tokio::sync::mpsc;

/// Buffers sent on (to an HTTP body, say) come back here once every holder dropped them, so a
/// long read reuses a handful of allocations instead of making one per chunk. A buffer still in
/// use is not waited for: memory stays bounded by `keep` plus the buffers in flight.
#[derive(Debug)]
pub struct Recycler {
    out: VecDeque<Bytes>,
    size: usize,
    keep: usize,
}

impl Recycler {
    /// Hands out buffers with room for `size` bytes and remembers up to `keep` of them.
    pub fn new(size: usize, keep: usize) -> Self {
        Self {
            out: VecDeque::with_capacity(keep),
            size,
            keep: keep.max(1),
        }
    }

    /// The size of the buffers handed out.
    pub fn size(&self) -> usize {
        self.size
    }

    /// An empty buffer with room for `size` bytes: the oldest one sent, if nobody holds it any
    /// more, else a new one.
    pub fn take(&mut self) -> Vec<u8> {
        if self.out.front().is_some_and(Bytes::is_unique) {
            if let Some(Ok(mut m)) = self.out.pop_front().map(Bytes::try_into_mut) {
                m.clear();
                let v = Vec::from(m);
                if v.capacity() >= self.size {
                    return v;
                }
            }
        } else if self.out.len() >= self.keep {
            self.out.pop_front();
        }
        Vec::with_capacity(self.size)
    }

    /// Remembers a buffer being sent on, to take it back later.
    pub fn track(&mut self, b: &Bytes) {
        self.out.push_back(b.clone());
    }
}

/// A batch on its way to the writer thread.
enum Batch {
    /// One of the sink's own buffers, filled by copying received chunks; it goes back to the
    /// sink once written, to be filled again.
    Owned(Vec<u8>),
    /// A chunk of a whole batch or more, arrived at a batch boundary, written as it is.
    Shared(Bytes),
}

/// Writes the batches arriving on `rx` to `file`, one `write_all` each, handing emptied
/// buffers back on `free`. Returns the bytes written.
fn write_batches(
    mut file: File,
    mut rx: mpsc::Receiver<Batch>,
    free: std::sync::mpsc::Sender<Vec<u8>>,
) -> io::Result<u64> {
    let mut total = 0u64;
    while let Some(batch) = rx.blocking_recv() {
        match batch {
            Batch::Owned(mut buf) => {
                file.write_all(&buf)?;
                total += buf.len() as u64;
                buf.clear();
                // The sink may be gone already (it only waits for the result then).
                let _ = free.send(buf);
            }
            Batch::Shared(b) => {
                file.write_all(&b)?;
                total += b.len() as u64;
            }
        }
    }
    Ok(total)
}

/// A file being written on a blocking thread from received chunks. Send chunks with
/// [`FileSink::write`], then [`FileSink::finish`] (also after a failed input, so what arrived
/// is in the file); dropping it without finishing abandons the write.
///
/// Each chunk is copied at once into one of a few recycled batch buffers and dropped, rather
/// than queued as it is: a chunk of an HTTP body shares the HTTP layer's receive buffer, and
/// holding it while the disk catches up makes that layer allocate a fresh buffer for every
/// read, which the allocator hands back to the kernel once freed, so every page of the body
/// is page-faulted and zeroed before the socket data is copied into it (about 30 % of the
/// daemon's CPU on a 1 GiB upload). One extra copy in user space is cheaper than that, and
/// each batch is then one contiguous `write`. At most `depth` + 2 buffers exist at a time.
#[derive(Debug)]
pub struct FileSink {
    tx: Option<mpsc::Sender<Batch>>,
    /// Buffers the writer has emptied.
    free: std::sync::mpsc::Receiver<Vec<u8>>,
    /// The batch being filled (no capacity until the first byte arrives).
    cur: Vec<u8>,
    batch: usize,
    done: tokio::task::JoinHandle<io::Result<u64>>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Owned(v) => write!(f, "Owned({} bytes)", v.len()),
            Self::Shared(b) => write!(f, "Shared({} bytes)", b.len()),
        }
    }
}

impl FileSink {
    /// Starts writing to `file` in batches of `batch` bytes, with up to `depth` batches queued
    /// for the writer thread. Needs a tokio runtime (the writer is a blocking task).
    pub fn start(file: File, batch: usize, depth: usize) -> Self {
        let (tx, rx) = mpsc::channel::<Batch>(depth.max(1));
        let (free_tx, free) = std::sync::mpsc::channel();
        let done = tokio::task::spawn_blocking(move || write_batches(file, rx, free_tx));
        Self {
            tx: Some(tx),
            free,
            cur: Vec::new(),
            batch: batch.max(1),
            done,
        }
    }

    async fn send(&mut self, batch: Batch) -> Result<(), WriterStopped> {
        match &self.tx {
            Some(tx) => tx.send(batch).await.map_err(|_| WriterStopped),
            None => Err(WriterStopped),
        }
    }

    /// Queues a chunk. Fails when the writer already stopped (its error comes from
    /// [`FileSink::finish`]).
    ///
    /// # Errors
    ///
    /// [`WriterStopped`] when the writer thread stopped after an error; [`FileSink::finish`]
    /// returns that error.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future may leave part of the chunk copied into the current
    /// batch.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), WriterStopped> {
        if self.cur.is_empty() && chunk.len() >= self.batch {
            return self.send(Batch::Shared(chunk)).await;
        }
        let mut data = &chunk[..];
        while !data.is_empty() {
            if self.cur.capacity() == 0 {
                let size = self.batch;
                self.cur = self
                    .free
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(size));
            }
            let n = (self.batch - self.cur.len()).min(data.len());
            self.cur.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.cur.len() >= self.batch {
                let full = std::mem::take(&mut self.cur);
                self.send(Batch::Owned(full)).await?;
            }
        }
        Ok(())
    }

    /// Writes what is left, closes the input and waits for every byte to reach the file.
    /// Returns the bytes written, or the writer's error.
    ///
    /// # Errors
    ///
    /// The writer's I/O error (disk full, permission), or a panic of the writer thread as an
    /// `io::Error`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the wait; the writer thread still writes what it was given and
    /// closes the file.
    pub async fn finish(mut self) -> io::Result<u64> {
        if !self.cur.is_empty() {
            let last = std::mem::take(&mut self.cur);
            // A failed send means the writer stopped; its result says why.
            let _ = self.send(Batch::Owned(last)).await;
        }
        self.tx = None;
        match (&mut self.done).await {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(format!("file writer failed: {e}"))),
        }
    }
}

/// The writer thread of a [`FileSink`] stopped (after an error, which [`FileSink::finish`]
/// returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStopped;

impl std::fmt::Display for WriterStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the file writer stopped")
    }
}

impl std::error::Error for WriterStopped {}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: usize = 256 * 1024;
    const DEPTH: usize = 4;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[tokio::test]
    async fn file_sink_copies_small_chunks_and_passes_large_ones() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let data = pattern(BATCH * 3 + 77);
        let p = dir.path().join("out");
        // Small chunks are copied into batches; a chunk of a whole batch or more that arrives
        // at a batch boundary is written as it is; odd sizes end batches mid-chunk; all in order.
        for sizes in [
            &[65_537][..],
            &[100_003][..],
            &[BATCH * 2 + 5, 7, BATCH, 1][..],
        ] {
            let mut sink = FileSink::start(File::create(&p)?, BATCH, DEPTH);
            let mut rest = &data[..];
            for n in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at((*n).min(rest.len()));
                rest = tail;
                sink.write(Bytes::copy_from_slice(piece))
                    .await
                    .map_err(io::Error::other)?;
            }
            assert_eq!(sink.finish().await?, data.len() as u64);
            assert_eq!(std::fs::read(&p)?, data, "chunk sizes {sizes:?}");
        }
        // Nothing written: an empty file.
        let sink = FileSink::start(File::create(&p)?, BATCH, DEPTH);
        assert_eq!(sink.finish().await?, 0);
        assert!(std::fs::read(&p)?.is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn file_sink_reports_a_failed_write() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("ro");
        std::fs::write(&p, b"")?;
        // Opened read-only: every write fails.
        let mut sink = FileSink::start(File::open(&p)?, BATCH, DEPTH);
        let chunk = Bytes::from(pattern(100_000));
        let mut stopped = false;
        for _ in 0..(BATCH * (DEPTH + 4) / chunk.len()) {
            if sink.write(chunk.clone()).await.is_err() {
                stopped = true;
                break;
            }
        }
        assert!(
            stopped,
            "the sink kept accepting chunks after its writer failed"
        );
        assert!(sink.finish().await.is_err());
        Ok(())
    }

    #[test]
    fn recycler_reuses_buffers_nobody_holds() {
        let mut pool = Recycler::new(1024, 2);
        let first = pool.take();
        let ptr = first.as_ptr();
        let sent = Bytes::from(first);
        pool.track(&sent);
        // Still held: a new buffer.
        let second = pool.take();
        assert_ne!(second.as_ptr(), ptr);
        drop(sent);
        // Dropped by its holder: the same allocation comes back, empty.
        let again = pool.take();
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty() && again.capacity() >= 1024);
    }
}
