//! Unpacking a tarball template, measured against GNU tar in one run (ratio):
//!
//! 1. a gzip tarball of the host's `/usr/bin` (built once with the `tar` crate);
//! 2. `TemplateCache::prepare` into a fresh cache (hash + hostile-safe unpack + rename) vs
//!    `tar -xzf` of the same file into a fresh directory, interleaved, median of N rounds;
//! 3. `prepare` of the already-unpacked tarball (what every later sandbox pays).
//!
//! ```text
//! cargo bench -p e2b-isolation --bench bench_template -- [ROUNDS]
//! ```
//!
//! Needs root (owners are kept) and GNU tar.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use e2b_isolation::{Template, TemplateCache};

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3);
    let work = Path::new("/var/tmp").join(format!("e2b-bench-template-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let tarball = work.join("usr-bin.tar.gz");
    {
        let file = std::fs::File::create(&tarball).unwrap();
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        b.follow_symlinks(false);
        b.append_dir_all("usr/bin", "/usr/bin").unwrap();
        b.into_inner().unwrap().finish().unwrap();
    }
    let size = std::fs::metadata(&tarball).unwrap().len();
    let template = Template::Archive(tarball.clone());
    let mut ours = Vec::new();
    let mut gnu = Vec::new();
    let mut cached = Vec::new();
    for round in 0..rounds {
        let cache = TemplateCache::new(work.join(format!("cache-{round}")));
        let t = Instant::now();
        let p = cache.prepare(&template).unwrap();
        ours.push(t.elapsed());
        assert!(p.unpacked);
        let t = Instant::now();
        let again = cache.prepare(&template).unwrap();
        cached.push(t.elapsed());
        assert!(!again.unpacked);

        let dest = work.join(format!("gnu-{round}"));
        std::fs::create_dir_all(&dest).unwrap();
        let t = Instant::now();
        let status = std::process::Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&dest)
            .status()
            .expect("GNU tar is needed for the baseline");
        gnu.push(t.elapsed());
        assert!(status.success());
        let _ = std::fs::remove_dir_all(work.join(format!("cache-{round}")));
        let _ = std::fs::remove_dir_all(&dest);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (o, g, c) = (median(&mut ours), median(&mut gnu), median(&mut cached));
    println!(
        "tarball {:.1} MiB (gzip), {rounds} rounds, load {}",
        size as f64 / (1 << 20) as f64,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "unpack: prepare {:.0} ms vs tar -xzf {:.0} ms: ratio {:.2}",
        o.as_secs_f64() * 1e3,
        g.as_secs_f64() * 1e3,
        o.as_secs_f64() / g.as_secs_f64()
    );
    println!(
        "cached prepare (every later sandbox): {:.0} µs ({:.5} of tar -xzf)",
        c.as_secs_f64() * 1e6,
        c.as_secs_f64() / g.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&work);
}
