//! The read and gzip streams against real files and real gzip data.

use std::fs::File;
use std::io::{self, Read as _, Write as _};

use bytes::Bytes;
use e2b_file_io::{
    FileSink, GunzipError, GunzipLimits, ReadOptions, Segment, gunzip_stream,
    gunzip_stream_limited, gzip_stream, read_segments, read_stream,
};
use tokio_stream::{Stream, StreamExt as _};

const CHUNK: usize = 64 * 1024;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
}

async fn collect<E>(s: impl Stream<Item = Result<Bytes, E>>) -> Result<Vec<u8>, E> {
    let mut s = std::pin::pin!(s);
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c?);
    }
    Ok(out)
}

#[tokio::test]
async fn test_read_stream_ranges_across_chunks() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let size = CHUNK * 5 + 123;
    let data = pattern(size);
    let p = dir.path().join("f");
    std::fs::write(&p, &data)?;
    let opts = ReadOptions::new(CHUNK, 2);
    for (off, len) in [
        (0, size),
        (1, size - 1),
        (CHUNK - 1, CHUNK + 2),
        (size - 10, 10),
        (0, 0),
    ] {
        let got = collect(read_stream(File::open(&p)?, off as u64, len as u64, opts)).await?;
        assert_eq!(got, &data[off..off + len], "offset {off} length {len}");
    }
    // A length past the end stops at the end.
    let got = collect(read_stream(File::open(&p)?, 0, size as u64 + 1000, opts)).await?;
    assert_eq!(got, data);
    Ok(())
}

#[tokio::test]
async fn test_read_segments_interleaves_literals_and_ranges() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = pattern(3 * CHUNK);
    let p = dir.path().join("f");
    std::fs::write(&p, &data)?;
    let segments = vec![
        Segment::Literal(Bytes::from_static(b"<a>")),
        Segment::File {
            offset: 2 * CHUNK as u64,
            len: 10,
        },
        Segment::Literal(Bytes::from_static(b"<b>")),
        Segment::File { offset: 5, len: 3 },
    ];
    let total: u64 = segments.iter().map(Segment::len).sum();
    let got = collect(read_segments(
        File::open(&p)?,
        ReadOptions::new(CHUNK, 2),
        segments,
    ))
    .await?;
    let mut want = b"<a>".to_vec();
    want.extend_from_slice(&data[2 * CHUNK..2 * CHUNK + 10]);
    want.extend_from_slice(b"<b>");
    want.extend_from_slice(&data[5..8]);
    assert_eq!(got, want);
    assert_eq!(total, want.len() as u64);
    Ok(())
}

#[tokio::test]
async fn test_read_then_sink_round_trips() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    for size in [0usize, 1, 4095, CHUNK, CHUNK * 3 + 17] {
        let data = pattern(size);
        let src = dir.path().join(format!("src-{size}"));
        std::fs::write(&src, &data)?;
        let mut s = std::pin::pin!(read_stream(
            File::open(&src)?,
            0,
            size as u64,
            ReadOptions::new(CHUNK, 4)
        ));
        let dst = dir.path().join(format!("dst-{size}"));
        let mut sink = FileSink::start(File::create(&dst)?, 16 * 1024, 4);
        while let Some(c) = s.next().await {
            let mut c = c?;
            // Odd-sized pieces, so batches end in the middle of a chunk.
            while !c.is_empty() {
                let piece = c.split_to(c.len().min(10_007));
                sink.write(piece).await.map_err(io::Error::other)?;
            }
        }
        assert_eq!(sink.finish().await?, size as u64);
        assert_eq!(std::fs::read(&dst)?, data);
    }
    Ok(())
}

#[tokio::test]
async fn test_gzip_stream_is_gzip() -> io::Result<()> {
    let data = pattern(3 * CHUNK + 5);
    let input = tokio_stream::iter(
        data.chunks(1000)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let gz = collect(gzip_stream(input)).await?;
    // Decoded by flate2's reader directly, not by our own gunzip.
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut out)?;
    assert_eq!(out, data);
    Ok(())
}

#[tokio::test]
async fn test_gzip_stream_passes_an_input_error_on() {
    let input = tokio_stream::iter(vec![
        Ok(Bytes::from_static(b"abc")),
        Err(io::Error::new(io::ErrorKind::ConnectionReset, "peer reset")),
    ]);
    let err = collect(gzip_stream(input)).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
}

fn gz(data: &[u8]) -> io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data)?;
    enc.finish()
}

#[tokio::test]
async fn test_gunzip_stream_reads_several_members() -> Result<(), Box<dyn std::error::Error>> {
    let a = pattern(CHUNK * 5);
    let mut body = gz(&a)?;
    body.extend_from_slice(&gz(b"tail")?);
    let input = tokio_stream::iter(
        body.chunks(777)
            .map(|c| Ok::<_, io::Error>(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let got = collect(gunzip_stream(input)).await?;
    let mut want = a;
    want.extend_from_slice(b"tail");
    assert_eq!(got, want);
    Ok(())
}

#[tokio::test]
async fn test_gunzip_stream_tells_corrupt_data_from_input_errors() -> io::Result<()> {
    let input = tokio_stream::iter(vec![Ok::<_, io::Error>(Bytes::from_static(
        b"this is not gzip",
    ))]);
    match collect(gunzip_stream(input)).await {
        Err(GunzipError::Gzip(_)) => {}
        other => panic!("expected a gzip error, got {other:?}"),
    }
    let truncated = gz(&pattern(10_000))?;
    let input = tokio_stream::iter(vec![Ok::<_, io::Error>(Bytes::copy_from_slice(
        &truncated[..truncated.len() / 2],
    ))]);
    match collect(gunzip_stream(input)).await {
        Err(GunzipError::Gzip(_)) => {}
        other => panic!("expected a gzip error for truncated data, got {other:?}"),
    }
    let input = tokio_stream::iter(vec![
        Ok(Bytes::copy_from_slice(&truncated[..10])),
        Err(io::Error::new(io::ErrorKind::ConnectionReset, "peer reset")),
    ]);
    match collect(gunzip_stream(input)).await {
        Err(GunzipError::Input(e)) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
        other => panic!("expected an input error, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn test_gunzip_stream_limited_stops_at_the_size_and_ratio_limits()
-> Result<(), Box<dyn std::error::Error>> {
    let zeros = vec![0u8; 4 << 20];
    let body = gz(&zeros)?;
    let input = || {
        tokio_stream::iter(
            body.chunks(4096)
                .map(|c| Ok::<_, io::Error>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        )
    };
    // Within both limits: everything.
    let got = collect(gunzip_stream_limited(
        input(),
        GunzipLimits::new(4 << 20, 2000),
    ))
    .await?;
    assert_eq!(got.len(), zeros.len());
    // Past the size.
    match collect(gunzip_stream_limited(
        input(),
        GunzipLimits::new(1 << 20, 2000),
    ))
    .await
    {
        Err(GunzipError::TooLarge { limit }) => assert_eq!(limit, 1 << 20),
        other => panic!("expected TooLarge, got {:?}", other.map(|v| v.len())),
    }
    // Past the ratio (checked from the first byte here).
    let mut limits = GunzipLimits::new(u64::MAX, 10);
    limits.ratio_floor = 0;
    match collect(gunzip_stream_limited(input(), limits)).await {
        Err(GunzipError::Ratio {
            limit,
            input,
            output,
        }) => {
            assert_eq!(limit, 10);
            assert!(output / input.max(1) > 10, "{output} / {input}");
        }
        other => panic!("expected Ratio, got {:?}", other.map(|v| v.len())),
    }
    Ok(())
}
