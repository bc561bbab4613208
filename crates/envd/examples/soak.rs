//! Soak benchmark against the real daemon binary (run in release): many concurrent mixed
//! clients for a bounded time, then the daemon's resident memory, open descriptors and
//! threads compared with their values before the load, and every byte accounted for.
//!
//! Each client loops over four kinds of work until the time is up: a streamed command
//! (`head -c N /dev/zero`, N bytes expected and exit 0), an upload through `POST /files` read
//! back through `GET /files` and removed with the `Remove` RPC, a polled watcher
//! (CreateWatcher, a write, GetWatcherEvents, RemoveWatcher), and a command whose stream the
//! client drops after the first chunk (a disconnect mid-stream).
//!
//! Exits non-zero if a byte is missing or extra, a call fails unexpectedly, a process is left
//! running, or descriptors or threads are not back near their starting values. Watchers beyond
//! the daemon's cap are refused with `resource_exhausted` by design; they are counted, not
//! failures.
//!
//! ```text
//! cargo build --release -p e2b-envd --bins --examples
//! target/release/examples/soak [--secs 120] [--clients 1000]   # E2B_ENVD_BIN overrides the daemon
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2b_envd_proto::filesystem::filesystem_client::FilesystemClient;
use e2b_envd_proto::filesystem::{
    CreateWatcherRequest, GetWatcherEventsRequest, RemoveRequest, RemoveWatcherRequest,
};
use e2b_envd_proto::process::process_client::ProcessClient;
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use e2b_envd_proto::process::{ListRequest, ProcessConfig, StartRequest};
use e2b_test_support::procfs::status_kib;
use tonic::transport::Channel;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    streamed_expected: AtomicU64,
    streamed_got: AtomicU64,
    files_expected: AtomicU64,
    files_got: AtomicU64,
    watchers: AtomicU64,
    watchers_refused: AtomicU64,
    disconnects: AtomicU64,
    failures: AtomicU64,
}

