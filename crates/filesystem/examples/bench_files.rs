//! Benchmark: upload and download of a large file through envd's `/files` vs `cp` on the same
//! disk, with the peak RSS of the daemon and of this client.
//!
//! ```text
//! cargo build --release -p e2b-envd --bin e2b-envd
//! cargo run --release -p e2b-filesystem --example bench_files -- [SIZE_MIB] [DIR]
//! ```
//!
//! The daemon binary comes from `E2B_ENVD_BIN` (default `target/release/e2b-envd`) and runs as
//! a separate process so its memory is measured on its own.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
use e2b_filesystem::{Filesystem, WriteOptions};

fn vm_hwm_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn mib_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / secs
}

fn write_test_file(path: &Path, size: u64) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut left = size;
    while left > 0 {
        for b in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    f.get_ref().sync_all()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let size_mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let base = args.get(2).map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let size = size_mib * 1024 * 1024;
    let dir = tempfile::tempdir_in(&base)?;
    let src = dir.path().join("src.bin");
    println!("writing a {size_mib} MiB test file in {}", dir.path().display());
    write_test_file(&src, size)?;

    // cp on the same disk.
    let t = Instant::now();
    let st = Command::new("cp").arg(&src).arg(dir.path().join("cp.bin")).status()?;
    let cp_secs = t.elapsed().as_secs_f64();
    if !st.success() {
        return Err("cp failed".into());
    }
    std::fs::remove_file(dir.path().join("cp.bin"))?;

    // The daemon, as its own process.
    let bin = std::env::var("E2B_ENVD_BIN").unwrap_or_else(|_| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        root.join("target/release/e2b-envd").to_string_lossy().into_owned()
    });
    let mut daemon = Command::new(&bin)
        .args(["--port", "0", "--bind", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let mut line = String::new();
    if let Some(out) = daemon.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line)?;
    }
    let url = line.trim().to_string();
    let pid = daemon.id().to_string();
    let daemon_rss_idle = vm_hwm_kib(&pid);
    let fs = Filesystem::new(EnvdConnection::new(EnvdEndpoint::new(url))?);

    let remote = dir.path().join("uploaded.bin");
    let remote = remote.to_str().ok_or("path")?;
    let t = Instant::now();
    fs.write_from_file(remote, &src, &WriteOptions::default()).await?;
    let up_secs = t.elapsed().as_secs_f64();
    let daemon_rss_after_up = vm_hwm_kib(&pid);
    let client_rss_after_up = vm_hwm_kib("self");

    let back = dir.path().join("downloaded.bin");
    let t = Instant::now();
    let n = fs.read_to_file(remote, &back).await?;
    let down_secs = t.elapsed().as_secs_f64();
    let daemon_rss = vm_hwm_kib(&pid);
    let client_rss = vm_hwm_kib("self");
    let _ = daemon.kill();
    let _ = daemon.wait();

    if n != size || std::fs::metadata(remote)?.len() != size {
        return Err("size mismatch".into());
    }
    println!("file size           {size_mib} MiB");
    println!("cp                  {cp_secs:.3} s  ({:.0} MiB/s)", mib_s(size, cp_secs));
    println!(
        "upload   /files     {up_secs:.3} s  ({:.0} MiB/s)  ratio vs cp {:.2}",
        mib_s(size, up_secs),
        cp_secs / up_secs
    );
    println!(
        "download /files     {down_secs:.3} s  ({:.0} MiB/s)  ratio vs cp {:.2}",
        mib_s(size, down_secs),
        cp_secs / down_secs
    );
    println!(
        "peak RSS daemon     {:.1} MiB (idle {:.1} MiB, after upload {:.1} MiB)",
        daemon_rss as f64 / 1024.0,
        daemon_rss_idle as f64 / 1024.0,
        daemon_rss_after_up as f64 / 1024.0
    );
    println!(
        "peak RSS client     {:.1} MiB (after upload {:.1} MiB)",
        client_rss as f64 / 1024.0,
        client_rss_after_up as f64 / 1024.0
    );
    Ok(())
}
