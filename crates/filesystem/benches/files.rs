//! Benchmark: upload and download of a large file through envd's `/files` vs `cp` on the same
//! disk, with the peak RSS of the daemon and of this client.
//!
//! ```text
//! cargo build --release -p e2b-envd --bin e2b-envd
//! cargo bench -p e2b-filesystem --bench files -- [SIZE_MIB] [DIR]   # or: scripts/bench filesystem
//! ```
//!
//! The daemon binary comes from `E2B_ENVD_BIN` (default `target/release/e2b-envd`) and runs as
//! a separate process so its memory is measured on its own. `BENCH_ROUNDS` (default 3) rounds
//! of cp / upload / download; each round's ratios use that round's `cp`, the summary is the
//! median. `BENCH_ONLY=up|down` times one direction (for a profiler).
//!
//! Every write-side step is timed the same way: `sync` first (outside the timer, so no step
//! pays for an earlier one's dirty pages), then the step, then `open` + `fsync` of the file it
//! wrote, inside the timer. So `cp` is `cp SRC DST` + fsync(DST), the upload is
//! `write_from_file` + fsync(uploaded file) and the download is `read_to_file` + fsync(local
//! copy): each ends when its 1 GiB is on disk, and no step is timed while the kernel still
//! holds its data as dirty pages (which it throttles and flushes differently from run to run).
//! The time at which the step itself returned (before the fsync, page cache only) is printed
//! too, with its ratio, for comparison with earlier runs. Each step writes a new file (the
//! upload's target is removed before each round, as `cp`'s destination is).

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
use e2b_filesystem::{Filesystem, WriteOptions};
use e2b_test_support::procfs::{cpu_seconds, status_kib};

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

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Flushes dirty pages before a timed step, so no step pays for an earlier one's writeback.
fn settle() {
    let _ = Command::new("sync").status();
}

/// Makes a file written by a step durable: `open` + `fsync`, inside the step's timer.
fn fsync_file(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// One timed write-side step.
#[derive(Clone, Copy)]
struct Step {
    /// Seconds until the step returned (its data may still be dirty in the page cache).
    returned: f64,
    /// Seconds until its output file was on disk (the step, then `open` + `fsync`).
    durable: f64,
    /// CPU seconds of this process, its children and the daemon over the whole step.
    cpu: f64,
}

impl Step {
    /// Ratios against `cp`: (page cache only, durable). Above 1 = faster than `cp`.
    fn ratios(&self, cp: &Step) -> (f64, f64) {
        (cp.returned / self.returned, cp.durable / self.durable)
    }

    fn show(&self, cp: Option<&Step>) -> String {
        match cp {
            None => format!(
                "{:.3} / {:.3} (cpu {:.2})",
                self.returned, self.durable, self.cpu
            ),
            Some(cp) => {
                let (rc, rd) = self.ratios(cp);
                format!(
                    "{:.3} / {:.3} ({rc:.2} / {rd:.2}, cpu {:.2})",
                    self.returned, self.durable, self.cpu
                )
            }
        }
    }
}

/// CPU seconds so far of this process, its waited-for children and the daemon.
fn all_cpu(daemon: &str) -> f64 {
    let (own, children) = cpu_seconds("self");
    own + children + cpu_seconds(daemon).0
}

type BoxError = Box<dyn std::error::Error>;

/// Times `step` (which writes `out`) followed by `open` + `fsync` of `out`, after a `sync`.
async fn timed<F, Fut>(daemon: &str, out: &Path, step: F) -> Result<Step, BoxError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    settle();
    let c = all_cpu(daemon);
    let t = Instant::now();
    step().await?;
    let returned = t.elapsed().as_secs_f64();
    fsync_file(out)?;
    let durable = t.elapsed().as_secs_f64();
    Ok(Step {
        returned,
        durable,
        cpu: all_cpu(daemon) - c,
    })
}

