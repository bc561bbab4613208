//! Benchmarks of the splitter (criterion).
//! The splitter on one huge line fed in 4 KiB chunks, against a plain `memchr` scan of the same
//! bytes, and 64 MiB against 32 MiB (linear time).
//!
//! `cargo bench -p e2b-acp --bench framing`
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use e2b_acp::LineSplitter;

const CHUNK: usize = 4096;

fn line(mib: usize) -> Vec<u8> {
    let mut v = vec![b'a'; mib * 1024 * 1024];
    v.push(b'\n');
    v
}

fn memchr_scan(data: &[u8]) -> usize {
    let mut found = 0;
    for chunk in data.chunks(CHUNK) {
        if memchr::memchr(b'\n', chunk).is_some() {
            found += 1;
        }
    }
    found
}

fn split(data: &[u8], max: usize) -> usize {
    let mut s = match LineSplitter::new(max) {
        Ok(s) => s,
        Err(_) => return 0,
    };
    let mut n = 0;
    for chunk in data.chunks(CHUNK) {
        s.push(chunk);
        while let Some(Ok(l)) = s.next_line() {
            n += l.len();
        }
    }
    n
}

/// Chunks handed over as `Bytes`, as the transport's readers produce them (no copy on push).
fn split_bytes(chunks: &[bytes::Bytes], max: usize) -> usize {
    let mut s = match LineSplitter::new(max) {
        Ok(s) => s,
        Err(_) => return 0,
    };
    let mut n = 0;
    for chunk in chunks {
        s.push_bytes(chunk.clone());
        while let Some(Ok(l)) = s.next_line() {
            n += l.len();
        }
    }
    n
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("one_line_4k_chunks");
    g.sample_size(10);
    for mib in [32usize, 64] {
        let data = line(mib);
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_with_input(BenchmarkId::new("memchr_scan", mib), &data, |b, d| {
            b.iter(|| std::hint::black_box(memchr_scan(d)))
        });
        g.bench_with_input(
            BenchmarkId::new("line_splitter_copy", mib),
            &data,
            |b, d| b.iter(|| std::hint::black_box(split(d, 128 * 1024 * 1024))),
        );
        let chunks: Vec<bytes::Bytes> = data
            .chunks(CHUNK)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        g.bench_with_input(
            BenchmarkId::new("line_splitter_bytes", mib),
            &chunks,
            |b, d| b.iter(|| std::hint::black_box(split_bytes(d, 128 * 1024 * 1024))),
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
