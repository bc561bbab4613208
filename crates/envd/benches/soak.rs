//! Soak benchmark: many concurrent mixed clients for a bounded time, in several rounds, then
//! the daemon's resident memory, live heap, open descriptors, threads and tokio tasks compared
//! with their values before the load, and every byte accounted for.
//!
//! The daemon is this executable started again with `--serve`: `e2b_envd::run_cli`, as in the
//! `e2b-envd` binary (same flags, child subreaper, descriptor limit), plus a counting global
//! allocator (example-only) whose live bytes it writes to a file four times a second. So the
//! soak sees both what the kernel charges (RSS) and what the program holds (live heap): a leak
//! grows the live heap round after round; allocator retention grows RSS only.
//!
//! Each client loops over four kinds of work until the round's time is up: a streamed command
//! (`head -c N /dev/zero`, N bytes expected and exit 0), an upload through `POST /files` read
//! back through `GET /files` and removed with the `Remove` RPC, a polled watcher
//! (CreateWatcher, a write, GetWatcherEvents, RemoveWatcher), and a command whose stream the
//! client drops after the first chunk (a disconnect mid-stream).
//!
//! Passes ("flat") when, after the last round and an idle pause: RSS ≤ the starting RSS +
//! [`RSS_SLACK_KIB`]; live heap ≤ the starting live heap + [`HEAP_SLACK_BYTES`]; descriptors,
//! threads and tokio tasks back at their starting values (+ a small slack for idle pool
//! connections and blocking threads not yet retired); every streamed and uploaded byte
//! received; no failed call; no process left. Exits non-zero otherwise, naming what failed.
//! Watchers beyond the daemon's cap are refused with `resource_exhausted` by design; they are
//! counted, not failures.
//!
//! ```text
//! cargo bench -p e2b-envd --bench soak -- [--secs 90] [--clients 1000] [--rounds 3]
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
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
    /// Watchers whose operation hit the hang guard before removing them, removed by the soak
    /// after the round (the daemon keeps an unpolled watcher for 10 minutes, by design).
    watchers_abandoned: AtomicU64,
    disconnects: AtomicU64,
    failures: AtomicU64,
    /// Operations cut off by the hang guard, by kind (stream, file, watch, disconnect).
    guard_hits: [AtomicU64; 4],
}

/// An error with its causes (reqwest's `Display` leaves them out).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl Tally {
    fn fail(&self, what: String) {
        if self.failures.fetch_add(1, Ordering::Relaxed) < 10 {
            eprintln!("failure: {what}");
        }
    }
}

/// Tokio tasks allowed above the starting count after the load.
const TASK_SLACK: u64 = 8;
/// Longest time one operation may take before it counts as a failure (a hang guard).
const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// Allowed growth of the daemon's RSS over its starting value after the load (allocator
/// arenas and caches that stay mapped; see docs/benchmarks.md).
const RSS_SLACK_KIB: u64 = 32 * 1024;
/// Allowed growth of the daemon's live heap over its starting value after the load (lazily
/// built caches: thread-locals of blocking threads, the user database, ...).
const HEAP_SLACK_BYTES: u64 = 4 << 20;

