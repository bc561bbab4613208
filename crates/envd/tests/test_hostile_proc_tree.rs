//! No survivors without isolation (issue 12): a command's `setsid` + double-forked descendant
//! dies with a kill, with the timeout, with the daemon's shutdown, and when the daemon binary
//! is SIGKILLed. Without a PID namespace this needs a writable cgroup v2 hierarchy (root, as
//! in CI); the failure messages say so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use e2b_envd_proto::process::process_client::ProcessClient;
use e2b_envd_proto::process::process_event::{Event, data_event::Output};
use e2b_envd_proto::process::process_selector::Selector;
use e2b_envd_proto::process::{ProcessSelector, SendSignalRequest, Signal, StartResponse};

const NEEDS: &str = "without a PID namespace, catching a setsid + double-forked child needs a \
                     writable cgroup v2 hierarchy (run as root with /sys/fs/cgroup cgroup2 mounted)";

/// A shell line that leaves a `setsid` + double-forked `sleep` behind (its pid in `pidfile`),
/// prints `ready`, then runs `tail`.
fn survivor_cmd(pidfile: &Path, tail: &str) -> String {
    let pf = pidfile.display();
    format!(
        "( setsid sh -c 'echo $$ > {pf}; exec sleep 1000' </dev/null >/dev/null 2>&1 & ); \
         while [ ! -s {pf} ]; do sleep 0.02; done; echo ready; {tail}"
    )
}

async fn wait_ready(s: &mut tonic::Streaming<StartResponse>) {
    let mut seen = Vec::new();
    while !seen.ends_with(b"ready\n") {
        let m = tokio::time::timeout(Duration::from_secs(30), s.message())
            .await
            .expect("no output")
            .unwrap()
            .expect("stream ended before ready");
        if let Some(Event::Data(d)) = m.event.and_then(|e| e.event)
            && let Some(Output::Stdout(b)) = d.output
        {
            seen.extend_from_slice(&b);
        }
    }
}

