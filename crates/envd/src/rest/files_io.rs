//! Streaming plumbing for `/files`: a file read into a bounded stream of chunks (optionally
//! gzip-compressed), a stream gunzipped on a blocking thread, and a blocking file writer fed
//! through a bounded channel. Memory stays at a few chunks whatever the file size.
//!
//! The plain paths avoid per-byte work besides the kernel's copies: downloads read 1 MiB at a
//! time straight into recycled, never-zeroed buffers (hyper writes them out with `writev` and
//! drops them, and the reader takes them back), and the writer hands the chunks it received to
//! `writev` in ~1 MiB batches instead of copying them through a `BufWriter`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Read, Seek as _, SeekFrom, Write};

use bytes::{Buf as _, Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use tokio::sync::mpsc;

/// Size of the gzip and gunzip buffers.
pub(crate) const CHUNK: usize = 256 * 1024;
/// Size of the reads from disk on plain downloads.
const READ_CHUNK: usize = 1024 * 1024;
/// The writer gathers received chunks until it has this many bytes (or the input pauses)...
const WRITE_BATCH: usize = 1024 * 1024;
/// ...or this many pieces, then writes them with one `writev`.
const WRITE_PIECES: usize = 256;
/// Chunks in flight between a blocking thread and the async side.
const DEPTH: usize = 4;

fn rx_stream<T: Send + 'static>(rx: mpsc::Receiver<T>) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// Buffers handed to the HTTP layer come back here once they have been written and dropped,
/// so a long download reuses a handful of allocations instead of making (and page-faulting)
/// one per chunk. A buffer still in use is simply not reused: memory stays bounded by
/// [`Recycler::KEEP`] plus the chunks in flight.
struct Recycler {
    out: VecDeque<Bytes>,
    size: usize,
}

impl Recycler {
    const KEEP: usize = DEPTH + 4;

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

    /// Remembers a buffer being sent, to take it back later.
    fn track(&mut self, b: &Bytes) {
        self.out.push_back(b.clone());
    }
}

/// Reads up to `want` bytes into `buf` (empty, with room for `want`), without zero-filling
/// it first (`read_to_end` reads into the spare capacity). Fewer bytes only at end of file.
/// `read_to_end` retries interrupted reads itself.
fn read_into(file: &mut File, buf: &mut Vec<u8>, want: usize) -> io::Result<()> {
    (&mut *file).take(want as u64).read_to_end(buf).map(|_| ())
}

/// Streams `len` bytes of `file` from `offset` in [`READ_CHUNK`]-sized pieces.
pub(crate) fn read_stream(
    mut file: File,
    offset: u64,
    len: u64,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        if offset > 0
            && let Err(e) = file.seek(SeekFrom::Start(offset))
        {
            let _ = tx.blocking_send(Err(e));
            return;
        }
        let mut pool = Recycler::new(
            READ_CHUNK
                .min(usize::try_from(len).unwrap_or(READ_CHUNK))
                .max(1),
        );
        let mut left = len;
        while left > 0 {
            let want = left.min(READ_CHUNK as u64) as usize;
            let mut buf = pool.take();
            let start = buf.len();
            if let Err(e) = read_into(&mut file, &mut buf, want) {
                let _ = tx.blocking_send(Err(e));
                return;
            }
            let n = buf.len() - start;
            if n == 0 {
                break; // the file shrank
            }
            left -= n as u64;
            let chunk = Bytes::from(buf);
            pool.track(&chunk);
            if tx.blocking_send(Ok(chunk)).is_err() {
                return;
            }
        }
    });
    rx_stream(rx)
}

/// A `Write` that hands its bytes to an async channel in [`CHUNK`]-sized pieces.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: BytesMut,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Streams the whole of `file` gzip-compressed (fast level: the link, not the ratio, matters).
pub(crate) fn gzip_stream(
    mut file: File,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter {
            tx: tx.clone(),
            buf: BytesMut::with_capacity(CHUNK),
        };
        let mut enc = flate2::write::GzEncoder::new(writer, flate2::Compression::fast());
        let mut buf = vec![0u8; CHUNK];
        let result = (|| -> io::Result<()> {
            loop {
                let n = match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                enc.write_all(&buf[..n])?;
            }
            let mut w = enc.finish()?;
            w.flush()
        })();
        if let Err(e) = result
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            let _ = tx.blocking_send(Err(e));
        }
    });
    rx_stream(rx)
}