/// The counting allocator of the `--serve` daemon: live bytes, most live bytes, allocations.
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub(crate) static LIVE: AtomicU64 = AtomicU64::new(0);
    pub(crate) static PEAK: AtomicU64 = AtomicU64::new(0);
    pub(crate) static ALLOCS: AtomicU64 = AtomicU64::new(0);

    pub(crate) struct Counting;

    fn grew(n: usize) {
        let live = LIVE.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        PEAK.fetch_max(live, Ordering::Relaxed);
    }

    // SAFETY: every call is forwarded to the system allocator unchanged; only counters move.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            // SAFETY: forwarded as is.
            let p = unsafe { System.alloc(l) };
            if !p.is_null() {
                grew(l.size());
            }
            p
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            // SAFETY: forwarded as is.
            let p = unsafe { System.alloc_zeroed(l) };
            if !p.is_null() {
                grew(l.size());
            }
            p
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: forwarded as is.
            unsafe { System.dealloc(p, l) };
            LIVE.fetch_sub(l.size() as u64, Ordering::Relaxed);
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            // SAFETY: forwarded as is.
            let q = unsafe { System.realloc(p, l, new) };
            if !q.is_null() {
                LIVE.fetch_sub(l.size() as u64, Ordering::Relaxed);
                grew(new);
            }
            q
        }
    }
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// `--serve <envd flags>`: the daemon, as the `e2b-envd` binary runs it, writing
/// `<live heap bytes> <peak> <allocations> <tokio tasks>` to `$SOAK_STATS_FILE` every 250 ms.
fn serve() -> std::process::ExitCode {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: e2b_envd::EnvdArgs,
    }
    let argv = std::env::args().filter(|a| a != "--serve");
    let cli = Cli::parse_from(argv);
    // As the binary: raise the descriptor limit, become a child subreaper.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Some(path) = std::env::var_os("SOAK_STATS_FILE") {
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let tmp = std::path::PathBuf::from(&path).with_extension("tmp");
            loop {
                let line = format!(
                    "{} {} {} {}\n",
                    counting::LIVE.load(Ordering::Relaxed),
                    counting::PEAK.load(Ordering::Relaxed),
                    counting::ALLOCS.load(Ordering::Relaxed),
                    handle.metrics().num_alive_tasks(),
                );
                if std::fs::write(&tmp, line).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
    }
    match rt.block_on(e2b_envd::run_cli(cli.args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak daemon: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    rss_kib: u64,
    fds: usize,
    threads: u64,
    heap_bytes: u64,
    tasks: u64,
}

fn snapshot(pid: u32, stats: &std::path::Path) -> Snapshot {
    let p = pid.to_string();
    let heap: Vec<u64> = std::fs::read_to_string(stats)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    Snapshot {
        rss_kib: status_kib(&p, "VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0),
        threads: status_kib(&p, "Threads:"),
        heap_bytes: heap.first().copied().unwrap_or(0),
        tasks: heap.get(3).copied().unwrap_or(0),
    }
}

impl std::fmt::Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {:.1} MiB, live heap {:.2} MiB, {} fds, {} threads, {} tokio tasks",
            self.rss_kib as f64 / 1024.0,
            self.heap_bytes as f64 / 1048576.0,
            self.fds,
            self.threads,
            self.tasks
        )
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
    /// Watchers created and not yet removed.
    open_watchers: std::sync::Mutex<std::collections::HashSet<String>>,
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
        Err(e) => return ctx.tally.fail(format!("upload: {}", chain(&e))),
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
            Err(e) => ctx.tally.fail(format!("download body: {}", chain(&e))),
        },
        Ok(r) => ctx.tally.fail(format!("download: HTTP {}", r.status())),
        Err(e) => ctx.tally.fail(format!("download: {}", chain(&e))),
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
    ctx.open_watchers.lock().unwrap().insert(w.clone());
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
        .remove_watcher(RemoveWatcherRequest {
            watcher_id: w.clone(),
        })
        .await
    {
        ctx.tally.fail(format!("remove watcher: {e}"));
    }
    ctx.open_watchers.lock().unwrap().remove(&w);
}

/// Removes the watchers of operations that the hang guard cut off (a client that gave up
/// still cleans up), so what stays in the daemon after a round is the daemon's own.
async fn remove_abandoned_watchers(ctx: &Ctx) {
    let left: Vec<String> = ctx.open_watchers.lock().unwrap().drain().collect();
    let mut fs = FilesystemClient::new(ctx.channels[0].clone());
    for w in left {
        ctx.tally.watchers_abandoned.fetch_add(1, Ordering::Relaxed);
        let _ = fs
            .remove_watcher(RemoveWatcherRequest { watcher_id: w })
            .await;
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
        let kind = (id as u64 + k) % 4;
        let op = async {
            match kind {
                0 => stream_op(&ctx, ch, n).await,
                1 => file_op(&ctx, ch, id, k, n).await,
                2 => watch_op(&ctx, ch, id, k).await,
                _ => disconnect_op(&ctx, ch).await,
            }
        };
        // A hang guard, so the soak stays bounded: an operation this slow is a failure.
        if tokio::time::timeout(OP_TIMEOUT, op).await.is_err() {
            ctx.tally.guard_hits[kind as usize].fetch_add(1, Ordering::Relaxed);
            ctx.tally.fail(format!(
                "operation {kind} of client {id} took over {OP_TIMEOUT:?}"
            ));
        }
        ctx.tally.ops.fetch_add(1, Ordering::Relaxed);
        k += 1;
    }
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--serve") {
        return serve();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(soak())
}

