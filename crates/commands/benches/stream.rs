//! Streams N bytes of stdout through `start_streaming` and reports the client's peak RSS and
//! throughput against two floors measured right before each row, in the same run: the raw pipe
//! `head -c N /dev/zero | cat > /dev/null`, and the loopback relay floor (the same bytes from a
//! pipe through one blocking loopback TCP hop, `e2b_test_support::floor::pipe_tcp_relay`: what
//! any daemon that forwards a pipe over a socket pays before HTTP/2 and gRPC).
//!
//! ```text
//! cargo bench -p e2b-commands --bench stream                  # 1 GiB and 4 GiB (or: scripts/bench commands)
//! cargo bench -p e2b-commands --bench stream -- 256M 1G       # custom sizes
//! cargo bench -p e2b-commands --bench stream -- --rounds 7 1G # more rounds per row
//! cargo bench -p e2b-commands --bench stream -- --daemon multi-thread 1G
//! ```
//!
//! For A/B runs by hand, its sub-commands: `serve [current-thread|multi-thread]` prints the
//! daemon's URL and serves until stdin closes, `client URL BYTES callback|events|retain
//! [grpc|grpc-web|in-process]` streams once and prints one line (bytes, seconds, peak RSS KiB,
//! retained bytes, bytes per chunk, CPU seconds, minor faults), `floor BYTES` prints the relay
//! floor's seconds.
//!
//! The daemon runs on one thread by default, as each sandbox's envd of `e2b serve` does
//! (`--daemon multi-thread`: a worker per core, as `e2b-envd`).
//!
//! Both floors move by up to ±50 % from one second to the next on a shared two-core machine, so
//! each row is measured in rounds (3 by default): raw pipe, relay floor and client, one right
//! after the other, and the table shows each figure's median over the rounds, with the spread
//! of the ratio to the floor. The client's CPU time and minor page faults per GiB (medians) are
//! steadier than its wall-clock time and say where a change went.
//!
//! The daemon runs in a child process (this binary with `serve`) and each measurement in a
//! fresh client process (this binary with `client`), so each peak RSS (`VmHWM`) is that of one
//! client alone. The `in-process` rows are the exception: that client embeds its own daemon
//! and calls it without a socket (as `e2b::Sandbox::local_unisolated()` does), so their peak RSS covers
//! client and daemon together.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use e2b_commands::{
    CommandEvent, CommandLine, CommandOptions, Commands, EnvdConnection, EnvdEndpoint,
    OutputCallback, Transport,
};
use futures::StreamExt as _;

fn parse_size(s: &str) -> u64 {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("a size like 512M or 4G") * mul
}

fn human(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else {
        format!("{} MiB", n >> 20)
    }
}

fn main() {
    // `cargo bench` passes `--bench`; the sizes and sub-commands are the other arguments.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("serve") => serve(args.get(1).map(String::as_str)),
        Some("client") => client(&args[1..]),
        Some("floor") => println!(
            "{:.3}",
            e2b_test_support::floor::pipe_tcp_relay(parse_size(&args[1])).as_secs_f64()
        ),
        _ => drive(&args),
    }
}

/// `serve [current-thread|multi-thread]`: the daemon on this runtime until stdin closes.
fn serve(runtime: Option<&str>) {
    let rt = match runtime {
        Some("multi-thread") => tokio::runtime::Runtime::new().unwrap(),
        Some("current-thread") | None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        Some(other) => panic!("--daemon takes current-thread or multi-thread, not {other}"),
    };
    rt.block_on(async {
        let mut config = e2b_envd::EnvdConfig::ephemeral();
        config.access_token = Some("bench-token".into());
        let handle = e2b_envd::Envd::start(config).await.unwrap();
        println!("{}", handle.url());
        // Serve until the driver closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .unwrap();
        handle.shutdown().await;
    });
}

