//! Local file I/O for streamed transfers, on blocking threads with bounded channels.
//!
//! Reading: 1 MiB reads straight into recycled buffers that are never zero-filled (the HTTP
//! layer writes them out and drops them; the reader takes them back). Writing: each received
//! chunk is copied at once into a few recycled 256 KiB buffers and dropped, so the HTTP layer
//! can reuse its receive buffer (see [`FileSink`]); each buffer is written with one `write`.
//! Memory stays at a few MiB whatever the file size.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read as _, Write as _};

use bytes::Bytes;
use futures::Stream;
use tokio::sync::mpsc;

/// Size of the reads from a local file.
const READ_CHUNK: usize = 512 * 1024;
/// Chunks read ahead of the network.
const READ_DEPTH: usize = 4;
/// The writer writes downloads in batches of this many bytes. Measured with `bench_files`
/// (1 GiB, 2-core Firecracker VM, ext4): with 512 KiB batches some downloads took ~1.5 s
/// instead of ~0.7 s, nearly all of it in the kernel's copy into the page cache
/// (`copy_folio_from_iter_atomic`); 256 KiB batches gave 0.65 s in the first round and
/// ~0.52 s later, 128 KiB about the same with twice the calls.
const WRITE_BATCH: usize = 256 * 1024;
/// Batches queued for the writer.
const WRITE_DEPTH: usize = 4;

/// Buffers sent on come back here once the consumer dropped them. A buffer still in use is
/// not waited for: memory stays bounded by [`Recycler::KEEP`] plus the chunks in flight.
struct Recycler {
    out: VecDeque<Bytes>,
    size: usize,
}

impl Recycler {
    const KEEP: usize = READ_DEPTH + 2;

    fn new(size: usize) -> Self {
        Self {
            out: VecDeque::with_capacity(Self::KEEP),
            size,
        }
    }

    /// An empty buffer with room for `size` bytes.
    fn take(&mut self) -> Vec<u8> {
        if self.out.front().is_some_and(Bytes::is_unique) {
            if let Some(Ok(mut m)) = self.out.pop_front().map(Bytes::try_into_mut) {
                m.clear();
                let v = Vec::from(m);
                if v.capacity() >= self.size {
                    return v;
                }
            }
        } else if self.out.len() >= Self::KEEP {
            self.out.pop_front();
        }
        Vec::with_capacity(self.size)
    }

    fn track(&mut self, b: &Bytes) {
        self.out.push_back(b.clone());
    }
}