impl Tally {
    fn fail(&self, what: String) {
        if self.failures.fetch_add(1, Ordering::Relaxed) < 10 {
            eprintln!("failure: {what}");
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Snapshot {
    rss_kib: u64,
    fds: usize,
    threads: u64,
}

fn snapshot(pid: u32) -> Snapshot {
    let p = pid.to_string();
    Snapshot {
        rss_kib: status_kib(&p, "VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0),
        threads: std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Threads:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0),
    }
}

fn bash(cmd: &str) -> StartRequest {
    StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-c".into(), cmd.into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    }
}

struct Ctx {
    url: String,
    http: reqwest::Client,
    channels: Vec<Channel>,
    dir: std::path::PathBuf,
    tally: Tally,
}

async fn stream_op(ctx: &Ctx, ch: Channel, n: u64) {
    let mut c = ProcessClient::new(ch);
    ctx.tally.streamed_expected.fetch_add(n, Ordering::Relaxed);
    let mut s = match c.start(bash(&format!("head -c {n} /dev/zero"))).await {
        Ok(s) => s.into_inner(),
        Err(e) => return ctx.tally.fail(format!("start: {e}")),
    };
    let mut got = 0u64;
    let mut exit = None;
    loop {
        match s.message().await {
            Ok(Some(m)) => match m.event.and_then(|e| e.event) {
                Some(Event::Data(d)) => {
                    if let Some(Output::Stdout(b)) = d.output {
                        got += b.len() as u64;
                    }
                }
                Some(Event::End(e)) => exit = Some(e.exit_code),
                _ => {}
            },
            Ok(None) => break,
            Err(e) => {
                ctx.tally.fail(format!("stream: {e}"));
                break;
            }
        }
    }
    ctx.tally.streamed_got.fetch_add(got, Ordering::Relaxed);
    if exit != Some(0) {
        ctx.tally.fail(format!("stream ended with {exit:?}"));
    }
}

async fn file_op(ctx: &Ctx, ch: Channel, id: usize, k: u64, n: u64) {
    let path = ctx.dir.join(format!("f{id}-{k}"));
    let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    ctx.tally.files_expected.fetch_add(n, Ordering::Relaxed);
    let url = format!("{}/files?path={}", ctx.url, path.display());
    let up = ctx
        .http
        .post(&url)
        .header("content-type", "application/octet-stream")
        .body(body.clone())
        .send()
        .await;
    match up {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => return ctx.tally.fail(format!("upload: HTTP {}", r.status())),
        Err(e) => return ctx.tally.fail(format!("upload: {e}")),
    }
    match ctx.http.get(&url).send().await {
        Ok(r) if r.status().is_success() => match r.bytes().await {
            Ok(b) => {
                if b[..] == body[..] {
                    ctx.tally
                        .files_got
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                } else {
                    ctx.tally
                        .fail(format!("download: {} bytes differ", b.len()));
                }
            }
            Err(e) => ctx.tally.fail(format!("download body: {e}")),
        },
        Ok(r) => ctx.tally.fail(format!("download: HTTP {}", r.status())),
        Err(e) => ctx.tally.fail(format!("download: {e}")),
    }
    let mut fs = FilesystemClient::new(ch);
    if let Err(e) = fs
        .remove(RemoveRequest {
            path: path.display().to_string(),
        })
        .await
    {
        ctx.tally.fail(format!("remove: {e}"));
    }
}

async fn watch_op(ctx: &Ctx, ch: Channel, id: usize, k: u64) {
    let dir = ctx.dir.join(format!("w{id}"));
    let _ = std::fs::create_dir_all(&dir);
    let mut fs = FilesystemClient::new(ch);
    let w = match fs
        .create_watcher(CreateWatcherRequest {
            path: dir.display().to_string(),
            ..Default::default()
        })
        .await
    {
        Ok(r) => r.into_inner().watcher_id,
        Err(e) if e.code() == tonic::Code::ResourceExhausted => {
            ctx.tally.watchers_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) => return ctx.tally.fail(format!("create watcher: {e}")),
    };
    ctx.tally.watchers.fetch_add(1, Ordering::Relaxed);
    let _ = std::fs::write(dir.join(format!("x{k}")), b"x");
    if let Err(e) = fs
        .get_watcher_events(GetWatcherEventsRequest {
            watcher_id: w.clone(),
        })
        .await
    {
        ctx.tally.fail(format!("watcher events: {e}"));
    }
    if let Err(e) = fs
        .remove_watcher(RemoveWatcherRequest { watcher_id: w })
        .await
    {
        ctx.tally.fail(format!("remove watcher: {e}"));
    }
}

async fn disconnect_op(ctx: &Ctx, ch: Channel) {
    let mut c = ProcessClient::new(ch);
    let mut s = match c.start(bash("head -c 4M /dev/zero")).await {
        Ok(s) => s.into_inner(),
        Err(e) => return ctx.tally.fail(format!("start: {e}")),
    };
    // The start event and one chunk, then hang up.
    for _ in 0..2 {
        if let Err(e) = s.message().await {
            return ctx.tally.fail(format!("stream before disconnect: {e}"));
        }
    }
    drop(s);
    ctx.tally.disconnects.fetch_add(1, Ordering::Relaxed);
}

async fn client(ctx: Arc<Ctx>, id: usize, until: Instant) {
    let mut k = 0u64;
    while Instant::now() < until {
        let ch = ctx.channels[(id + k as usize) % ctx.channels.len()].clone();
        // Sizes vary by client and round: 1 KiB to about 256 KiB.
        let n = 1024 + ((id as u64 * 7919 + k * 104_729) % (255 * 1024));
        match (id as u64 + k) % 4 {
            0 => stream_op(&ctx, ch, n).await,
            1 => file_op(&ctx, ch, id, k, n).await,
            2 => watch_op(&ctx, ch, id, k).await,
            _ => disconnect_op(&ctx, ch).await,
        }
        ctx.tally.ops.fetch_add(1, Ordering::Relaxed);
        k += 1;
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let secs = arg("--secs", 120).clamp(1, 600);
    let clients = arg("--clients", 1000) as usize;
    let exe = std::env::current_exe().unwrap();
    let bin = std::env::var("E2B_ENVD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| exe.parent().unwrap().parent().unwrap().join("e2b-envd"));
    let work = tempfile::tempdir().unwrap();
    let mut daemon = Command::new(&bin)
        .args(["--port", "0", "--default-workdir"])
        .arg(work.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start e2b-envd");
    let mut line = String::new();
    std::io::BufReader::new(daemon.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_string();
    let dpid = daemon.id();
    println!("daemon {} (pid {dpid}) at {url}", bin.display());
    let mut channels = Vec::new();
    for _ in 0..16 {
        channels.push(
            tonic::transport::Endpoint::from_shared(url.clone())
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
    }
    let ctx = Arc::new(Ctx {
        url: url.clone(),
        http: reqwest::Client::builder()
            .http1_only()
            .pool_max_idle_per_host(64)
            // Idle connections close before each measurement (both wait 12 s).
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
        channels,
        dir: work.path().to_path_buf(),
        tally: Tally::default(),
    });
    // Warm up: one of each kind, then let the daemon settle.
    client(ctx.clone(), 0, Instant::now() + Duration::from_millis(1)).await;
    for k in 0..4 {
        client(ctx.clone(), k, Instant::now() + Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(12)).await;
    let before = snapshot(dpid);
    println!("before: {before:?}; {clients} clients for {secs} s");

    // Two load phases of half the time each: descriptors and threads must return to their
    // starting values after each, and resident memory after the second phase shows whether
    // the first one's growth was a leak (it grows again) or allocator retention (it does not).
    let mut afters = Vec::new();
    let mut peak = before;
    let mut live = usize::MAX;
    let mut elapsed = Duration::ZERO;
    for phase in 1..=2u32 {
        let started = Instant::now();
        let until = started + Duration::from_secs(secs.div_ceil(2));
        let tasks: Vec<_> = (0..clients)
            .map(|id| tokio::spawn(client(ctx.clone(), id, until)))
            .collect();
        let sampler = tokio::spawn(async move {
            let mut peak = before;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let s = snapshot(dpid);
                peak.rss_kib = peak.rss_kib.max(s.rss_kib);
                peak.fds = peak.fds.max(s.fds);
                peak.threads = peak.threads.max(s.threads);
            }
            peak
        });
        for t in tasks {
            t.await.unwrap();
        }
        elapsed += started.elapsed();
        if let Ok(p) = sampler.await {
            peak.rss_kib = peak.rss_kib.max(p.rss_kib);
            peak.fds = peak.fds.max(p.fds);
            peak.threads = peak.threads.max(p.threads);
        }
        // Disconnected commands finish on their own: wait for the process table to empty.
        let mut pc = ProcessClient::new(ctx.channels[0].clone());
        for _ in 0..300 {
            live = pc
                .list(ListRequest {})
                .await
                .map(|r| r.into_inner().processes.len())
                .unwrap_or(usize::MAX);
            if live == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Idle blocking-pool threads exit after 10 s.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let after = snapshot(dpid);
        println!("after phase {phase}: {after:?}");
        afters.push(after);
    }
    let after = afters[afters.len() - 1];
    let after1 = afters[0];
    if std::env::var_os("SOAK_DEBUG_FDS").is_some() {
        for e in std::fs::read_dir(format!("/proc/{dpid}/fd"))
            .unwrap()
            .flatten()
        {
            println!(
                "fd {:?} -> {:?}",
                e.file_name(),
                std::fs::read_link(e.path())
            );
        }
    }
    let t = &ctx.tally;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!("peak during load: {peak:?}");
    println!(
        "{} operations in {:.0?} ({:.0}/s): streamed bytes {}/{}, file bytes {}/{}, {} watchers ({} refused at the cap), {} mid-stream disconnects, {} failures, {} processes left",
        g(&t.ops),
        elapsed,
        g(&t.ops) as f64 / elapsed.as_secs_f64(),
        g(&t.streamed_got),
        g(&t.streamed_expected),
        g(&t.files_got),
        g(&t.files_expected),
        g(&t.watchers),
        g(&t.watchers_refused),
        g(&t.disconnects),
        g(&t.failures),
        live,
    );
    println!(
        "RSS after phase 2 / after phase 1: {:.2}",
        after.rss_kib as f64 / after1.rss_kib.max(1) as f64
    );
    println!(
        "ratios after/before: RSS {:.2}, fds {:.2}, threads {:.2}",
        after.rss_kib as f64 / before.rss_kib.max(1) as f64,
        after.fds as f64 / before.fds.max(1) as f64,
        after.threads as f64 / before.threads.max(1) as f64
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let mut ok = true;
    let mut check = |cond: bool, what: &str| {
        if !cond {
            eprintln!("FAIL: {what}");
            ok = false;
        }
    };
    check(
        g(&t.streamed_got) == g(&t.streamed_expected),
        "streamed bytes differ",
    );
    check(g(&t.files_got) == g(&t.files_expected), "file bytes differ");
    check(g(&t.failures) == 0, "calls failed");
    check(live == 0, "processes left running");
    check(
        after.fds <= before.fds + 8,
        "descriptors not back to the start",
    );
    check(
        after.threads <= before.threads + 4,
        "threads not back to the start",
    );
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
