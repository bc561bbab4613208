//! gzip compression and decompression of byte streams, on blocking threads with bounded
//! channels, so memory stays at a few chunks and the async runtime never runs the codec.

use std::io::{self, Read, Write};

use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

/// Size of the chunks the codecs hand out.
pub const GZIP_CHUNK: usize = 256 * 1024;
/// Chunks in flight on each side of a codec thread.
const DEPTH: usize = 4;

/// Why a gunzipped stream failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GunzipError {
    /// Reading the compressed input failed (for a request body: the client or the network).
    #[error("reading the compressed input failed: {0}")]
    Input(#[source] io::Error),
    /// The input is not valid gzip data (corrupt or truncated).
    #[error("invalid gzip data: {0}")]
    Gzip(#[source] io::Error),
}

/// Forwards `input` into a bounded channel, so a blocking thread can read it.
fn forward<S, E>(input: S, map: fn(E) -> io::Error) -> mpsc::Receiver<io::Result<Bytes>>
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Send + 'static,
{
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::spawn(async move {
        let mut input = std::pin::pin!(input);
        while let Some(item) = input.next().await {
            let item = item.map_err(map);
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    rx
}

/// An input error as an `io::Error`, itself when it is one (so its kind survives).
fn into_io_error<E: std::error::Error + Send + Sync + 'static>(e: E) -> io::Error {
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    match boxed.downcast::<io::Error>() {
        Ok(io) => *io,
        Err(other) => io::Error::other(other),
    }
}

/// A `Write` that hands its bytes to a channel in [`GZIP_CHUNK`]-sized pieces.
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
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the consumer went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= GZIP_CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Compresses `input` with gzip (fast level: the link, not the ratio, matters), on a blocking
/// thread, in chunks of up to [`GZIP_CHUNK`] bytes. An input error ends the output with that
/// error. Needs a tokio runtime.
pub fn gzip_stream<S>(input: S) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'static,
{
    let mut in_rx = forward(input, |e| e);
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter {
            tx: tx.clone(),
            buf: BytesMut::with_capacity(GZIP_CHUNK),
        };
        let mut enc = flate2::write::GzEncoder::new(writer, flate2::Compression::fast());
        let result = (|| -> io::Result<()> {
            while let Some(chunk) = in_rx.blocking_recv() {
                enc.write_all(&chunk?)?;
            }
            enc.finish()?.flush()
        })();
        if let Err(e) = result
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            let _ = tx.blocking_send(Err(e));
        }
    });
    ReceiverStream::new(rx)
}

/// A `Read` over chunks arriving on a channel (end of channel = end of input).
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
    /// The input failed (kept apart from decoding errors).
    input_error: Option<io::Error>,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => {
                    self.input_error = Some(e);
                    return Err(io::Error::other("the input failed"));
                }
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

/// Decompresses a gzip stream (several members allowed) on a blocking thread, in chunks of up
/// to [`GZIP_CHUNK`] bytes. An input error ends the output with [`GunzipError::Input`]; corrupt
/// or truncated gzip data with [`GunzipError::Gzip`]. Needs a tokio runtime.
pub fn gunzip_stream<S, E>(
    input: S,
) -> impl Stream<Item = Result<Bytes, GunzipError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let in_rx = forward(input, into_io_error::<E>);
    let (tx, rx) = mpsc::channel::<Result<Bytes, GunzipError>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        let mut dec = flate2::read::MultiGzDecoder::new(ChannelReader {
            rx: in_rx,
            cur: Bytes::new(),
            input_error: None,
        });
        loop {
            let mut buf = BytesMut::zeroed(GZIP_CHUNK);
            match dec.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(buf.freeze())).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let err = match dec.get_mut().input_error.take() {
                        Some(input) => GunzipError::Input(input),
                        None => GunzipError::Gzip(e),
                    };
                    let _ = tx.blocking_send(Err(err));
                    return;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}