/// Kills the daemon when dropped, so a failed run leaves no process behind.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // `cargo bench` passes `--bench`; the size and directory are the other arguments.
    let args: Vec<String> = std::env::args().filter(|a| a != "--bench").collect();
    let size_mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let base = args
        .get(2)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    // Rounds of (cp, upload, download); each round's ratios use that round's `cp`, and the
    // summary is the median ratio, so one noisy moment on a shared machine does not decide.
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    // `up`, `down` or both (default): lets a profiler look at one direction.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let size = size_mib * 1024 * 1024;
    let dir = tempfile::tempdir_in(&base)?;
    let src = dir.path().join("src.bin");
    println!(
        "writing a {size_mib} MiB test file in {}",
        dir.path().display()
    );
    write_test_file(&src, size)?;

    // The daemon, as its own process.
    let bin = std::env::var("E2B_ENVD_BIN").unwrap_or_else(|_| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        root.join("target/release/e2b-envd")
            .to_string_lossy()
            .into_owned()
    });
    let mut daemon = Daemon(
        Command::new(&bin)
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {bin}: {e}"))?,
    );
    let mut line = String::new();
    if let Some(out) = daemon.0.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line)?;
    }
    let url = line.trim().to_string();
    let pid = daemon.0.id().to_string();
    let daemon_rss_idle = status_kib(&pid, "VmHWM:");
    println!("daemon pid {pid} (for a profiler: perf record -g -p {pid})");
    let fs = Filesystem::new(EnvdConnection::new(EnvdEndpoint::new(url))?);

    let remote_path = dir.path().join("uploaded.bin");
    let remote = remote_path.to_str().ok_or("path")?;
    let back = dir.path().join("downloaded.bin");
    let copy = dir.path().join("cp.bin");
    // (page cache only, with fsync) ratios of each round.
    let (mut up_ratios, mut down_ratios) = (Vec::new(), Vec::new());
    let (mut daemon_rss_after_up, mut client_rss_after_up) = (0, 0);
    println!(
        "seconds: returned / with fsync (ratio vs cp: page cache only / with fsync, \
         CPU s of client + children + daemon); load {}",
        load()
    );
    println!(
        "round  {:<30} {:<44} download + fsync",
        "cp + fsync", "upload + fsync"
    );
    for round in 1..=rounds {
        let cp = timed(&pid, &copy, || async {
            if Command::new("cp").arg(&src).arg(&copy).status()?.success() {
                Ok(())
            } else {
                Err("cp failed".into())
            }
        })
        .await?;
        std::fs::remove_file(&copy)?;
        let mut up = String::from("-");
        if only != "down" || round == 1 {
            // A new file each round, as `cp` writes a new file. (Replacing an existing file by
            // rename makes ext4 start writing the new data back at the rename: see the docs.)
            let _ = std::fs::remove_file(&remote_path);
            let step = timed(&pid, &remote_path, || async {
                fs.write_from_file(remote, &src, &WriteOptions::default())
                    .await?;
                Ok(())
            })
            .await?;
            if std::fs::metadata(remote)?.len() != size {
                return Err("size mismatch after upload".into());
            }
            if only != "down" {
                up_ratios.push(step.ratios(&cp));
                up = step.show(Some(&cp));
            }
            daemon_rss_after_up = daemon_rss_after_up.max(status_kib(&pid, "VmHWM:"));
            client_rss_after_up = client_rss_after_up.max(status_kib("self", "VmHWM:"));
        }
        let mut down = String::from("-");
        if only != "up" {
            let step = timed(&pid, &back, || async {
                if fs.read_to_file(remote, &back).await? != size {
                    return Err("size mismatch after download".into());
                }
                Ok(())
            })
            .await?;
            if std::fs::metadata(&back)?.len() != size {
                return Err("size mismatch after download".into());
            }
            std::fs::remove_file(&back)?;
            down_ratios.push(step.ratios(&cp));
            down = step.show(Some(&cp));
        }
        println!("{round:>5}  {:<30} {up:<44} {down}", cp.show(None));
    }
    let daemon_rss = status_kib(&pid, "VmHWM:");
    let client_rss = status_kib("self", "VmHWM:");
    drop(daemon);

    println!(
        "file size           {size_mib} MiB, {rounds} rounds; load {}",
        load()
    );
    let summary = |what: &str, r: &[(f64, f64)]| {
        if !r.is_empty() {
            println!(
                "{what} ratio vs cp  median {:.2} with fsync ({:.2} page cache only)",
                median(r.iter().map(|x| x.1).collect()),
                median(r.iter().map(|x| x.0).collect())
            );
        }
    };
    summary("upload  ", &up_ratios);
    summary("download", &down_ratios);
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
