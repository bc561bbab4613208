//! Benchmark: three clients against one `e2b serve`, in the same run, each at its defaults:
//! the Rust facade (`Sandbox::builder(..).create()`), the official Python SDK (`e2b` on PyPI)
//! and the official JS SDK (npm `e2b`).
//!
//! 1. create → run `echo hi` → kill, p50/p90 over ROUNDS (after one warm-up round), and each
//!    SDK's p50 / the Rust facade's;
//! 2. `head -c BYTES /dev/zero` streamed to an output callback, one sandbox per client (the
//!    command as every SDK runs it: `bash -l -c` through the edge), MiB/s and each SDK's share
//!    of the Rust client's rate.
//!
//! ```sh
//! cargo build --release -p e2b-serve
//! cargo bench -p e2b --bench cloud_lifecycle -- [ROUNDS=20] [BYTES=256M]
//! ```
//!
//! Needs the `e2b-serve` binary (next to this bench's build, or `E2B_SERVE_BIN`), a Python with
//! the `e2b` package (`E2B_BENCH_PYTHON`, default `.ci-cache/venv-python/bin/python`) and a
//! directory whose `node_modules` holds npm `e2b` (`E2B_JS_SDK_DIR`, default
//! `.ci-cache/node-control-plane`), both from `scripts/setup`. Exits non-zero, saying what is
//! missing, when one is. Sandboxes are plain (`--isolation plain`), so the figures compare the
//! clients rather than sandbox start-up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2b::{CommandOptions, ConnectionConfig, OutputCallback, Sandbox};

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

/// `python -c PY lifecycle ROUNDS` prints one duration (s) per round after the warm-up;
/// `python -c PY stream BYTES` prints the stream's duration.
const PY: &str = r#"
import sys, time
from e2b import Sandbox
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "lifecycle":
    for i in range(n + 1):
        t = time.perf_counter()
        sbx = Sandbox.create("base")
        out = sbx.commands.run("echo hi")
        assert out.stdout == "hi\n", out.stdout
        sbx.kill()
        if i > 0:  # the first round warms up imports and connections
            print(time.perf_counter() - t, flush=True)
else:
    sbx = Sandbox.create("base")
    try:
        seen = [0]
        t = time.perf_counter()
        sbx.commands.run(f"head -c {n} /dev/zero", on_stdout=lambda s: seen.__setitem__(0, seen[0] + len(s)))
        secs = time.perf_counter() - t
        assert seen[0] == n, (seen[0], n)
        print(secs, flush=True)
    finally:
        sbx.kill()
"#;

/// The same for node (`node --input-type=module -e JS lifecycle|stream N`).
const JS: &str = r#"
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import path from 'node:path'
const require = createRequire(path.join(process.env.E2B_JS_SDK_DIR, 'package.json'))
const { Sandbox } = await import(pathToFileURL(require.resolve('e2b')).href)
const [mode, arg] = process.argv.slice(1)
const n = Number(arg)
if (mode === 'lifecycle') {
  for (let i = 0; i <= n; i++) {
    const t = performance.now()
    const sbx = await Sandbox.create('base')
    const out = await sbx.commands.run('echo hi')
    if (out.stdout !== 'hi\n') throw new Error(`stdout ${JSON.stringify(out.stdout)}`)
    await sbx.kill()
    if (i > 0) console.log((performance.now() - t) / 1000)
  }
} else {
  const sbx = await Sandbox.create('base')
  try {
    let seen = 0
    const t = performance.now()
    await sbx.commands.run(`head -c ${n} /dev/zero`, { onStdout: (d) => { seen += d.length } })
    const secs = (performance.now() - t) / 1000
    if (seen !== n) throw new Error(`saw ${seen} of ${n} bytes`)
    console.log(secs)
  } finally {
    await sbx.kill()
  }
}
"#;

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn find_serve() -> PathBuf {
    if let Some(p) = std::env::var_os("E2B_SERVE_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    for dir in exe.ancestors().skip(1).take(3) {
        let p = dir.join("e2b-serve");
        if p.is_file() {
            return p;
        }
    }
    missing("the e2b-serve binary: `cargo build --release -p e2b-serve` or set E2B_SERVE_BIN");
}

fn missing(what: &str) -> ! {
    eprintln!("cloud_lifecycle: missing {what}");
    std::process::exit(2);
}

