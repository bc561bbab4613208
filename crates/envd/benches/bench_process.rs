//! Process-service benchmark against the real daemon binary (run in release):
//!
//! ```text
//! cargo bench -p e2b-envd --bench bench_process -- [--bytes 1073741824] [--latency-runs 200] [--concurrent 1000]
//! ```
//!
//! 1. stdout throughput of `head -c N /dev/zero` streamed to a tonic client over h2c, vs the raw
//!    `head -c N /dev/zero | cat > /dev/null` pipe (ratio; goal ≥ 0.5), and vs the floor of any
//!    design with a loopback TCP hop: a bare blocking relay from the pipe to a TCP socket; and
//!    the same stream to a tonic client calling an embedded daemon in-process (no socket);
//! 2. `/bin/true` start-to-end latency through the daemon vs spawning `/bin/true` locally
//!    (ratio; goal ≤ 3×);
//! 3. many concurrent streaming commands: none fails, every byte arrives; the daemon's peak RSS.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use e2b_envd_proto::process::process_client::ProcessClient;
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use e2b_envd_proto::process::{ProcessConfig, StartRequest};
use e2b_test_support::floor::{pipe_tcp_relay, raw_pipe};
use e2b_test_support::procfs::{cpu_seconds, status_kib};
use tonic::transport::Channel;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start_req(cmd: &str, args: &[&str]) -> StartRequest {
    StartRequest {
        process: Some(ProcessConfig {
            cmd: cmd.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    }
}

/// Runs a command to its end; returns (stdout bytes, exit code).
async fn run<T>(
    client: &mut ProcessClient<T>,
    req: StartRequest,
) -> Result<(u64, i32), tonic::Status>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut s = client.start(req).await?.into_inner();
    let mut bytes = 0u64;
    let mut events = 0u64;
    let mut code = None;
    while let Some(m) = s.message().await? {
        match m.event.and_then(|e| e.event) {
            Some(Event::Data(d)) => {
                if let Some(Output::Stdout(b)) = d.output {
                    bytes += b.len() as u64;
                    events += 1;
                }
            }
            Some(Event::End(e)) => code = Some(e.exit_code),
            _ => {}
        }
    }
    if bytes > 100_000_000 {
        println!(
            "  {events} data events, {} bytes per event on average",
            bytes / events.max(1)
        );
    }
    Ok((
        bytes,
        code.ok_or_else(|| tonic::Status::internal("no end event"))?,
    ))
}

/// Streams `head -c N /dev/zero` to `client` and checks every byte arrived; returns the time.
/// Runs on a runtime worker, as a real client's tasks do (polled from the main thread's
/// `block_on`, every wake-up takes a slower path: about a third of the in-process rate).
async fn stream_head<T>(client: &ProcessClient<T>, bytes: u64) -> Duration
where
    T: tonic::client::GrpcService<tonic::body::Body> + Clone + Send + 'static,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
    T::Future: Send,
{
    let mut client = client.clone();
    let t = Instant::now();
    let (got, code) = tokio::spawn(async move {
        run(
            &mut client,
            start_req("/usr/bin/head", &["-c", &bytes.to_string(), "/dev/zero"]),
        )
        .await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!((got, code), (bytes, 0));
    t.elapsed()
}

async fn channel(url: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .tcp_nodelay(true)
        .max_frame_size(Some(1 << 20))
        .connect()
        .await
        .unwrap()
}

#[tokio::main]
async fn main() {
    let bytes = arg("--bytes", 1 << 30);
    let latency_runs = arg("--latency-runs", 200);
    let concurrent = arg("--concurrent", 1000);
    let per_command = arg("--concurrent-bytes", 100_000);

    let bin = std::env::var("E2B_ENVD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_BIN_EXE_e2b-envd")));
    let mut cmd = Command::new(&bin);
    cmd.args(["--port", "0"]);
    let (mut daemon, url) = e2b_test_support::spawn_daemon_printing_url(cmd);
    let dpid = daemon.id();
    println!("daemon {} (pid {dpid}) at {url}", bin.display());
    let mut client = ProcessClient::new(channel(&url).await);

    // 1. Throughput.
    let raw = raw_pipe(bytes);
    let cpu_before = (cpu_seconds("self").0, cpu_seconds(&dpid.to_string()).0);
    let streamed = stream_head(&client, bytes).await;
    let mib = bytes as f64 / (1 << 20) as f64;
    let raw_rate = mib / raw.as_secs_f64();
    let stream_rate = mib / streamed.as_secs_f64();
    println!(
        "throughput: raw pipe {raw_rate:.0} MiB/s ({raw:?}), envd h2c {stream_rate:.0} MiB/s ({streamed:?}), ratio {:.2}",
        stream_rate / raw_rate
    );
    let gib = bytes as f64 / (1u64 << 30) as f64;
    println!(
        "CPU per GiB streamed (user+sys): client {:.2} s, daemon {:.2} s",
        (cpu_seconds("self").0 - cpu_before.0) / gib,
        (cpu_seconds(&dpid.to_string()).0 - cpu_before.1) / gib
    );
    println!(
        "daemon RSS after throughput: {} kB (peak {} kB)",
        status_kib(&dpid.to_string(), "VmRSS:"),
        status_kib(&dpid.to_string(), "VmHWM:")
    );
    // After the CPU figures: the relay's threads run in this process.
    let relay = pipe_tcp_relay(bytes);
    let relay_rate = mib / relay.as_secs_f64();
    println!(
        "floor: a bare blocking pipe -> loopback TCP relay {relay_rate:.0} MiB/s ({relay:?}), ratio to the raw pipe {:.2}; envd h2c / relay {:.2}",
        relay_rate / raw_rate,
        stream_rate / relay_rate
    );

    // 1b. The same stream to a tonic client calling an embedded daemon in-process
    // (`EnvdHandle::local_service`, what `e2b::Sandbox::local_unisolated()` uses): no socket in between.
    {
        let handle = e2b_envd::Envd::start(e2b_envd::EnvdConfig::ephemeral())
            .await
            .unwrap();
        let local =
            ProcessClient::new(handle.local_service()).max_decoding_message_size(usize::MAX);
        let raw_rate = mib / raw_pipe(bytes).as_secs_f64();
        let rate = mib / stream_head(&local, bytes).await.as_secs_f64();
        println!(
            "throughput in-process: raw pipe {raw_rate:.0} MiB/s, envd in-process {rate:.0} MiB/s, ratio {:.2}",
            rate / raw_rate
        );
        handle.shutdown().await;
    }

    // 2. Latency.
    for _ in 0..10 {
        run(&mut client, start_req("/bin/true", &[])).await.unwrap();
        Command::new("/bin/true").status().unwrap();
    }
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for _ in 0..latency_runs {
        let t = Instant::now();
        Command::new("/bin/true").status().unwrap();
        local.push(t.elapsed());
        let t = Instant::now();
        run(&mut client, start_req("/bin/true", &[])).await.unwrap();
        remote.push(t.elapsed());
    }
    local.sort();
    remote.sort();
    let med = |v: &[Duration]| v[v.len() / 2];
    let p99 = |v: &[Duration]| v[(v.len() * 99 / 100).min(v.len() - 1)];
    println!(
        "latency /bin/true: local median {:?} p99 {:?}; envd median {:?} p99 {:?}; median ratio {:.2}",
        med(&local),
        p99(&local),
        med(&remote),
        p99(&remote),
        med(&remote).as_secs_f64() / med(&local).as_secs_f64()
    );

    // 3. Concurrency.
    let channels: Vec<Channel> = futures::future::join_all((0..8).map(|_| channel(&url))).await;
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let p2 = peak.clone();
    let sampler = tokio::spawn(async move {
        loop {
            p2.fetch_max(
                status_kib(&dpid.to_string(), "VmRSS:"),
                std::sync::atomic::Ordering::Relaxed,
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let t = Instant::now();
    let cmd = format!("sleep 0.2; head -c {per_command} /dev/zero");
    let tasks: Vec<_> = (0..concurrent)
        .map(|i| {
            let mut c = ProcessClient::new(channels[i as usize % channels.len()].clone());
            let req = start_req("/bin/sh", &["-c", &cmd]);
            tokio::spawn(async move { run(&mut c, req).await })
        })
        .collect();
    let mut ok = 0;
    let mut failures = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok((b, 0)) if b == per_command => ok += 1,
            other => failures.push(format!("{other:?}")),
        }
    }
    sampler.abort();
    println!(
        "concurrency: {concurrent} commands x {per_command} bytes in {:?}: {ok} ok, {} failed; daemon peak RSS {} kB (sampled), VmHWM {} kB",
        t.elapsed(),
        failures.len(),
        peak.load(std::sync::atomic::Ordering::Relaxed),
        status_kib(&dpid.to_string(), "VmHWM:")
    );
    for f in failures.iter().take(5) {
        println!("  failure: {f}");
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    if !failures.is_empty() {
        std::process::exit(1);
    }
}
