//! Request round-trip latency to the fake agent: through the sandbox (`Sandbox::local_with_transport`,
//! the real embedded envd; `start_streaming`, stdin over one open `StreamInput` stream), with the
//! sandbox's clients calling the daemon in-process (the default) and over its loopback port
//! (h2c, as an external client), against the same agent as a local child process. Prints the
//! load average too: the machine is shared, so compare the ratio within one run.
//!
//! `cargo bench -p e2b-acp --bench latency` (prints a table; no criterion).

use std::time::{Duration, Instant};

use e2b::{EnvdConfig, LocalTransport, Sandbox};
use e2b_acp::{AcpOptions, AcpTransport, CommandLine, LocalProcess};

/// The fake agent (in `e2b-test-support`, built on first use).
fn fake() -> String {
    e2b_test_support::fake_acp_agent().display().to_string()
}
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
    let local = match LocalProcess::spawn(&fake(), Vec::<String>::new())
        .and_then(|p| AcpTransport::start(p, &AcpOptions::new()))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot start the local agent: {e}");
            std::process::exit(1);
        }
    };
    round_trips(&local, WARMUP, 1).await;
    let l = stats(round_trips(&local, ROUNDS, 1_000_000).await);
    let _ = local.stop(Duration::from_secs(5)).await;

    let mut rows = vec![("local child process", l)];
    for transport in [LocalTransport::InProcess, LocalTransport::Loopback] {
        let sandbox = match Sandbox::local_with_transport(EnvdConfig::ephemeral(), transport).await
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cannot start the local sandbox: {e}");
                std::process::exit(1);
            }
        };
        let sandboxed = match e2b_acp::start_acp_transport(
            sandbox.commands(),
            CommandLine::exec(fake(), Vec::<String>::new()),
            AcpOptions::new(),
        )
        .await
        {
            Ok(t) => t,
            Err(e) => {
                eprintln!("cannot start the sandboxed agent: {e}");
                std::process::exit(1);
            }
        };
        round_trips(&sandboxed, WARMUP, 1).await;
        let s = stats(round_trips(&sandboxed, ROUNDS, 1_000_000).await);
        let _ = sandboxed.stop(Duration::from_secs(5)).await;
        let _ = sandbox.kill().await;
        rows.push(match transport {
            LocalTransport::Loopback => ("sandbox, loopback h2c", s),
            _ => ("sandbox, in-process", s),
        });
    }

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "request round trip, {ROUNDS} sequential `_fake/echo` requests (µs); load average {}",
        load.join(" ")
    );
    println!("{:<28} {:>10} {:>10} {:>10}", "", "mean", "p50", "p99");
    for (name, r) in &rows {
        println!("{name:<28} {:>10.1} {:>10.1} {:>10.1}", r.0, r.1, r.2);
    }
    for (name, r) in &rows[1..] {
        println!(
            "ratio {name} / local: mean {:.2}, p50 {:.2}",
            r.0 / l.0,
            r.1 / l.1
        );
    }
}
