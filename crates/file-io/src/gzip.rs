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
    /// The data decompresses to more than [`GunzipLimits::max_output`] bytes.
    #[error(
        "the gzip data decompresses to more than {limit} bytes; send it uncompressed or in parts"
    )]
    TooLarge {
        /// The limit passed.
        limit: u64,
    },
    /// Past [`GunzipLimits::ratio_floor`] decompressed bytes, the data expands more than
    /// [`GunzipLimits::max_ratio`]-fold (a gzip bomb).
    #[error(
        "the gzip data expands more than {limit}-fold ({input} bytes became more than {output}); send it uncompressed"
    )]
    Ratio {
        /// The ratio limit.
        limit: u64,
        /// Compressed bytes read so far.
        input: u64,
        /// Decompressed bytes so far.
        output: u64,
    },
}

/// Bounds on what [`gunzip_stream_limited`] decompresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GunzipLimits {
    /// Most decompressed bytes.
    pub max_output: u64,
    /// Most decompressed bytes per compressed byte, once past `ratio_floor`.
    pub max_ratio: u64,
    /// Below this many decompressed bytes the ratio is not checked.
    pub ratio_floor: u64,
}

impl GunzipLimits {
    /// No bound.
    pub const UNLIMITED: Self = Self {
        max_output: u64::MAX,
        max_ratio: u64::MAX,
        ratio_floor: u64::MAX,
    };

    /// At most `max_output` decompressed bytes and, past 64 MiB of output, at most
    /// `max_ratio` decompressed bytes per compressed byte.
    pub fn new(max_output: u64, max_ratio: u64) -> Self {
        Self {
            max_output,
            max_ratio,
            ratio_floor: 64 * 1024 * 1024,
        }
    }

    /// The error for `output` decompressed bytes out of `input` compressed ones, if any.
    fn check(&self, input: u64, output: u64) -> Option<GunzipError> {
        if output > self.max_output {
            Some(GunzipError::TooLarge {
                limit: self.max_output,
            })
        } else if output > self.ratio_floor && output / input.max(1) > self.max_ratio {
            Some(GunzipError::Ratio {
                limit: self.max_ratio,
                input,
                output,
            })
        } else {
            None
        }
    }
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
    gunzip_stream_limited(input, GunzipLimits::UNLIMITED)
}

/// [`gunzip_stream`] within `limits`: past a limit the output ends with
/// [`GunzipError::TooLarge`] or [`GunzipError::Ratio`] (nothing beyond the limit is handed
/// out), for bodies from untrusted peers. Needs a tokio runtime.
pub fn gunzip_stream_limited<S, E>(
    input: S,
    limits: GunzipLimits,
) -> impl Stream<Item = Result<Bytes, GunzipError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let compressed = Arc::new(AtomicU64::new(0));
    let counted = compressed.clone();
    let input = input.map(move |item| {
        if let Ok(b) = &item {
            counted.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        item
    });
    let in_rx = forward(input, into_io_error::<E>);
    let (tx, rx) = mpsc::channel::<Result<Bytes, GunzipError>>(DEPTH);
    tokio::task::spawn_blocking(move || {
        let mut dec = flate2::read::MultiGzDecoder::new(ChannelReader {
            rx: in_rx,
            cur: Bytes::new(),
            input_error: None,
        });
        let mut output = 0u64;
        loop {
            let mut buf = BytesMut::zeroed(GZIP_CHUNK);
            match dec.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    output += n as u64;
                    if let Some(e) = limits.check(compressed.load(Ordering::Relaxed), output) {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
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