/// Streams the first `len` bytes of a local file (fewer if it is shorter), read on a
/// blocking thread.
pub(crate) fn read_file(
    mut file: File,
    len: u64,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(READ_DEPTH);
    let size = usize::try_from(len)
        .unwrap_or(READ_CHUNK)
        .clamp(1, READ_CHUNK);
    tokio::task::spawn_blocking(move || {
        let mut pool = Recycler::new(size);
        let mut left = len;
        while left > 0 {
            let mut buf = pool.take();
            // `read_to_end` reads into the spare capacity without zero-filling it, and retries
            // interrupted reads.
            if let Err(e) = (&mut file)
                .take(left.min(size as u64))
                .read_to_end(&mut buf)
            {
                let _ = tx.blocking_send(Err(e));
                return;
            }
            if buf.is_empty() {
                return;
            }
            left -= buf.len() as u64;
            let chunk = Bytes::from(buf);
            pool.track(&chunk);
            if tx.blocking_send(Ok(chunk)).is_err() {
                return;
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// A batch on its way to the writer thread.
enum Batch {
    /// One of the sink's own buffers, filled by copying received chunks; it goes back to the
    /// sink once written, to be filled again.
    Owned(Vec<u8>),
    /// A chunk of at least [`WRITE_BATCH`] bytes, written as it is.
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

/// A local file being written on a blocking thread from received chunks. Send chunks with
/// [`FileSink::write`], then [`FileSink::finish`] (also after a failed input, so what arrived
/// is in the file); dropping it without finishing abandons the write.
///
/// Each chunk is copied at once into one of a few recycled [`WRITE_BATCH`]-sized buffers and
/// dropped, rather than queued as it is: a chunk of a response body shares the HTTP layer's
/// receive buffer, and holding it while the disk catches up makes that layer allocate a fresh
/// buffer for every read, which the allocator hands back to the kernel once freed, so every
/// page of the download was page-faulted and zeroed before the socket data was copied into
/// it. One extra copy in user space is cheaper than that, and each batch is then one
/// contiguous `write`. A chunk of a whole batch or more that arrives at a batch boundary is
/// written as it is. At most [`WRITE_DEPTH`] + 2 buffers exist at a time.
pub(crate) struct FileSink {
    tx: Option<mpsc::Sender<Batch>>,
    /// Buffers the writer has emptied.
    free: std::sync::mpsc::Receiver<Vec<u8>>,
    /// The batch being filled (no capacity until the first byte arrives).
    cur: Vec<u8>,
    done: tokio::task::JoinHandle<io::Result<u64>>,
}

impl FileSink {
    /// Starts writing to `file`.
    pub(crate) fn start(file: File) -> Self {
        let (tx, rx) = mpsc::channel::<Batch>(WRITE_DEPTH);
        let (free_tx, free) = std::sync::mpsc::channel();
        let done = tokio::task::spawn_blocking(move || write_batches(file, rx, free_tx));
        Self {
            tx: Some(tx),
            free,
            cur: Vec::new(),
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
    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<(), WriterStopped> {
        if self.cur.is_empty() && chunk.len() >= WRITE_BATCH {
            return self.send(Batch::Shared(chunk)).await;
        }
        let mut data = &chunk[..];
        while !data.is_empty() {
            if self.cur.capacity() == 0 {
                self.cur = self
                    .free
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(WRITE_BATCH));
            }
            let n = (WRITE_BATCH - self.cur.len()).min(data.len());
            self.cur.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.cur.len() >= WRITE_BATCH {
                let full = std::mem::take(&mut self.cur);
                self.send(Batch::Owned(full)).await?;
            }
        }
        Ok(())
    }

    /// Writes what is left, closes the input and waits for every byte to reach the file.
    /// Returns the bytes written, or the writer's error.
    pub(crate) async fn finish(mut self) -> io::Result<u64> {
        if !self.cur.is_empty() {
            let last = std::mem::take(&mut self.cur);
            // A failed send means the writer stopped; its result says why.
            let _ = self.send(Batch::Owned(last)).await;
        }
        self.tx = None;
        match (&mut self.done).await {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }
}

/// The writer thread of a [`FileSink`] stopped (after an error, which
/// [`FileSink::finish`] returns).
#[derive(Debug)]
pub(crate) struct WriterStopped;

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[tokio::test]
    async fn read_then_write_round_trips() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        for size in [0usize, 1, 4095, READ_CHUNK, READ_CHUNK * 3 + 17] {
            let data = pattern(size);
            let src = dir.path().join(format!("src-{size}"));
            std::fs::write(&src, &data)?;
            let mut chunks = Vec::new();
            let mut s = std::pin::pin!(read_file(File::open(&src)?, size as u64));
            while let Some(c) = s.next().await {
                chunks.push(c?);
            }
            assert_eq!(chunks.iter().map(Bytes::len).sum::<usize>(), size);
            let dst = dir.path().join(format!("dst-{size}"));
            let mut sink = FileSink::start(File::create(&dst)?);
            // Odd-sized pieces, so batches end in the middle of a chunk.
            for c in chunks {
                let mut c = c;
                while !c.is_empty() {
                    let piece = c.split_to(c.len().min(100_003));
                    sink.write(piece)
                        .await
                        .map_err(|_| io::Error::other("writer stopped"))?;
                }
            }
            let n = sink.finish().await?;
            assert_eq!(n, size as u64);
            assert_eq!(std::fs::read(&dst)?, data);
        }
        Ok(())
    }

    #[tokio::test]
    async fn file_sink_copies_small_chunks_and_passes_large_ones() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let data = pattern(WRITE_BATCH * 3 + 77);
        let p = dir.path().join("out");
        // Small chunks are copied into batches; a chunk of a whole batch or more that arrives
        // at a batch boundary is written as it is; both in order.
        for sizes in [&[65_537][..], &[WRITE_BATCH * 2 + 5, 7, WRITE_BATCH, 1][..]] {
            let mut sink = FileSink::start(File::create(&p)?);
            let mut rest = &data[..];
            for n in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at((*n).min(rest.len()));
                rest = tail;
                sink.write(Bytes::copy_from_slice(piece))
                    .await
                    .map_err(|_| io::Error::other("writer stopped"))?;
            }
            assert_eq!(sink.finish().await?, data.len() as u64);
            assert_eq!(std::fs::read(&p)?, data, "chunk sizes {sizes:?}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn file_sink_reports_a_failed_write() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("ro");
        std::fs::write(&p, b"")?;
        // Opened read-only: every write fails.
        let mut sink = FileSink::start(File::open(&p)?);
        let chunk = Bytes::from(pattern(100_000));
        let mut stopped = false;
        for _ in 0..(WRITE_BATCH * (WRITE_DEPTH + 4) / chunk.len()) {
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
}
