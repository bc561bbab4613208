//! `e2b acp`, the binary an editor runs, end to end: the agent's stderr reaches the bridge's
//! stderr, a failed agent is explained, SIGTERM/SIGINT/stdin EOF leave nothing running in the
//! sandbox (a separate `e2b envd` daemon, as a remote sandbox would be), and the official Rust
//! and Python ACP SDK clients drive it with a real ACP agent (the Python SDK's echo agent, from
//! `scripts/install-acp-agents`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const E2B: &str = env!("CARGO_BIN_EXE_e2b");

/// A separate `e2b envd` daemon on a free loopback port, killed on drop.
struct Daemon {
    child: Child,
    url: String,
}

impl Daemon {
    fn start() -> Self {
        let mut child = Command::new(E2B)
            .args(["envd", "--port", "0", "--bind", "127.0.0.1"])
            .env_remove("E2B_ENVD_ACCESS_TOKEN")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut url = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        let url = url.trim().to_owned();
        assert!(url.starts_with("http://"), "daemon printed {url:?}");
        Self { child, url }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines of a child's stderr, on a thread.
fn stderr_lines(err: std::process::ChildStderr) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no stderr line starting with {prefix:?} within 30 s"));
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.to_owned();
        }
    }
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')),
        Err(_) => false,
    }
}

fn eventually_dead(pid: u32, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if !alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the agent (pid {pid}) is still running: {why}");
}

