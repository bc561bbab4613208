//! `e2b serve` benchmarks, each a ratio or a figure measured in one run:
//!
//! 1. create → first `echo` finished (API create + `echo` through the edge), p50/p90 over N
//!    sandboxes (goal p50 ≤ 50 ms), against a bare `sh -c 'echo hi'` spawn on this machine;
//! 2. the N sandboxes idle at once: RSS and PSS of each sandbox's processes (envd and whatever
//!    it runs; goal ≤ 10 MiB), and of `e2b serve` itself;
//! 3. 1 GiB of stdout streamed through the edge vs straight to the sandbox's envd (goal ≥ 0.8),
//!    over h2c gRPC and gRPC-Web.
//!
//! ```text
//! cargo bench -p e2b-serve --bench bench_serve -- [N=100] [BYTES=1G]
//! cargo bench -p e2b-serve --bench bench_serve -- --stream-only [BYTES=1G]   # part 3 only
//! ```
//!
//! Each sandbox's envd is what `e2b serve` runs: `e2b-serve-envd` beside the `e2b-serve` binary
//! cargo builds with this bench (`cargo build --release -p e2b-cli` makes it; `scripts/bench`
//! builds every binary first); without it, that `e2b-serve` binary as `e2b-serve envd` (one
//! thread more and the whole binary's pages, so about 1.5 MiB more per idle sandbox). The bench
//! prints which. `E2B_SERVE_BIN` overrides the
//! binary, `E2B_SERVE_ENVD=PATH` the envd (run with no arguments, e.g. `e2b-envd`).
//!
//! Commands run as `bash -l -c`, as E2B's SDKs run them: a slow login profile on this machine
//! (`/root/.bashrc` or `/home/user/.profile` running `pyenv init`, say) adds to part 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2b_commands::{
    CommandLine, CommandOptions, Commands, EnvdConnection, EnvdEndpoint, OutputCallback, Transport,
};
use e2b_serve::{EnvdCommand, PlainRuntime, Serve, ServeConfig};
use serde_json::{Value, json};

const KEY: &str = "e2b_00000000000000000000";

const USAGE: &str = "usage: bench_serve [N=100] [BYTES=1G] | bench_serve --stream-only [BYTES=1G]
  N      sandboxes to create one after another, then hold idle at once (parts 1 and 2)
  BYTES  stdout streamed through the edge and straight to envd (part 3); M or G suffix";

fn serve_bin() -> std::path::PathBuf {
    match std::env::var_os("E2B_SERVE_BIN") {
        Some(p) => p.into(),
        // Built by cargo with this bench, in the same profile.
        None => env!("CARGO_BIN_EXE_e2b-serve").into(),
    }
}

/// `e2b-serve-envd` beside `bin`, if it was built (by `cargo build --release -p e2b-cli`, which
/// `scripts/bench` runs first).
fn sandbox_envd_beside(bin: &std::path::Path) -> Option<std::path::PathBuf> {
    Some(bin.with_file_name("e2b-serve-envd")).filter(|p| p.is_file())
}

