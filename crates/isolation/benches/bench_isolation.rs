//! Isolated vs not, measured in one run (ratios):
//!
//! 1. sandbox creation + first `true`: start `e2b-envd --port 0` (or `e2b-envd --isolate
//!    --network none --port 0`), read its URL, run `/bin/true` through the Process service,
//!    until its end event; p50 and p90 of N rounds, interleaved;
//! 2. a 1 GiB stdout stream (`head -c 1G /dev/zero`) through each daemon (Connect, binary
//!    protobuf), from the start request to the last byte.
//!
//! ```text
//! cargo build --release -p e2b-envd
//! cargo bench -p e2b-isolation --bench bench_isolation -- [ROUNDS]
//! ```
//!
//! The envd binary is `E2B_ENVD_BIN` or `e2b-envd` in the profile directory above the
//! benchmark's (`target/release/deps/..`). Needs
//! root (isolation maps a range of host ids).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn envd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("E2B_ENVD_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("e2b-envd")
}

struct Daemon {
    child: Child,
    addr: String,
}

fn start(isolated: bool) -> Daemon {
    let mut cmd = Command::new(envd_bin());
    cmd.args(["--port", "0"]);
    if isolated {
        cmd.args(["--isolate", "--network", "none"]);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start e2b-envd (set E2B_ENVD_BIN or build it next to this example)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("e2b-envd printed no URL: {line:?}"))
        .to_string();
    Daemon { child, addr }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain kill of our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Protobuf StartRequest { process: { cmd, args }, stdin: false }.
fn start_request(cmd: &str, args: &[&str]) -> Vec<u8> {
    fn field(buf: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
        buf.push(tag);
        let mut n = bytes.len();
        while n >= 0x80 {
            buf.push((n as u8) | 0x80);
            n >>= 7;
        }
        buf.push(n as u8);
        buf.extend_from_slice(bytes);
    }
    let mut config = Vec::new();
    field(&mut config, 0x0a, cmd.as_bytes());
    for a in args {
        field(&mut config, 0x12, a.as_bytes());
    }
    let mut req = Vec::new();
    field(&mut req, 0x0a, &config);
    req.extend_from_slice(&[0x20, 0x00]);
    let mut env = vec![0u8];
    env.extend_from_slice(&(req.len() as u32).to_be_bytes());
    env.extend_from_slice(&req);
    env
}

/// Runs a command through Connect (binary protobuf, HTTP/1.1) and returns the response body
/// size once the server closed it.
fn run(addr: &str, cmd: &str, args: &[&str]) -> u64 {
    let body = start_request(cmd, args);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST /process.Process/Start HTTP/1.1\r\nHost: {addr}\r\nContent-Type: \
         application/connect+proto\r\nConnect-Protocol-Version: 1\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    total
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // `cargo bench` adds `--bench`; the first number is the round count.
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    // Warm the page cache.
    drop(start(false));
    drop(start(true));

    let (mut plain, mut iso) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (isolated, out) in [(false, &mut plain), (true, &mut iso)] {
            let t = Instant::now();
            let d = start(isolated);
            run(&d.addr, "/bin/true", &[]);
            out.push(t.elapsed().as_secs_f64() * 1000.0);
            drop(d);
        }
    }
    let (p50p, p50i) = (pct(&mut plain, 0.5), pct(&mut iso, 0.5));
    let (p90p, p90i) = (pct(&mut plain, 0.9), pct(&mut iso, 0.9));
    println!("create + first `true`, {rounds} rounds each (ms):");
    println!("  not isolated  p50 {p50p:7.1}  p90 {p90p:7.1}");
    println!("  isolated      p50 {p50i:7.1}  p90 {p90i:7.1}");
    println!(
        "  ratio         p50 {:.2}x  p90 {:.2}x",
        p50i / p50p,
        p90i / p90p
    );

    let stream = |isolated: bool| {
        let d = start(isolated);
        let t = Instant::now();
        let bytes = run(&d.addr, "/bin/sh", &["-c", "head -c 1073741824 /dev/zero"]);
        let secs = t.elapsed().as_secs_f64();
        assert!(bytes > 1 << 30, "short stream: {bytes} bytes");
        secs
    };
    let (mut sp, mut si) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        sp.push(stream(false));
        si.push(stream(true));
    }
    let (sp, si) = (pct(&mut sp, 0.5), pct(&mut si, 0.5));
    println!("1 GiB stdout stream, median of 3 (s):");
    println!("  not isolated  {sp:6.2} s ({:.0} MiB/s)", 1024.0 / sp);
    println!("  isolated      {si:6.2} s ({:.0} MiB/s)", 1024.0 / si);
    println!("  ratio         {:.2}x", si / sp);
}
