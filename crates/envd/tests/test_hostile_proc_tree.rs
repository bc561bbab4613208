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
    r.metadata_mut().insert(
        e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
        "3000".parse().unwrap(),
    );
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

/// The host pid of the process whose pid in its own PID namespace is `ns_pid` and whose parent
/// (host pid) is `parent`, from `NSpid:` in `/proc/<pid>/status`.
fn host_pid_of(parent: i32, ns_pid: u32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        };
        let ppid = field("PPid:")?.first()?.parse::<i32>().ok()?;
        let nspid = field("NSpid:")?;
        (ppid == parent && nspid.last()?.parse::<u32>().ok()? == ns_pid).then_some(pid)
    })
}

/// Whether `pid` exists and is not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()? != "Z"))
        .unwrap_or(false)
}

/// Starts `/bin/sleep 1000` through the daemon so that it gets `want` as its pid in the
/// daemon's PID namespace (`ns_last_pid` set from inside it with `nsenter`); retries a few
/// times when one of the daemon's threads takes the number first.
async fn start_sleep_at(
    c: &mut ProcessClient<tonic::transport::Channel>,
    envd_host_pid: i32,
    want: u32,
) -> tonic::Streaming<StartResponse> {
    let sleep = || e2b_envd_proto::process::StartRequest {
        process: Some(e2b_envd_proto::process::ProcessConfig {
            cmd: "/bin/sleep".into(),
            args: vec!["1000".into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    };
    let mut got = Vec::new();
    for _ in 0..10 {
        let ok = std::process::Command::new("nsenter")
            .args([
                "--target",
                &envd_host_pid.to_string(),
                "--pid",
                "--",
                "sh",
                "-c",
            ])
            .arg(format!("echo {} > /proc/sys/kernel/ns_last_pid", want - 1))
            .status()
            .expect("missing: the `nsenter` command (util-linux)")
            .success();
        assert!(ok, "cannot set ns_last_pid in the daemon's PID namespace");
        let mut s = c.start(sleep()).await.unwrap().into_inner();
        let pid = start_pid(&mut s).await;
        if pid == want {
            return s;
        }
        got.push(pid);
        c.send_signal(SendSignalRequest {
            process: sel(pid),
            signal: Signal::Sigkill as i32,
        })
        .await
        .unwrap();
        collect(s, |m| m.event).await;
    }
    panic!("could not start a command as pid {want} in the daemon's namespace (got {got:?})");
}

/// A daemon started in a PID namespace of its own that still sees the host's `/proc`
/// (`unshare --pid --fork` without `--mount-proc`) and has no cgroup must not walk `/proc` to
/// find a command's descendants: the pids there are the host's, and the same numbers name
/// other processes in its namespace. The test makes the numbers meet: on the host, a shell
/// (pid P) with a child `sleep` (pid H); in the daemon's namespace, command A as pid P and
/// command B as pid H. A walk for A's descendants finds the host's H, and signalling H from
/// the namespace would kill B. Kills, a timeout and the shutdown must leave B (until the
/// shutdown) and the host's processes alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_in_a_foreign_pid_namespace_signals_only_its_own_commands() {
    use tokio::io::AsyncBufReadExt as _;
    assert!(
        nix::unistd::geteuid().is_root(),
        "missing: root (this test runs the daemon under `unshare --pid --mount`)"
    );
    // The host's pair: a shell P and its child sleep H.
    let mut host_sh = std::process::Command::new("sh")
        .args(["-c", "sleep 1000 & wait"])
        .spawn()
        .expect("missing: `sh`");
    let host_p = host_sh.id() as i32;
    let mut host_h = None;
    for _ in 0..200 {
        host_h = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: i32 = st
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == host_p).then_some(pid)
        });
        if host_h.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let host_h = host_h.expect("the host shell started no sleep");

    let tmp = tempfile::tempdir().unwrap();
    // The mount namespace first (from a shell in the host's PID namespace, so its commands
    // take no pid in the new one), then the PID namespace: the daemon is its pid 1.
    let mut daemon = tokio::process::Command::new("unshare")
        .args(["--mount", "sh", "-c"])
        .arg(
            "umount -l -a -t cgroup2 2>/dev/null; \
             if grep -q ' - cgroup2 ' /proc/self/mountinfo; then echo 'cgroup2 still mounted' >&2; exit 3; fi; \
             exec unshare --pid --fork --kill-child \"$0\" --port 0 --default-workdir \"$1\"",
        )
        .arg(env!("CARGO_BIN_EXE_e2b-envd"))
        .arg(tmp.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("missing: the `unshare` command (util-linux)");
    // `unshare --mount` execs `sh`, which execs `unshare --pid --fork`: the daemon's parent.
    let unshare_pid = daemon.id().unwrap() as i32;
    let mut lines = tokio::io::BufReader::new(daemon.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the daemon printed no URL")
        .unwrap()
        .expect("the daemon under unshare exited (see its stderr)");
    let envd_pid = host_pid_of(unshare_pid, 1).expect("the daemon is not pid 1 of its namespace");
    let ch = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = ProcessClient::new(ch);
    // Warm up: the blocking-pool threads a start needs exist from now on (a thread created
    // later would take the pid asked for).
    for _ in 0..3 {
        let s = c
            .start(e2b_envd_proto::process::StartRequest {
                process: Some(e2b_envd_proto::process::ProcessConfig {
                    cmd: "/bin/true".into(),
                    ..Default::default()
                }),
                stdin: Some(false),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(collect(s, |m| m.event).await.end.is_some());
    }

    let second = start_sleep_at(&mut c, envd_pid, host_h as u32).await;
    let first = start_sleep_at(&mut c, envd_pid, host_p as u32).await;
    let second_host = host_pid_of(envd_pid, host_h as u32).expect("the second command's host pid");
    assert!(
        !std::fs::read_to_string(format!("/proc/{second_host}/cgroup"))
            .unwrap_or_default()
            .contains("e2b-envd-"),
        "the daemon put its commands in cgroups: this test needs it without (umount failed?)"
    );

    // Kill the first command; its end event comes after every signal was sent.
    c.send_signal(SendSignalRequest {
        process: sel(host_p as u32),
        signal: Signal::Sigkill as i32,
    })
    .await
    .unwrap();
    let got = collect(first, |m| m.event).await;
    assert!(got.end.is_some(), "the killed command did not end");
    assert!(
        running(second_host),
        "killing command {host_p} also killed command {host_h}: the daemon walked the host's /proc and signalled a host pid's number in its own namespace"
    );

    // A command killed by its timeout.
    let mut r = tonic::Request::new(e2b_envd_proto::process::StartRequest {
        process: Some(e2b_envd_proto::process::ProcessConfig {
            cmd: "/bin/sleep".into(),
            args: vec!["1000".into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    });
    r.metadata_mut().insert(
        e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS,
        "300".parse().unwrap(),
    );
    let timed = c.start(r).await.unwrap().into_inner();
    let got = collect(timed, |m| m.event).await;
    assert_eq!(
        got.error.as_ref().map(|e| e.code()),
        Some(tonic::Code::DeadlineExceeded),
        "{got:?}"
    );
    assert!(
        running(second_host),
        "the timeout of another command killed command {host_h}"
    );

    // Shutdown (SIGTERM to the daemon): its commands die, the host's processes live.
    drop(second);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(envd_pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), daemon.wait())
        .await
        .expect("the daemon did not stop on SIGTERM")
        .unwrap();
    assert!(
        status.success(),
        "the daemon under unshare exited with {status}"
    );
    assert_dies(second_host, "the daemon's command, after its shutdown").await;
    let host_alive = running(host_h) && host_sh.try_wait().unwrap().is_none();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host_h),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = host_sh.kill();
    let _ = host_sh.wait();
    assert!(
        host_alive,
        "a host process was killed by the namespaced daemon"
    );
}