/// `client <url> <bytes> <mode>` with mode `callback`, `events` or `retain`.
fn client(args: &[String]) {
    let url = args[0].clone();
    let bytes = parse_size(&args[1]);
    let mode = args[2].clone();
    let transport = args.get(3).map(String::as_str).unwrap_or("grpc").to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        // `in-process`: this process embeds its own daemon and calls it without a socket, as
        // `e2b::Sandbox::local_unisolated()` does (the peak RSS then includes the daemon).
        let mut _daemon = None;
        let conn = if transport == "in-process" {
            let mut config = e2b_envd::EnvdConfig::ephemeral();
            config.access_token = Some("bench-token".into());
            let handle = e2b_envd::Envd::start(config).await.unwrap();
            let endpoint = EnvdEndpoint::new(handle.url()).access_token("bench-token");
            let conn = EnvdConnection::with_service(endpoint, handle.local_service()).unwrap();
            _daemon = Some(handle);
            conn
        } else {
            let transport = match transport.as_str() {
                "grpc-web" => Transport::GrpcWeb,
                _ => Transport::Grpc,
            };
            EnvdConnection::new(
                EnvdEndpoint::new(url)
                    .access_token("bench-token")
                    .transport(transport),
            )
            .unwrap()
        };
        let commands = Commands::new(conn);
        // `head` itself, not through `bash -l -c` (a login shell's start-up would count against
        // the stream but not against the raw pipe).
        let cmd = CommandLine::exec(
            "/usr/bin/head",
            ["-c".to_owned(), bytes.to_string(), "/dev/zero".to_owned()],
        );
        let seen = Arc::new(AtomicUsize::new(0));
        let chunks = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let retained = match mode.as_str() {
            "events" => {
                let mut h = commands
                    .start_streaming(cmd, CommandOptions::new())
                    .await
                    .unwrap();
                let mut events = h.take_events().unwrap();
                while let Some(ev) = events.next().await {
                    if let CommandEvent::Stdout(b) = ev.unwrap() {
                        seen.fetch_add(b.len(), Ordering::Relaxed);
                        chunks.fetch_add(1, Ordering::Relaxed);
                    }
                }
                h.retained_len()
            }
            m => {
                let s2 = seen.clone();
                let c2 = chunks.clone();
                let h = commands
                    .start_streaming(
                        cmd,
                        CommandOptions::new()
                            .retain_output(m == "retain")
                            .on_stdout(OutputCallback::bytes(move |b: &[u8]| {
                                s2.fetch_add(b.len(), Ordering::Relaxed);
                                c2.fetch_add(1, Ordering::Relaxed);
                            })),
                    )
                    .await
                    .unwrap();
                let out = h.wait().await.unwrap();
                assert_eq!(out.exit_code, 0);
                h.retained_len()
            }
        };
        let secs = t0.elapsed().as_secs_f64();
        let n = seen.load(Ordering::Relaxed) as u64;
        assert_eq!(n, bytes, "every byte arrived");
        let chunks = chunks.load(Ordering::Relaxed).max(1) as u64;
        println!(
            "{} {:.3} {} {} {} {:.3} {}",
            n,
            secs,
            e2b_test_support::procfs::status_kib("self", "VmHWM:"),
            retained,
            n / chunks,
            e2b_test_support::procfs::cpu_seconds("self").0,
            e2b_test_support::procfs::minor_faults("self"),
        );
    });
}