fn parse_size(s: &str) -> u64 {
    let (num, mul) = match s.chars().last() {
        Some('M' | 'm') => (&s[..s.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("a size like 256M or 1G") * mul
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// One SDK run as a child process pointed at `e2b serve` like a user's program: the figures it
/// prints, one per line.
fn sdk_run(program: &str, script_args: &[String], env: &[(&str, &str)], what: &str) -> Vec<f64> {
    let mut cmd = Command::new(program);
    cmd.args(script_args)
        .env_remove("E2B_DEBUG")
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => missing(&format!(
            "{program} ({e}) for the {what}: run scripts/setup"
        )),
    };
    if !out.status.success() {
        eprintln!("cloud_lifecycle: the {what} run failed ({})", out.status);
        std::process::exit(1);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

struct Serve {
    child: std::process::Child,
    state: PathBuf,
    api: String,
    edge: String,
}

impl Serve {
    fn start() -> Serve {
        let state = std::env::temp_dir().join(format!("e2b-bench-serve-{}", std::process::id()));
        std::fs::create_dir_all(&state).unwrap();
        let mut child = Command::new(find_serve())
            .args(["--api-port", "0", "--edge-port", "0", "--api-key", KEY])
            .args(["--isolation", "plain"])
            .arg("--state-dir")
            .arg(&state)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start e2b-serve");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut api, mut edge) = (String::new(), String::new());
        while api.is_empty() || edge.is_empty() {
            let line = lines.next().expect("e2b-serve printed its URLs").unwrap();
            if let Some(u) = line.strip_prefix("export E2B_API_URL=") {
                api = u.to_owned();
            }
            if let Some(u) = line.strip_prefix("export E2B_SANDBOX_URL=") {
                edge = u.to_owned();
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Serve {
            child,
            state,
            api,
            edge,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

async fn rust_lifecycle(config: &ConnectionConfig, rounds: usize) -> Vec<f64> {
    let mut times = Vec::new();
    for i in 0..=rounds {
        let t = Instant::now();
        let sbx = Sandbox::builder("base")
            .connection(config.clone())
            .create()
            .await
            .unwrap();
        let out = sbx
            .commands()
            .run("echo hi", CommandOptions::new())
            .await
            .unwrap();
        assert_eq!(out.stdout, "hi\n");
        sbx.kill().await.unwrap();
        if i > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times
}

async fn rust_stream(config: &ConnectionConfig, bytes: u64) -> f64 {
    let sbx = Sandbox::builder("base")
        .connection(config.clone())
        .create()
        .await
        .unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let t = Instant::now();
    let out = sbx
        .commands()
        .run(
            format!("head -c {bytes} /dev/zero"),
            CommandOptions::new()
                .retain_output(false)
                .on_stdout(OutputCallback::bytes(move |b: &[u8]| {
                    counter.fetch_add(b.len() as u64, Ordering::Relaxed);
                })),
        )
        .await
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(out.exit_code, 0);
    assert_eq!(seen.load(Ordering::Relaxed), bytes, "every byte arrived");
    sbx.kill().await.unwrap();
    secs
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; the round count and size are the other arguments.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20);
    let bytes = parse_size(args.get(1).map(String::as_str).unwrap_or("256M"));
    let python = std::env::var("E2B_BENCH_PYTHON").unwrap_or_else(|_| {
        repo_path(".ci-cache/venv-python/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    let js_dir = std::env::var("E2B_JS_SDK_DIR").unwrap_or_else(|_| {
        repo_path(".ci-cache/node-control-plane")
            .to_string_lossy()
            .into_owned()
    });
    if !PathBuf::from(&js_dir).join("node_modules/e2b").is_dir() {
        missing(&format!(
            "npm e2b in {js_dir}/node_modules: run scripts/setup or set E2B_JS_SDK_DIR"
        ));
    }

    let serve = Serve::start();
    let config = ConnectionConfig::default()
        .api_key(KEY)
        .api_url(serve.api.clone())
        .sandbox_url(serve.edge.clone());
    let env = [
        ("E2B_API_URL", serve.api.as_str()),
        ("E2B_SANDBOX_URL", serve.edge.as_str()),
        ("E2B_API_KEY", KEY),
        ("E2B_JS_SDK_DIR", js_dir.as_str()),
    ];
    let py_args =
        |mode: &str, n: String| -> Vec<String> { vec!["-c".into(), PY.into(), mode.into(), n] };
    let js_args = |mode: &str, n: String| -> Vec<String> {
        vec![
            "--input-type=module".into(),
            "-e".into(),
            JS.into(),
            mode.into(),
            n,
        ]
    };

    // 1. create → echo → kill.
    let rust = rust_lifecycle(&config, rounds).await;
    let py = sdk_run(
        &python,
        &py_args("lifecycle", rounds.to_string()),
        &env,
        "Python SDK",
    );
    let js = sdk_run(
        "node",
        &js_args("lifecycle", rounds.to_string()),
        &env,
        "JS SDK",
    );
    let r50 = pct(rust.clone(), 0.5);
    println!("create + echo + kill against e2b serve, {rounds} rounds each (after 1 warm-up)");
    for (name, v) in [("Rust facade", &rust), ("Python SDK", &py), ("JS SDK", &js)] {
        let (p50, p90) = (pct(v.clone(), 0.5), pct(v.clone(), 0.9));
        println!(
            "  {name:<12} p50 {:7.1} ms  p90 {:7.1} ms  p50 / Rust {:.2}x",
            p50 * 1e3,
            p90 * 1e3,
            p50 / r50
        );
    }

    // 2. the stream.
    let mib = bytes as f64 / f64::from(1u32 << 20);
    let rust_secs = rust_stream(&config, bytes).await;
    let py_secs = sdk_run(
        &python,
        &py_args("stream", bytes.to_string()),
        &env,
        "Python SDK stream",
    );
    let js_secs = sdk_run(
        "node",
        &js_args("stream", bytes.to_string()),
        &env,
        "JS SDK stream",
    );
    let rust_rate = mib / rust_secs;
    println!(
        "{mib:.0} MiB of stdout (`head -c`, bash -l -c, through the edge) to an output callback"
    );
    println!("  Rust facade  {rust_rate:7.0} MiB/s");
    for (name, secs) in [("Python SDK", py_secs), ("JS SDK", js_secs)] {
        let rate = mib / secs.first().copied().expect("the SDK printed its time");
        println!(
            "  {name:<12} {rate:7.0} MiB/s  {:.2} of the Rust client's rate",
            rate / rust_rate
        );
    }
}
