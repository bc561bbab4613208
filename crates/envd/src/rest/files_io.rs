//! Streaming plumbing for `/files`: a file read into a bounded stream of chunks (optionally
//! gzip-compressed), a stream gunzipped on a blocking thread, and a blocking file writer fed
//! through a bounded channel. Memory stays at a few chunks whatever the file size.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek as _, SeekFrom, Write};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use tokio::sync::mpsc;

/// Size of the chunks read from disk and of the writer's buffer.
pub(crate) const CHUNK: usize = 256 * 1024;
/// Chunks in flight between a blocking thread and the async side.
const DEPTH: usize = 4;

fn rx_stream<T: Send + 'static>(rx: mpsc::Receiver<T>) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// Streams `len` bytes of `file` from `offset` in [`CHUNK`]-sized pieces.
pub(crate) fn read_stream(mut file: File, offset: u64, len: u64) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        if offset > 0
            && let Err(e) = file.seek(SeekFrom::Start(offset))
        {
            let _ = tx.blocking_send(Err(e));
            return;
        }
        let mut left = len;
        while left > 0 {
            let want = left.min(CHUNK as u64) as usize;
            let mut buf = BytesMut::zeroed(want);
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    left -= n as u64;
                    if tx.blocking_send(Ok(buf.freeze())).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
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
        self.tx.blocking_send(Ok(chunk)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
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
pub(crate) fn gzip_stream(mut file: File) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter { tx: tx.clone(), buf: BytesMut::with_capacity(CHUNK) };
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
            let item = item.map_err(|e| io::Error::other(format!("reading the request body failed: {e}")));
            let stop = item.is_err();
            if in_tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    tokio::task::spawn_blocking(move || {
        let mut dec = flate2::read::MultiGzDecoder::new(ChannelReader { rx: in_rx, cur: Bytes::new() });
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
                    let e = if is_body { e } else { io::Error::new(io::ErrorKind::InvalidData, format!("{GZIP_ERROR_PREFIX}: {e}")) };
                    let _ = out_tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    rx_stream(out_rx)
}

/// A file being written on a blocking thread. Send chunks with [`FileSink::write`], then
/// [`FileSink::finish`]; dropping it without finishing abandons the write.
pub(crate) struct FileSink {
    tx: Option<mpsc::Sender<Bytes>>,
    done: tokio::task::JoinHandle<io::Result<u64>>,
}

impl FileSink {
    /// Starts writing to `file` (buffered in [`CHUNK`] pieces).
    pub(crate) fn start(file: File) -> Self {
        let (tx, mut rx) = mpsc::channel::<Bytes>(DEPTH * 2);
        let done = tokio::task::spawn_blocking(move || {
            let mut w = BufWriter::with_capacity(CHUNK, file);
            let mut total = 0u64;
            while let Some(chunk) = rx.blocking_recv() {
                w.write_all(&chunk)?;
                total += chunk.len() as u64;
            }
            w.flush()?;
            Ok(total)
        });
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
