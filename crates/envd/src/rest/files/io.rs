//! Streaming plumbing for `/files`: a file read into a bounded stream of chunks (optionally
//! gzip-compressed), a stream gunzipped on a blocking thread, and a blocking file writer fed
//! through a bounded channel. Memory stays at a few chunks whatever the file size.
//!
//! The plain paths avoid per-byte work besides the copies: downloads read 1 MiB at a time
//! straight into recycled, never-zeroed buffers (hyper writes them out with `writev` and drops
//! them, and the reader takes them back), possibly as several ranges with multipart headers in
//! between; uploads copy each received chunk into recycled 512 KiB buffers at once (so the HTTP
//! layer can reuse its receive buffer, see [`FileSink`]) and write each with one `write`.

use std::fs::File;
use std::io;

use bytes::Bytes;
use e2b_file_io::{FileSink, ReadOptions};
use futures::{Stream, StreamExt as _};

/// Size of the reads from disk on plain downloads.
const READ_CHUNK: usize = 1024 * 1024;
/// The writer writes uploads in batches of this many bytes. Measured on a 2-core Firecracker
/// VM with ext4 (1 GiB uploads, `bench_files`): 512 KiB and 256 KiB batches cost the same
/// from the first upload on, while 1 MiB batches (every write 1 MiB long at a 1 MiB-aligned
/// offset) made the first upload in a daemon process 2-3x slower, all of it in the kernel's
/// copy into the page cache (probably the largest page-cache folios taking never-touched
/// memory, which costs the hypervisor a fault per page; not confirmed).
const WRITE_BATCH: usize = 512 * 1024;
/// Chunks in flight between a blocking thread and the async side.
const DEPTH: usize = 4;

/// A piece of a download body: bytes sent as they are, or a range of the file.
pub(crate) use e2b_file_io::Segment;

/// Streams `len` bytes of `file` from `offset` in [`READ_CHUNK`]-sized pieces (see
/// [`e2b_file_io::read_stream`]).
pub(crate) fn read_stream(
    file: File,
    offset: u64,
    len: u64,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    e2b_file_io::read_stream(file, offset, len, ReadOptions::new(READ_CHUNK, DEPTH))
}

/// Streams `segments` in order, file ranges read in pieces of up to `chunk` bytes (at most
/// [`READ_CHUNK`]) into recycled buffers (see [`e2b_file_io::read_segments`]).
pub(crate) fn read_segments<I>(
    file: File,
    chunk: usize,
    segments: I,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    I: IntoIterator<Item = Segment>,
    I::IntoIter: Send + 'static,
{
    e2b_file_io::read_segments(
        file,
        ReadOptions::new(chunk.clamp(1, READ_CHUNK), DEPTH),
        segments,
    )
}

/// Streams the whole of `file` gzip-compressed (fast level), read in [`READ_CHUNK`] pieces and
/// compressed on a blocking thread by [`e2b_file_io::gzip_stream`].
pub(crate) fn gzip_stream(file: File) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    e2b_file_io::gzip_stream(read_stream(file, 0, u64::MAX))
}

/// Error kind marking a gzip decoding failure (as opposed to a body read failure).
pub(crate) const GZIP_ERROR_PREFIX: &str = "invalid gzip data";

/// Start of the message of an error raised because a request passed a configured limit (the
/// handlers answer 413 for it).
pub(crate) const LIMIT_ERROR_PREFIX: &str = "request too large";

/// Bounds on a gzip request body (see [`e2b_file_io::GunzipLimits`]).
pub(crate) use e2b_file_io::GunzipLimits as GzipLimits;

/// Decompresses a gzip request body with [`e2b_file_io::gunzip_stream_limited`] (on a
/// blocking thread, several members allowed), within `limits`. A body read error passes
/// through; corrupt or truncated gzip data ends the stream with an `InvalidData` error whose
/// message starts with [`GZIP_ERROR_PREFIX`], a passed limit with one starting with
/// [`LIMIT_ERROR_PREFIX`] (the handlers answer 400 and 413).
pub(crate) fn gunzip<S>(
    body: S,
    limits: GzipLimits,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'static,
{
    use e2b_file_io::GunzipError;
    e2b_file_io::gunzip_stream_limited(body, limits).map(|item| {
        item.map_err(|e| match e {
            GunzipError::Input(e) => e,
            GunzipError::Gzip(e) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{GZIP_ERROR_PREFIX}: {e}"),
            ),
            limit @ (GunzipError::TooLarge { .. } | GunzipError::Ratio { .. }) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{LIMIT_ERROR_PREFIX}: {limit} (the daemon's max_decompressed_bytes / max_gzip_ratio)"
                ),
            ),
            other => io::Error::other(other.to_string()),
        })
    })
}

/// Why a path could not be opened for its content.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The OS refused.
    Io(io::Error),
    /// Not a regular file: what it is instead (`"a directory"`, `"a FIFO"`, ...).
    NotRegular(&'static str),
}

/// What kind of non-regular file `ft` is, for messages.
pub(crate) fn kind_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading its content: with `O_NONBLOCK` (so a FIFO without a writer does
/// not block the thread), then `fstat`; anything but a regular file is refused at once.
/// Blocking (call it on the blocking pool).
pub(crate) fn open_regular(path: &std::path::Path) -> Result<(File, std::fs::Metadata), OpenError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(OpenError::Io)?;
    let meta = file.metadata().map_err(OpenError::Io)?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular(kind_name(meta.file_type())));
    }
    Ok((file, meta))
}

/// Starts writing an upload to `file` in [`WRITE_BATCH`]-sized batches (see
/// [`e2b_file_io::FileSink`] for why received chunks are copied into recycled buffers).
pub(crate) fn file_sink(file: File) -> FileSink {
    FileSink::start(file, WRITE_BATCH, DEPTH)
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
}