/// What one client run reports.
struct Run {
    secs: f64,
    rss_kib: u64,
    retained: u64,
    chunk: u64,
    cpu: f64,
    faults: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn drive(args: &[String]) {
    let mut rounds = 3usize;
    let mut daemon = "current-thread".to_owned();
    let mut sizes: Vec<u64> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--rounds" {
            rounds = it
                .next()
                .and_then(|n| n.parse().ok())
                .filter(|&n| n > 0)
                .expect("--rounds takes a positive number");
        } else if a == "--daemon" {
            daemon = it
                .next()
                .filter(|d| *d == "current-thread" || *d == "multi-thread")
                .expect("--daemon takes current-thread or multi-thread")
                .clone();
        } else {
            sizes.push(parse_size(a));
        }
    }
    if sizes.is_empty() {
        sizes = vec![1 << 30, 4 << 30];
    }
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args(["serve", &daemon]).stdin(Stdio::piped());
    let (mut server, url) = e2b_test_support::spawn_daemon_printing_url(cmd);
    eprintln!("envd (child process, {daemon} runtime) at {url}; {rounds} round(s) per row");

    let run = |bytes: u64, mode: &str, transport: &str| -> Run {
        let out = Command::new(&exe)
            .args(["client", &url, &bytes.to_string(), mode, transport])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = text.split_whitespace().collect();
        Run {
            secs: f[1].parse().unwrap(),
            rss_kib: f[2].parse().unwrap(),
            retained: f[3].parse().unwrap(),
            chunk: f[4].parse().unwrap(),
            cpu: f[5].parse().unwrap(),
            faults: f[6].parse().unwrap(),
        }
    };

    println!(
        "| bytes | client | transport | time (s) | MiB/s | raw pipe MiB/s | / raw | relay floor MiB/s | **/ floor** (min–max) | client CPU s/GiB | client faults/GiB | client peak RSS (MiB) | retained (MiB) | KiB per chunk |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut configs: Vec<(u64, &str, &str)> = Vec::new();
    for &s in &sizes {
        configs.push((s, "callback", "grpc"));
        configs.push((s, "events", "grpc"));
        configs.push((s, "callback", "in-process"));
    }
    let smallest = sizes.iter().copied().min().unwrap_or(1 << 30);
    configs.push((smallest, "callback", "grpc-web"));
    configs.push((smallest, "retain", "grpc"));
    for (bytes, mode, transport) in configs {
        let gib = bytes as f64 / (1u64 << 30) as f64;
        // Each round: (raw pipe time, relay floor time, the client's run), back to back.
        let rounds: Vec<(f64, f64, Run)> = (0..rounds)
            .map(|_| {
                let raw = e2b_test_support::floor::raw_pipe(bytes).as_secs_f64();
                let relay = e2b_test_support::floor::pipe_tcp_relay(bytes).as_secs_f64();
                (raw, relay, run(bytes, mode, transport))
            })
            .collect();
        let med = |f: &dyn Fn(&(f64, f64, Run)) -> f64| median(rounds.iter().map(f).collect());
        let to_floor: Vec<f64> = rounds.iter().map(|(_, f, c)| f / c.secs).collect();
        let spread = (
            to_floor.iter().copied().fold(f64::INFINITY, f64::min),
            to_floor.iter().copied().fold(0.0, f64::max),
        );
        let last = &rounds[rounds.len() - 1].2;
        let mib = bytes as f64 / (1 << 20) as f64;
        let label = match mode {
            "callback" => "retain_output(false), bytes callback",
            "events" => "retain_output(false), event stream",
            _ => "retain_output(true), bytes callback",
        };
        println!(
            "| {} | {} | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | **{:.2}** ({:.2}–{:.2}) | {:.2} | {:.0} | {:.1} | {:.0} | {:.0} |",
            human(bytes),
            label,
            transport,
            med(&|(_, _, c)| c.secs),
            mib / med(&|(_, _, c)| c.secs),
            mib / med(&|(r, _, _)| *r),
            med(&|(r, _, c)| r / c.secs),
            mib / med(&|(_, f, _)| *f),
            median(to_floor),
            spread.0,
            spread.1,
            med(&|(_, _, c)| c.cpu / gib),
            med(&|(_, _, c)| c.faults as f64 / gib),
            last.rss_kib as f64 / 1024.0,
            last.retained as f64 / (1 << 20) as f64,
            last.chunk as f64 / 1024.0,
        );
    }
    drop(server.stdin.take());
    let _ = server.wait();
}