fn wait_exit(mut child: Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("e2b acp did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An agent that reports its pid on stderr and then neither reads stdin nor exits.
const STUBBORN: &str = "echo pid=$$ >&2; exec sleep 600";

/// `e2b acp` against `daemon` with `sh -c AGENT` as the agent (exec form: no login shell, whose
/// profile may be slow or stall on a machine's own setup).
fn start_bridge(daemon: &Daemon, agent: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(E2B)
        .args(["acp", "--sandbox", &daemon.url, "--", "sh", "-c", agent])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(child.stderr.take().unwrap());
    (child, rx)
}

// Issue 15: an editor that kills the bridge must not leave the agent running in the sandbox;
// the agent's stderr reaches the bridge's stderr.
#[test]
fn sigterm_and_sigint_kill_the_agent_and_exit_128_plus_n() {
    let daemon = Daemon::start();
    for (sig, n) in [("TERM", 15), ("INT", 2)] {
        let (child, rx) = start_bridge(&daemon, STUBBORN);
        let pid: u32 = wait_for_line(&rx, "pid=").parse().unwrap();
        assert!(alive(pid));
        let st = Command::new("kill")
            .args([format!("-{sig}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let status = wait_exit(child, Duration::from_secs(20));
        assert_eq!(status.code(), Some(128 + n), "SIG{sig}: {status:?}");
        eventually_dead(pid, &format!("SIG{sig} to e2b acp"));
        let said: Vec<String> = rx.try_iter().collect();
        assert!(
            said.iter()
                .any(|l| l.contains("received signal") && l.contains("killed")),
            "SIG{sig}: {said:?}"
        );
    }
}

// EOF from the editor stops the agent (EOF to it) and the bridge exits with its code.
#[test]
fn stdin_eof_stops_the_agent() {
    let daemon = Daemon::start();
    let (mut child, rx) = start_bridge(&daemon, "echo pid=$$ >&2; cat >/dev/null; exit 0");
    let pid: u32 = wait_for_line(&rx, "pid=").parse().unwrap();
    assert!(alive(pid));
    drop(child.stdin.take());
    let status = wait_exit(child, Duration::from_secs(20));
    eventually_dead(pid, "stdin EOF to e2b acp");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The pids of the processes the daemon at `url` lists (its process list, through the Rust
/// commands client).
fn daemon_pids(url: &str) -> Vec<u32> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = e2b_commands::Commands::new(
            e2b_commands::EnvdConnection::new(e2b_commands::EnvdEndpoint::new(url.to_owned()))
                .unwrap(),
        );
        c.list().await.unwrap().into_iter().map(|p| p.pid).collect()
    })
}

// Issue 15: an agent that ignores the EOF (and SIGTERM/SIGHUP) is killed once the grace period
// after the editor's EOF is over: the bridge exits, nothing is left in the sandbox.
#[test]
fn stdin_eof_kills_an_agent_that_ignores_it_after_the_grace_period() {
    let daemon = Daemon::start();
    let (mut child, rx) = start_bridge(
        &daemon,
        "echo pid=$$ >&2; trap '' TERM HUP; while :; do sleep 1; done",
    );
    let pid: u32 = wait_for_line(&rx, "pid=").parse().unwrap();
    assert!(daemon_pids(&daemon.url).contains(&pid));
    drop(child.stdin.take());
    // the grace period (2 s) plus a margin for a loaded machine
    let status = wait_exit(child, Duration::from_secs(15));
    eventually_dead(pid, "stdin EOF to e2b acp with an agent that ignores it");
    let left = daemon_pids(&daemon.url);
    assert!(
        !left.contains(&pid),
        "the daemon still lists the agent: {left:?}"
    );
    // killed by the bridge after the grace period: what the editor asked for, and said so
    assert_eq!(status.code(), Some(0), "{status:?}");
    let said: Vec<String> = rx.try_iter().collect();
    assert!(said.iter().any(|l| l.contains("was killed")), "{said:?}");
}

// Issue 15: a failed agent is explained on stderr, with its own stderr before it.
#[test]
fn a_failed_agent_is_explained_on_stderr() {
    let mut child = Command::new(E2B)
        .args([
            "acp",
            "--",
            "sh",
            "-c",
            "echo agent-broke-its-config >&2; exit 3",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    let mut stderr = child.stderr.take().unwrap();
    let status = wait_exit(child, Duration::from_secs(30));
    stderr.read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(3), "{err}");
    let forwarded = err.find("agent-broke-its-config").expect(&err);
    let explained = err.find("exited with code 3").expect(&err);
    assert!(forwarded < explained, "{err}");
}

fn agents_dir() -> PathBuf {
    PathBuf::from(std::env::var("ACP_AGENTS_DIR").unwrap_or_else(|_| "/tmp/acp-agents".to_owned()))
}

fn require(path: &Path, what: &str) -> String {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run `scripts/install-acp-agents` (ACP_AGENTS_DIR={})",
        path.display(),
        agents_dir().display()
    );
    path.display().to_string()
}

/// The echo agent as `[python, script]` (exec form: no login shell).
fn echo_agent_command() -> [String; 2] {
    let python = require(
        &agents_dir().join("venv/bin/python"),
        "the ACP Python SDK venv",
    );
    let agent = require(
        &agents_dir().join("python/examples/echo_agent.py"),
        "the ACP Python SDK echo agent",
    );
    [python, agent]
}

// Issue 15: the official Python ACP SDK client drives `e2b acp` itself (initialize with fs and
// terminal on, session/new, prompt; no fs/terminal call reaches it; EOF ends the bridge with 0).
#[test]
fn python_sdk_client_drives_e2b_acp() {
    let python = require(
        &agents_dir().join("venv/bin/python"),
        "the ACP Python SDK venv",
    );
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/acp/python_client_bridge.py");
    let out = Command::new(python)
        .arg(script)
        .args([E2B, "acp", "--"])
        .args(echo_agent_command())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
}

// Issue 15: the official Rust ACP client drives `e2b acp` itself, as a local child process.
#[test]
fn rust_client_drives_e2b_acp() {
    use e2b_acp::agent_client_protocol::schema::ProtocolVersion;
    use e2b_acp::agent_client_protocol::v1::schema::{
        ClientCapabilities, ContentBlock, FileSystemCapabilities, InitializeRequest,
        NewSessionRequest, PromptRequest, StopReason, TextContent,
    };
    use e2b_acp::agent_client_protocol::{Client, on_receive_notification};

    let agent = echo_agent_command();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let texts = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let t2 = texts.clone();
        let client = Client.v1().on_receive_notification(
            async move |n: e2b_acp::agent_client_protocol::v1::schema::SessionNotification, _cx| {
                if let e2b_acp::agent_client_protocol::v1::schema::SessionUpdate::AgentMessageChunk(
                    c,
                ) = n.update
                    && let ContentBlock::Text(t) = c.content
                {
                    t2.lock().unwrap().push_str(&t.text);
                }
                Ok(())
            },
            on_receive_notification!(),
        );
        let [python, script] = &agent;
        let process =
            e2b_acp::LocalProcess::spawn(E2B, ["acp", "--", python.as_str(), script.as_str()])
                .unwrap();
        let a = e2b_acp::AcpAgent::connect(process, client, e2b_acp::AcpOptions::new())
            .await
            .unwrap();
        let cx = a.connection();
        let init = InitializeRequest::new(ProtocolVersion::V1).client_capabilities(
            ClientCapabilities::new()
                .fs(FileSystemCapabilities::new()
                    .read_text_file(true)
                    .write_text_file(true))
                .terminal(true),
        );
        tokio::time::timeout(Duration::from_secs(60), cx.send_request(init).block_task())
            .await
            .unwrap()
            .unwrap();
        let s = tokio::time::timeout(
            Duration::from_secs(60),
            cx.send_request(NewSessionRequest::new("/tmp")).block_task(),
        )
        .await
        .unwrap()
        .unwrap();
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            cx.send_request(PromptRequest::new(
                s.session_id,
                vec![ContentBlock::Text(TextContent::new(
                    "hi from rust via e2b acp",
                ))],
            ))
            .block_task(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            texts.lock().unwrap().contains("hi from rust via e2b acp"),
            "{:?}",
            texts.lock().unwrap()
        );
        // EOF: the bridge stops the echo agent, which exits 0, and so does the bridge
        a.stop(Duration::from_secs(20)).await.unwrap();
        let exit = a.wait().await.unwrap();
        assert!(exit.success(), "{exit:?}");
    });
}
