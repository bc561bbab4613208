//! Request round-trip latency to the fake agent: through the sandbox (the real embedded envd,
//! `start_streaming`; stdin over one open `StreamInput` stream) against the same agent as a
//! local child process. Prints the load average too: the machine is shared, so compare the
//! ratio within one run.
//!
//! `cargo bench -p e2b-acp --bench latency` (prints a table; no criterion).

use std::time::{Duration, Instant};

use e2b_acp::{AcpOptions, AcpTransport, CommandLine, Commands, LocalProcess};
use e2b_commands::{EnvdConnection, EnvdEndpoint};

const FAKE: &str = env!("CARGO_BIN_EXE_fake-acp-agent");
const WARMUP: usize = 200;
const ROUNDS: usize = 3000;

async fn round_trips(t: &AcpTransport, n: usize, base: u64) -> Vec<Duration> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let id = base + i;
        let msg =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"_fake/echo","params":{{"i":{id}}}}}"#);
        let t0 = Instant::now();
        if t.send(msg.as_bytes()).await.is_err() {
            break;
        }
        match t.recv().await {
            Some(Ok(_)) => v.push(t0.elapsed()),
            _ => break,
        }
    }
    v
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = v.iter().map(|d| us(*d)).sum::<f64>() / v.len().max(1) as f64;
    let p = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q) as usize)
            .map(|d| us(*d))
            .unwrap_or(0.0)
    };
    (mean, p(0.5), p(0.99))
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let local = match LocalProcess::spawn(FAKE, Vec::<String>::new())
        .and_then(|p| AcpTransport::start(p, &AcpOptions::new()))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot start the local agent: {e}");
            return;
        }
    };
    round_trips(&local, WARMUP, 1).await;
    let l = stats(round_trips(&local, ROUNDS, 1_000_000).await);
    let _ = local.stop(Duration::from_secs(5)).await;

    let envd = e2b_test_support::spawn_envd().await;
    let mut ep = EnvdEndpoint::new(envd.url());
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    let commands = match EnvdConnection::new(ep) {
        Ok(c) => Commands::new(c),
        Err(e) => {
            eprintln!("cannot connect to envd: {e}");
            return;
        }
    };
    let sandboxed = match e2b_acp::start_acp_transport(
        &commands,
        CommandLine::exec(FAKE, Vec::<String>::new()),
        AcpOptions::new(),
    )
    .await
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot start the sandboxed agent: {e}");
            return;
        }
    };
    round_trips(&sandboxed, WARMUP, 1).await;
    let s = stats(round_trips(&sandboxed, ROUNDS, 1_000_000).await);
    let _ = sandboxed.stop(Duration::from_secs(5)).await;

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "request round trip, {ROUNDS} sequential `_fake/echo` requests (µs); load average {}",
        load.join(" ")
    );
    println!("{:<28} {:>10} {:>10} {:>10}", "", "mean", "p50", "p99");
    println!(
        "{:<28} {:>10.1} {:>10.1} {:>10.1}",
        "local child process", l.0, l.1, l.2
    );
    println!(
        "{:<28} {:>10.1} {:>10.1} {:>10.1}",
        "sandbox (embedded envd)", s.0, s.1, s.2
    );
    println!(
        "ratio sandbox/local: mean {:.2}, p50 {:.2}",
        s.0 / l.0,
        s.1 / l.1
    );
}
