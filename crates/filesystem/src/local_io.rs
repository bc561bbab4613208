//! Local file I/O for streamed transfers, on blocking threads with bounded channels.
//!
//! Reading: 1 MiB reads straight into recycled buffers that are never zero-filled (the HTTP
//! layer writes them out and drops them; the reader takes them back). Writing: each received
//! chunk is copied at once into a few recycled 256 KiB buffers and dropped, so the HTTP layer
//! can reuse its receive buffer (see [`e2b_file_io::FileSink`]); each buffer is written with one `write`.
//! Memory stays at a few MiB whatever the file size.

use std::fs::File;
use std::io;

use bytes::Bytes;
use e2b_file_io::{FileSink, ReadOptions};
use futures::Stream;

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

/// Streams the first `len` bytes of a local file (fewer if it is shorter), read on a
/// blocking thread.
pub(crate) fn read_file(
    file: File,
    len: u64,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    e2b_file_io::read_stream(file, 0, len, ReadOptions::new(READ_CHUNK, READ_DEPTH))
}

/// Starts writing a download to `file` in [`WRITE_BATCH`]-sized batches (see
/// [`e2b_file_io::FileSink`] for why received chunks are copied into recycled buffers).
pub(crate) fn file_sink(file: File) -> FileSink {
    FileSink::start(file, WRITE_BATCH, WRITE_DEPTH)
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
            let mut sink = file_sink(File::create(&dst)?);
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
}