fn parse_size(s: &str) -> u64 {
    let (num, mul) = match s.chars().last() {
        Some('M' | 'm') => (&s[..s.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("a size like 512M or 1G") * mul
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn kib(pid: i32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Pids whose command line contains `needle`.
fn pids_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(needle) {
            out.push(pid);
        }
    }
    out
}

fn commands(url: String, sandbox: Option<&Value>, transport: Transport) -> Commands {
    let mut ep = EnvdEndpoint::new(url).transport(transport);
    if let Some(s) = sandbox {
        ep = ep.sandbox_id(s["sandboxID"].as_str().unwrap());
        if let Some(t) = s["envdAccessToken"].as_str() {
            ep = ep.access_token(t);
        }
    }
    Commands::new(EnvdConnection::new(ep).unwrap())
}

async fn stream(cmds: &Commands, bytes: u64) -> f64 {
    let cmd = CommandLine::exec(
        "/usr/bin/head",
        ["-c".to_owned(), bytes.to_string(), "/dev/zero".to_owned()],
    );
    let seen = Arc::new(AtomicU64::new(0));
    let s2 = seen.clone();
    let t0 = Instant::now();
    let h = cmds
        .start_streaming(
            cmd,
            CommandOptions::new()
                .retain_output(false)
                .on_stdout(OutputCallback::bytes(move |b: &[u8]| {
                    s2.fetch_add(b.len() as u64, Ordering::Relaxed);
                })),
        )
        .await
        .unwrap();
    let out = h.wait().await.unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(seen.load(Ordering::Relaxed), bytes, "every byte arrived");
    bytes as f64 / t0.elapsed().as_secs_f64() / (1u64 << 20) as f64
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; the counts are the other arguments.
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    let stream_only = args.iter().any(|a| a == "--stream-only");
    args.retain(|a| a != "--stream-only");
    if stream_only {
        args.insert(0, "1".into());
    }
    let n: usize = args.first().map(|s| s.parse().unwrap()).unwrap_or(100);
    let bytes = parse_size(args.get(1).map(String::as_str).unwrap_or("1G"));
    let bin = serve_bin();
    assert!(
        bin.exists(),
        "missing {}: run through `cargo bench -p e2b-serve --bench bench_serve`, or set E2B_SERVE_BIN",
        bin.display()
    );
    let state = tempfile::tempdir().unwrap();
    let mut config = ServeConfig::ephemeral(KEY);
    config.state_dir = Some(state.path().to_path_buf());
    config.max_sandboxes = n + 10;
    let command = match std::env::var_os("E2B_SERVE_ENVD") {
        Some(envd) => EnvdCommand::envd(envd, Vec::new()),
        None => match sandbox_envd_beside(&bin) {
            Some(envd) => EnvdCommand::envd(envd, Vec::new()),
            None => {
                println!(
                    "(no e2b-serve-envd beside {}: `cargo build --release -p e2b-cli` builds \
                     the envd `e2b serve` runs)",
                    bin.display()
                );
                EnvdCommand::envd(&bin, vec!["envd".into()])
            }
        },
    };
    println!("each sandbox's envd: {command}");
    let envd_program = command.program.clone();
    let runtime = PlainRuntime::new(command);
    let serve = Serve::start(config, Arc::new(runtime)).await.unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    // Baseline: a bare local spawn of the same echo.
    let mut local = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let out = tokio::process::Command::new("sh")
            .args(["-c", "echo hi"])
            .output()
            .await
            .unwrap();
        assert!(out.status.success());
        local.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    local.sort_by(f64::total_cmp);

    // 1. create → first echo.
    let mut times = Vec::new();
    let mut sandboxes = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let sbx: Value = http
            .post(format!("{}/sandboxes", serve.api_url()))
            .header("X-API-Key", KEY)
            .json(&json!({"templateID": "base", "timeout": 600, "secure": true}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let cmds = commands(serve.edge_url(), Some(&sbx), Transport::Grpc);
        let out = cmds.run("echo hi", CommandOptions::new()).await.unwrap();
        assert_eq!(out.stdout, "hi\n");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        sandboxes.push(sbx);
    }
    times.sort_by(f64::total_cmp);
    if !stream_only {
        report(&times, &local, &sandboxes, &envd_program).await;
    }
    stream_part(&serve, &sandboxes[0], bytes).await;
    serve.shutdown().await;
    println!(
        "load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

async fn report(times: &[f64], local: &[f64], sandboxes: &[Value], envd: &std::path::Path) {
    let n = sandboxes.len();
    let (p50, p90) = (percentile(times, 0.5), percentile(times, 0.9));
    println!(
        "create → first echo over {n} sandboxes: p50 {p50:.1} ms, p90 {p90:.1} ms (goal p50 ≤ 50 ms); bare `sh -c 'echo hi'` spawn p50 {:.1} ms → ratio p50/spawn {:.1}",
        percentile(local, 0.5),
        p50 / percentile(local, 0.5)
    );

    // 2. n idle sandboxes: memory per sandbox, once each envd has been idle long enough to
    // give its freed heap back (envd trims after 5 s idle).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (mut rss, mut pss, mut envd_rss) = (Vec::new(), Vec::new(), Vec::new());
    let mut processes = 0;
    for s in sandboxes {
        let id = s["sandboxID"].as_str().unwrap();
        let pids = pids_with(id);
        processes += pids.len();
        let mut r = 0;
        let mut p = 0;
        for pid in &pids {
            r += kib(*pid, "status", "VmRSS:");
            p += kib(*pid, "smaps_rollup", "Pss:");
        }
        // envd is the largest of the processes running the envd program (a fork of it, such
        // as an isolated sandbox's sentinel, runs the same command line).
        let envd_argv0 = envd.as_os_str().as_encoded_bytes();
        let envd = pids
            .iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).next() == Some(envd_argv0))
            })
            .map(|pid| kib(*pid, "status", "VmRSS:"))
            .max();
        if let Some(kib) = envd {
            envd_rss.push(kib as f64 / 1024.0);
        }
        rss.push(r as f64 / 1024.0);
        pss.push(p as f64 / 1024.0);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let serve_rss = kib(std::process::id() as i32, "status", "VmRSS:") as f64 / 1024.0;
    println!(
        "{n} idle sandboxes ({processes} processes): per sandbox RSS {:.1} MiB (envd alone {:.1} MiB), PSS {:.1} MiB (goal ≤ 10 MiB); this process (e2b serve + bench client) RSS {serve_rss:.1} MiB",
        mean(&rss),
        mean(&envd_rss),
        mean(&pss)
    );
}

/// 3. the edge vs straight to envd.
async fn stream_part(serve: &e2b_serve::ServeHandle, first: &Value, bytes: u64) {
    let envd = serve
        .envd_addr(first["sandboxID"].as_str().unwrap())
        .unwrap();
    for transport in [Transport::Grpc, Transport::GrpcWeb] {
        let via_edge = commands(serve.edge_url(), Some(first), transport);
        let direct = {
            let mut ep = EnvdEndpoint::new(format!("http://{envd}")).transport(transport);
            if let Some(t) = first["envdAccessToken"].as_str() {
                ep = ep.access_token(t);
            }
            Commands::new(EnvdConnection::new(ep).unwrap())
        };
        // Warm both, then alternate to share the machine's load fairly.
        stream(&direct, 64 << 20).await;
        stream(&via_edge, 64 << 20).await;
        let (mut d, mut e) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            d.push(stream(&direct, bytes).await);
            e.push(stream(&via_edge, bytes).await);
        }
        let (d, e) = (
            d.iter().cloned().fold(0.0, f64::max),
            e.iter().cloned().fold(0.0, f64::max),
        );
        println!(
            "{} MiB stdout over {transport:?}: direct {d:.0} MiB/s, through the edge {e:.0} MiB/s → ratio {:.2} (goal ≥ 0.8)",
            bytes >> 20,
            e / d
        );
    }
}
