//! Local file I/O for streamed transfers, on blocking threads with bounded channels.
//!
//! Reading: 1 MiB reads straight into recycled buffers that are never zero-filled (the HTTP
//! layer writes them out and drops them; the reader takes them back). Writing: received chunks
//! are gathered into ~1 MiB batches and written with one `writev` each, without copying them
//! through a `BufWriter`. Memory stays at a few MiB whatever the file size.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Read as _, Write as _};

use bytes::{Buf as _, Bytes};
use futures::Stream;
use tokio::sync::mpsc;

/// Size of the reads from a local file.
const READ_CHUNK: usize = 512 * 1024;
/// Chunks read ahead of the network.
const READ_DEPTH: usize = 4;
/// The writer gathers chunks until it has this many bytes (or the input ends)...
const WRITE_BATCH: usize = 1024 * 1024;
/// ...or this many pieces, then writes them with one `writev`.
const WRITE_PIECES: usize = 256;
/// Chunks queued for the writer.
pub(crate) const WRITE_DEPTH: usize = 4;

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

/// Writes every byte of `pending` to `file` with `writev`, emptying it.
fn write_pending(file: &mut File, pending: &mut VecDeque<Bytes>) -> io::Result<()> {
    while !pending.is_empty() {
        let n = {
            let slices: Vec<IoSlice<'_>> = pending.iter().map(|b| IoSlice::new(b)).collect();
            match file.write_vectored(&slices) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the file accepted no more bytes",
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        let mut left = n;
        while left > 0 {
            let Some(front) = pending.front_mut() else {
                break;
            };
            if front.len() <= left {
                left -= front.len();
                pending.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
    }
    Ok(())
}

/// Writes the chunks arriving on `rx` to `file` in batches of about [`WRITE_BATCH`] bytes
/// (each one `writev`, no copying). Returns the bytes written.
pub(crate) fn write_chunks(mut file: File, mut rx: mpsc::Receiver<Bytes>) -> io::Result<u64> {
    let mut pending: VecDeque<Bytes> = VecDeque::with_capacity(WRITE_PIECES);
    let (mut queued, mut total) = (0usize, 0u64);
    let mut open = true;
    while open {
        match rx.blocking_recv() {
            Some(chunk) => {
                if chunk.is_empty() {
                    continue;
                }
                queued += chunk.len();
                total += chunk.len() as u64;
                pending.push_back(chunk);
                if queued < WRITE_BATCH && pending.len() < WRITE_PIECES {
                    continue;
                }
            }
            None => open = false,
        }
        write_pending(&mut file, &mut pending)?;
        queued = 0;
    }
    Ok(total)
}

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
            let (tx, rx) = mpsc::channel(WRITE_DEPTH);
            let file = File::create(&dst)?;
            let writer = tokio::task::spawn_blocking(move || write_chunks(file, rx));
            // Odd-sized pieces, so batches end in the middle of a chunk.
            for c in chunks {
                let mut c = c;
                while !c.is_empty() {
                    let piece = c.split_to(c.len().min(100_003));
                    tx.send(piece).await.map_err(io::Error::other)?;
                }
            }
            drop(tx);
            let n = writer.await.map_err(io::Error::other)??;
            assert_eq!(n, size as u64);
            assert_eq!(std::fs::read(&dst)?, data);
        }
        Ok(())
    }
}
