//! Benchmark: create → run `echo` → kill through E2B's API against `e2b serve`, the Rust facade
//! (`Sandbox::builder(..).create()`) vs the official Python SDK (`e2b` on PyPI) in the same run.
//! Prints p50/p90 per client and the ratio Python / Rust.
//!
//! ```sh
//! cargo build -p e2b-serve
//! cargo bench -p e2b --bench cloud_lifecycle -- [ROUNDS]   # default 20
//! ```
//!
//! Needs the `e2b-serve` binary (next to this example's build, or `E2B_SERVE_BIN`) and a Python
//! with the `e2b` package (`E2B_BENCH_PYTHON`, default `.ci-cache/venv-python/bin/python` from
//! `scripts/setup`). Exits non-zero when either is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2b::{CommandOptions, ConnectionConfig, Sandbox};

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

const PY: &str = r#"
import sys, time
from e2b import Sandbox
rounds = int(sys.argv[1])
for i in range(rounds + 1):
    t = time.perf_counter()
    sbx = Sandbox.create("base")
    out = sbx.commands.run("echo hi")
    assert out.stdout == "hi\n", out.stdout
    sbx.kill()
    if i > 0:  # the first round warms up imports and connections
        print(time.perf_counter() - t, flush=True)
"#;

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
    eprintln!("missing the e2b-serve binary: `cargo build -p e2b-serve` or set E2B_SERVE_BIN");
    std::process::exit(2);
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; the round count is the other argument.
    let rounds: usize = std::env::args()
        .skip(1)
        .find(|a| a != "--bench")
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let python = std::env::var("E2B_BENCH_PYTHON").unwrap_or_else(|_| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        root.join(".ci-cache/venv-python/bin/python")
            .to_string_lossy()
            .into_owned()
    });
    let state = std::env::temp_dir().join(format!("e2b-bench-serve-{}", std::process::id()));
    std::fs::create_dir_all(&state).unwrap();
    let mut serve = Command::new(find_serve())
        .args(["--api-port", "0", "--edge-port", "0", "--api-key", KEY])
        .arg("--state-dir")
        .arg(&state)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start e2b-serve");
    let mut lines = std::io::BufReader::new(serve.stdout.take().unwrap()).lines();
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

    let config = ConnectionConfig::default()
        .api_key(KEY)
        .api_url(api.clone())
        .sandbox_url(edge.clone());
    let mut rust = Vec::new();
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
            rust.push(t.elapsed().as_secs_f64());
        }
    }

    let py = Command::new(&python)
        .args(["-c", PY, &rounds.to_string()])
        .env("E2B_API_URL", &api)
        .env("E2B_SANDBOX_URL", &edge)
        .env("E2B_API_KEY", KEY)
        .env_remove("E2B_DEBUG")
        .stderr(Stdio::inherit())
        .output();
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !matches!(serve.try_wait(), Ok(Some(_))) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = serve.kill();
    let _ = serve.wait();
    let _ = std::fs::remove_dir_all(&state);

    let py = match py {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!(
                "the Python SDK run failed ({:?}); is `e2b` installed in {python}?",
                o.status
            );
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("cannot run {python} ({e}): run scripts/setup or set E2B_BENCH_PYTHON");
            std::process::exit(2);
        }
    };
    let pyv: Vec<f64> = String::from_utf8_lossy(&py.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let (r50, r90) = (pct(rust.clone(), 0.5), pct(rust, 0.9));
    let (p50, p90) = (pct(pyv.clone(), 0.5), pct(pyv, 0.9));
    println!("create + echo + kill against e2b serve, {rounds} rounds each (after 1 warm-up)");
    println!(
        "  Rust facade      p50 {:7.1} ms  p90 {:7.1} ms",
        r50 * 1e3,
        r90 * 1e3
    );
    println!(
        "  Python SDK       p50 {:7.1} ms  p90 {:7.1} ms",
        p50 * 1e3,
        p90 * 1e3
    );
    println!(
        "  ratio Python / Rust: p50 {:.2}x  p90 {:.2}x",
        p50 / r50,
        p90 / r90
    );
}