/// A `Read` over chunks arriving on a channel (`None` item = end of input).
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

/// Error kind marking a gzip decoding failure (as opposed to a body read failure).
pub(crate) const GZIP_ERROR_PREFIX: &str = "invalid gzip data";

/// Decompresses a gzip stream (several members allowed) on a blocking thread. A body read
/// error passes through; corrupt or truncated gzip data ends the stream with an
/// `InvalidData` error whose message starts with [`GZIP_ERROR_PREFIX`].
pub(crate) fn gunzip<S, E>(body: S) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let (in_tx, in_rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    let (out_tx, out_rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::spawn(async move {
        let mut body = std::pin::pin!(body);
        while let Some(item) = body.next().await {
            let item =
                item.map_err(|e| io::Error::other(format!("reading the request body failed: {e}")));
            let stop = item.is_err();
            if in_tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    tokio::task::spawn_blocking(move || {
        let mut dec = flate2::read::MultiGzDecoder::new(ChannelReader {
            rx: in_rx,
            cur: Bytes::new(),
        });
        loop {
            let mut buf = BytesMut::zeroed(CHUNK);
            match dec.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    if out_tx.blocking_send(Ok(buf.freeze())).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let is_body = e.to_string().starts_with("reading the request body failed");
                    let e = if is_body {
                        e
                    } else {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{GZIP_ERROR_PREFIX}: {e}"),
                        )
                    };
                    let _ = out_tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    rx_stream(out_rx)
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

/// Writes the chunks arriving on `rx` to `file`, gathered into batches of about
/// [`WRITE_BATCH`] bytes (no copying: each batch is one `writev`). Returns the bytes written.
fn write_chunks(mut file: File, mut rx: mpsc::Receiver<Bytes>) -> io::Result<u64> {
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

/// A file being written on a blocking thread. Send chunks with [`FileSink::write`], then
/// [`FileSink::finish`]; dropping it without finishing abandons the write.
pub(crate) struct FileSink {
    tx: Option<mpsc::Sender<Bytes>>,
    done: tokio::task::JoinHandle<io::Result<u64>>,
}

impl FileSink {
    /// Starts writing to `file` (in batches of about [`WRITE_BATCH`] bytes).
    pub(crate) fn start(file: File) -> Self {
        let (tx, rx) = mpsc::channel::<Bytes>(DEPTH * 2);
        let done = tokio::task::spawn_blocking(move || write_chunks(file, rx));
        Self { tx: Some(tx), done }
    }

    /// Queues a chunk. Fails when the writer already stopped (its error comes from `finish`).
    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<(), ()> {
        match &self.tx {
            Some(tx) => tx.send(chunk).await.map_err(|_| ()),
            None => Err(()),
        }
    }

    /// Closes the input and waits for every byte to reach the file.
    pub(crate) async fn finish(mut self) -> io::Result<u64> {
        self.tx = None;
        match (&mut self.done).await {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(format!("file writer failed: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    async fn collect(s: impl Stream<Item = io::Result<Bytes>>) -> io::Result<Vec<u8>> {
        let mut s = std::pin::pin!(s);
        let mut out = Vec::new();
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn read_stream_ranges_across_chunks() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let size = READ_CHUNK * 5 + 123;
        let data = pattern(size);
        let p = dir.path().join("f");
        std::fs::write(&p, &data)?;
        for (off, len) in [
            (0, size),
            (1, size - 1),
            (READ_CHUNK - 1, READ_CHUNK + 2),
            (size - 10, 10),
            (0, 0),
        ] {
            let got = collect(read_stream(File::open(&p)?, off as u64, len as u64)).await?;
            assert_eq!(got, &data[off..off + len], "offset {off} length {len}");
        }
        // A length past the end stops at the end.
        let got = collect(read_stream(File::open(&p)?, 0, size as u64 + 1000)).await?;
        assert_eq!(got, data);
        Ok(())
    }

    #[tokio::test]
    async fn file_sink_writes_batches() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let data = pattern(WRITE_BATCH * 3 + 77);
        let p = dir.path().join("out");
        let mut sink = FileSink::start(File::create(&p)?);
        for piece in data.chunks(65_537) {
            sink.write(Bytes::copy_from_slice(piece))
                .await
                .map_err(|()| io::Error::other("writer stopped"))?;
        }
        assert_eq!(sink.finish().await?, data.len() as u64);
        assert_eq!(std::fs::read(&p)?, data);
        Ok(())
    }
}