fn read_pid(pidfile: &Path) -> i32 {
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn assert_dies(pid: i32, what: &str) {
    for _ in 0..200 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    // Do not leave it behind for the next test.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    panic!("{what}: pid {pid} (cgroups {cgroup:?}) survived; {NEEDS}");
}

fn sel(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector {
        selector: Some(Selector::Pid(pid)),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_double_fork_dies_on_kill() {
    let envd = spawn_envd().await;
    let tmp = tempfile::tempdir().unwrap();
    let pf = tmp.path().join("pid");
    let mut c = h2c(&envd).await;
    let mut s = start_bash(&mut c, &envd, &survivor_cmd(&pf, "sleep 1000")).await;
    let pid = start_pid(&mut s).await;
    wait_ready(&mut s).await;
    let survivor = read_pid(&pf);
    assert!(alive(survivor));
    c.send_signal(req(
        &envd,
        SendSignalRequest {
            process: sel(pid),
            signal: Signal::Sigkill as i32,
        },
    ))
    .await
    .unwrap();
    let got = collect(s, |m| m.event).await;
    assert_eq!(got.end.expect("end").status, "signal: killed");
    assert_dies(survivor, "after SendSignal SIGKILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_double_fork_dies_on_timeout() {
    let envd = spawn_envd().await;
    let tmp = tempfile::tempdir().unwrap();
    let pf = tmp.path().join("pid");
    let mut c = h2c(&envd).await;
    let mut r = req(&envd, bash(&survivor_cmd(&pf, "sleep 1000")));
    r.metadata_mut()
        .insert("connect-timeout-ms", "3000".parse().unwrap());
    let mut s = c.start(r).await.unwrap().into_inner();
    start_pid(&mut s).await;
    wait_ready(&mut s).await;
    let survivor = read_pid(&pf);
    let got = collect(s, |m| m.event).await;
    assert_eq!(
        got.error.as_ref().map(|e| e.code()),
        Some(tonic::Code::DeadlineExceeded),
        "{got:?}"
    );
    assert_dies(survivor, "after the command's timeout").await;
}

/// A command that exits normally leaves its `setsid` child running (as envd does), but the
/// daemon's shutdown takes it along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_double_fork_dies_on_shutdown() {
    let envd = spawn_envd().await;
    let tmp = tempfile::tempdir().unwrap();
    let pf = tmp.path().join("pid");
    let mut c = h2c(&envd).await;
    let s = start_bash(&mut c, &envd, &survivor_cmd(&pf, "exit 0")).await;
    let got = collect(s, |m| m.event).await;
    assert_eq!(got.end.expect("end").exit_code, 0);
    let survivor = read_pid(&pf);
    assert!(
        alive(survivor),
        "a normal exit leaves background work running"
    );
    envd.shutdown().await;
    assert_dies(survivor, "after the daemon's shutdown").await;
}

/// Starts `target/debug/e2b-envd --port 0` and connects to it.
async fn spawn_binary(
    workdir: &Path,
) -> (
    tokio::process::Child,
    ProcessClient<tonic::transport::Channel>,
) {
    use tokio::io::AsyncBufReadExt as _;
    let bin = env!("CARGO_BIN_EXE_e2b-envd");
    let mut daemon = tokio::process::Command::new(bin)
        .args(["--port", "0", "--default-workdir"])
        .arg(workdir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start target/debug/e2b-envd");
    let mut lines = tokio::io::BufReader::new(daemon.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the daemon printed no URL")
        .unwrap()
        .expect("the daemon exited");
    let ch = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    (daemon, ProcessClient::new(ch))
}

/// The binary is a child subreaper: orphans of its commands are re-parented to it and reaped,
/// not left as zombies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_binary_reaps_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut daemon, mut c) = spawn_binary(tmp.path()).await;
    let dpid = daemon.id().unwrap() as i32;
    let s = c
        .start(tonic::Request::new(bash(
            "for i in 1 2 3 4 5; do ( sleep 1 </dev/null >/dev/null 2>&1 & ); done; echo ok",
        )))
        .await
        .unwrap()
        .into_inner();
    let got = collect(s, |m| m.event).await;
    assert_eq!(got.stdout, b"ok\n");
    let children = |state: Option<char>| -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    return false;
                };
                let f: Vec<&str> = st.rsplit_once(')').unwrap().1.split_whitespace().collect();
                f[1] == dpid.to_string() && state.is_none_or(|s| f[0].starts_with(s))
            })
            .collect()
    };
    // The orphans were re-parented to the daemon (not init): five sleeps (and the sentinel).
    let kids = children(None);
    assert!(
        kids.len() >= 5,
        "orphans not re-parented to the daemon: {kids:?}"
    );
    // ... and once they exit, none is left a zombie.
    let mut zombies = Vec::new();
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        zombies = children(Some('Z'));
        if zombies.is_empty() && children(None).len() <= 1 {
            break;
        }
    }
    assert!(
        zombies.is_empty(),
        "unreaped orphans of the daemon: {zombies:?}"
    );
    daemon.start_kill().unwrap();
    daemon.wait().await.unwrap();
}

/// SIGKILL of the daemon binary: `PR_SET_PDEATHSIG` takes the command along, the sentinel
/// takes its `setsid` descendant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_dies_when_the_daemon_binary_is_sigkilled() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut daemon, mut c) = spawn_binary(tmp.path()).await;
    let pf = tmp.path().join("pid");
    let mut s = c
        .start(tonic::Request::new(bash(&survivor_cmd(&pf, "sleep 1000"))))
        .await
        .unwrap()
        .into_inner();
    let cmd_pid = start_pid(&mut s).await as i32;
    wait_ready(&mut s).await;
    let survivor = read_pid(&pf);
    assert!(alive(cmd_pid) && alive(survivor));
    daemon.start_kill().unwrap();
    daemon.wait().await.unwrap();
    assert_dies(
        cmd_pid,
        "the command, after SIGKILL of the daemon (PR_SET_PDEATHSIG)",
    )
    .await;
    assert_dies(survivor, "the setsid child, after SIGKILL of the daemon").await;
}