/// Waits until the daemon is idle: no process left, its tokio tasks back to `tasks` (an
/// exited process's entry is kept for 30 s, `exited_retention`), then a pause for idle
/// blocking-pool threads (10 s keep-alive), client pool connections (5 s) and the daemon's
/// idle trim (5 s without a request) to go. Returns the processes left.
async fn settle(ctx: &Ctx, dpid: u32, stats: &std::path::Path, tasks: Option<u64>) -> usize {
    let mut pc = ProcessClient::new(ctx.channels[0].clone());
    let mut live = usize::MAX;
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
    if let Some(tasks) = tasks {
        for _ in 0..60 {
            if snapshot(dpid, stats).tasks <= tasks + TASK_SLACK {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(12)).await;
    live
}

async fn soak() -> std::process::ExitCode {
    let secs = arg("--secs", 90).clamp(1, 600);
    let clients = arg("--clients", 1000) as usize;
    let rounds = arg("--rounds", 3).clamp(1, 20);
    let exe = std::env::current_exe().unwrap();
    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("daemon-stats");
    let files = work.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args(["--serve", "--port", "0", "--default-workdir"])
        .arg(&files)
        .env("SOAK_STATS_FILE", &stats);
    let (mut daemon, url) = e2b_test_support::spawn_daemon_printing_url(cmd);
    let dpid = daemon.id();
    println!("daemon {} --serve (pid {dpid}) at {url}", exe.display());
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
            // Idle connections close before each measurement (which waits 12 s).
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
        channels,
        dir: files.clone(),
        tally: Tally::default(),
        open_watchers: Default::default(),
    });
    // Warm up: one of each kind, and a call on every channel (a connection that sends no
    // request is closed after the header-read timeout, then reopened under load, which would
    // count as growth); then let the daemon settle.
    for k in 0..4 {
        client(ctx.clone(), k, Instant::now() + Duration::from_millis(1)).await;
    }
    for ch in &ctx.channels {
        ProcessClient::new(ch.clone())
            .list(ListRequest {})
            .await
            .unwrap();
    }
    settle(&ctx, dpid, &stats, None).await;
    // Past the warm-up's process retention (30 s after the processes ended).
    tokio::time::sleep(Duration::from_secs(25)).await;
    let before = snapshot(dpid, &stats);
    println!(
        "before: {before}; {clients} clients, {rounds} rounds of {} s",
        secs.div_ceil(rounds)
    );

    // Rounds of equal length: descriptors, threads and tasks must return to their starting
    // values after each; RSS and the live heap after each round show whether growth is a
    // leak (it grows again every round) or allocator retention (RSS plateaus, heap flat).
    let mut afters = Vec::new();
    let mut peak = before;
    let mut live = usize::MAX;
    let mut elapsed = Duration::ZERO;
    for round in 1..=rounds {
        let started = Instant::now();
        let until = started + Duration::from_secs(secs.div_ceil(rounds));
        let tasks: Vec<_> = (0..clients)
            .map(|id| tokio::spawn(client(ctx.clone(), id, until)))
            .collect();
        let stats2 = stats.clone();
        let sampler = tokio::spawn(async move {
            let mut peak = before;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let s = snapshot(dpid, &stats2);
                peak.rss_kib = peak.rss_kib.max(s.rss_kib);
                peak.fds = peak.fds.max(s.fds);
                peak.threads = peak.threads.max(s.threads);
                peak.heap_bytes = peak.heap_bytes.max(s.heap_bytes);
                peak.tasks = peak.tasks.max(s.tasks);
            }
            peak
        });
        for t in tasks {
            t.await.unwrap();
        }
        elapsed += started.elapsed();
        remove_abandoned_watchers(&ctx).await;
        if let Ok(p) = sampler.await {
            peak.rss_kib = peak.rss_kib.max(p.rss_kib);
            peak.fds = peak.fds.max(p.fds);
            peak.threads = peak.threads.max(p.threads);
            peak.heap_bytes = peak.heap_bytes.max(p.heap_bytes);
            peak.tasks = peak.tasks.max(p.tasks);
        }
        live = settle(&ctx, dpid, &stats, Some(before.tasks)).await;
        let after = snapshot(dpid, &stats);
        println!("after round {round}: {after}");
        afters.push(after);
    }
    let after = afters[afters.len() - 1];
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
    println!("peak during load: {peak}");
    println!(
        "{} operations in {:.0?} ({:.0}/s): streamed bytes {}/{}, file bytes {}/{}, {} watchers ({} refused at the cap, {} removed after their operation timed out), {} mid-stream disconnects, {} failures, {} processes left",
        g(&t.ops),
        elapsed,
        g(&t.ops) as f64 / elapsed.as_secs_f64(),
        g(&t.streamed_got),
        g(&t.streamed_expected),
        g(&t.files_got),
        g(&t.files_expected),
        g(&t.watchers),
        g(&t.watchers_refused),
        g(&t.watchers_abandoned),
        g(&t.disconnects),
        g(&t.failures),
        live,
    );
    println!(
        "operations past the {OP_TIMEOUT:?} guard (stream, file, watch, disconnect): {:?}",
        t.guard_hits.each_ref().map(g)
    );
    println!(
        "ratios end/start: RSS {:.2}, live heap {:.2}, fds {:.2}, threads {:.2}, tasks {:.2}",
        after.rss_kib as f64 / before.rss_kib.max(1) as f64,
        after.heap_bytes as f64 / before.heap_bytes.max(1) as f64,
        after.fds as f64 / before.fds.max(1) as f64,
        after.threads as f64 / before.threads.max(1) as f64,
        after.tasks as f64 / before.tasks.max(1) as f64,
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let mut ok = true;
    let mut check = |cond: bool, what: String| {
        if !cond {
            eprintln!("FAIL: {what}");
            ok = false;
        }
    };
    check(
        g(&t.streamed_got) == g(&t.streamed_expected),
        "streamed bytes differ".into(),
    );
    check(
        g(&t.files_got) == g(&t.files_expected),
        "file bytes differ".into(),
    );
    check(g(&t.failures) == 0, "calls failed".into());
    check(live == 0, "processes left running".into());
    check(
        after.rss_kib <= before.rss_kib + RSS_SLACK_KIB,
        format!(
            "RSS not flat: {} KiB after, {} KiB before (slack {RSS_SLACK_KIB} KiB)",
            after.rss_kib, before.rss_kib
        ),
    );
    check(
        after.heap_bytes <= before.heap_bytes + HEAP_SLACK_BYTES,
        format!(
            "live heap not back: {} bytes after, {} before (slack {HEAP_SLACK_BYTES})",
            after.heap_bytes, before.heap_bytes
        ),
    );
    check(
        after.fds <= before.fds + 8,
        format!(
            "descriptors not back: {} after, {} before",
            after.fds, before.fds
        ),
    );
    check(
        after.threads <= before.threads + 4,
        format!(
            "threads not back: {} after, {} before",
            after.threads, before.threads
        ),
    );
    check(
        after.tasks <= before.tasks + TASK_SLACK,
        format!(
            "tokio tasks not back: {} after, {} before",
            after.tasks, before.tasks
        ),
    );
    if ok {
        println!("PASS: flat");
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
