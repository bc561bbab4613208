//! `e2b run` against the embedded local sandbox: live output, exit codes, env, cwd, timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How long a test waits for a run that must end before it fails as hung (not a speed check).
const HANG_GUARD: Duration = Duration::from_secs(60);

fn e2b(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn run_streams_output_and_exits_with_the_command_code() {
    let out = e2b(&["run", "--", "echo out; echo err >&2; exit 42"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    assert_eq!(out.status.code(), Some(42));
}

#[test]
fn run_exec_form_passes_arguments_verbatim() {
    let out = e2b(&["run", "--", "printf", "%s|", "a b", "$HOME"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|$HOME|");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn run_env_and_cwd() {
    let out = e2b(&[
        "run",
        "--env",
        "GREETING=hi there",
        "--cwd",
        "/tmp",
        "--",
        "echo \"$GREETING\"; pwd",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi there\n/tmp\n");
    assert!(out.status.success());
}

#[test]
fn run_signal_is_128_plus_n() {
    let out = e2b(&["run", "--", "kill -TERM $$"]);
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_timeout_kills_and_exits_124() {
    // The command would sleep an hour: only `--timeout` can end the run before the guard.
    let child = Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(["run", "--timeout", "1", "--", "sleep 3600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(HANG_GUARD) else {
        // SAFETY: kill(2) on the e2b process this test started; it has not been reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        panic!("`e2b run --timeout 1` was still running after {HANG_GUARD:?}");
    };
    let out = out.unwrap();
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("timeout"));
}

#[test]
fn run_bad_cwd_is_a_clear_error() {
    let out = e2b(&["run", "--cwd", "/definitely/not/here", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/definitely/not/here"), "{err}");
}

/// A host directory with a marker file, removed on drop.
struct HostDir(std::path::PathBuf);

impl HostDir {
    fn new(name: &str) -> Self {
        let p = std::path::PathBuf::from(format!("/var/tmp/e2b-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("marker"), "host-secret").unwrap();
        Self(p)
    }

    fn marker(&self) -> String {
        self.0.join("marker").display().to_string()
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// Issue 13: the local sandbox of `e2b run` is isolated by default: `user`, its own hostname and
// processes, and the host's files are not there.
#[test]
fn run_is_isolated_by_default() {
    let dir = HostDir::new("default");
    let script = format!(
        "id -un; cat {} 2>/dev/null || echo hidden; test \"$(ls /proc | grep -c '^[0-9]')\" -lt 20 && echo few-pids",
        dir.marker()
    );
    let out = e2b(&["run", "--", &script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "user\nhidden\nfew-pids\n",
        "{err}"
    );
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("--isolation none"), "{err}");
}

// `--isolation none` turns it off explicitly and says so on stderr.
#[test]
fn isolation_none_says_so_and_runs_on_this_machine() {
    let dir = HostDir::new("none");
    let out = e2b(&[
        "run",
        "--isolation",
        "none",
        "--",
        &format!("cat {}", dir.marker()),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "host-secret");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--isolation none") && err.contains("not isolated"),
        "{err}"
    );
    assert!(out.status.success(), "{err}");
}

// `--mount-ro` shows a host directory read-only (writes fail even with sudo), at its own path
// or elsewhere.
#[test]
fn mount_ro_shows_a_host_directory_read_only() {
    let dir = HostDir::new("ro");
    let d = dir.0.display().to_string();
    let script = format!(
        "cat {d}/marker; echo; cat /opt/shown/marker; echo; \
         sudo -n sh -c 'echo x > {d}/marker' 2>/dev/null && echo wrote || echo refused"
    );
    let out = e2b(&[
        "run",
        "--mount-ro",
        &d,
        "--mount-ro",
        &format!("{d}:/opt/shown"),
        "--",
        &script,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "host-secret\nhost-secret\nrefused\n",
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.marker()).unwrap(),
        "host-secret"
    );
}

// Where isolation cannot work (here: not root), `e2b run` fails naming what is missing and
// `--isolation none`; it never falls back to running the command on the host.
#[test]
fn unprivileged_run_is_isolated_with_one_account() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = HostDir::new("noroot-ok");
    // Writable for the unprivileged user: a command run on the host would leave a file.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let flag = dir.0.join("ran");
    let out = as_nobody(&[])
        .args(["run", "--network", "none", "--"])
        .arg(format!(
            "id -un; if touch {} 2>/dev/null; then echo touched-the-host; fi",
            flag.display()
        ))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(stdout.trim(), "user", "stderr: {stderr}");
    assert!(!flag.exists(), "the command reached the host's filesystem");
}

#[test]
fn isolation_unavailable_fails_naming_the_flag() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = HostDir::new("noroot");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let flag = dir.0.join("ran");
    // `--network internet` (the default) as a non-root user needs /dev/net/tun: in a mount
    // namespace of its own the test makes it mode 0600, whatever the host's is.
    let node = dir.0.join("tun");
    let wrap = [
        "unshare".to_string(),
        "-m".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        format!(
            "mknod -m 0600 {n} c 10 200 && mount --bind {n} /dev/net/tun && exec \"$@\"",
            n = node.display()
        ),
        "sh".into(),
    ];
    let out = as_nobody(&wrap)
        .args(["run", "--", &format!("touch {}", flag.display())])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/net/tun") && err.contains("--isolation none"),
        "the error names neither the missing feature nor the flag: {err}"
    );
    assert!(!flag.exists(), "the command ran without isolation");
}

/// `e2b` run as `nobody` (through util-linux `setpriv`), after `wrap`.
fn as_nobody(wrap: &[String]) -> Command {
    let mut cmd = e2b_test_support::as_nobody(wrap, env!("CARGO_BIN_EXE_e2b"));
    cmd.env("HOME", "/tmp");
    cmd
}

// `e2b exec-server` without --sandbox runs its tools in an isolated local sandbox by default.
#[test]
fn exec_server_runs_tools_in_an_isolated_sandbox_by_default() {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::process::Stdio;
    let dir = HostDir::new("mcp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(["exec-server", "--stdio"])
        .env_remove("E2B_SANDBOX_URL")
        .env_remove("E2B_ISOLATION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let cmd = format!("id -un; cat {} 2>/dev/null || echo hidden", dir.marker());
    for msg in [
        serde_json::json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
        serde_json::json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        serde_json::json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"exec_command","arguments":{"cmd": cmd}}}),
    ] {
        writeln!(stdin, "{msg}").unwrap();
    }
    stdin.flush().unwrap();
    let result = loop {
        let msg = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("tools/call answered within 60 s");
        if msg["id"] == 2 {
            break msg["result"].clone();
        }
    };
    drop(stdin);
    let _ = child.wait();
    assert_eq!(
        result["content"][0]["text"].as_str().map(str::trim_end),
        Some("user\nhidden"),
        "{result}"
    );
    let id = result["_meta"]["sandbox_id"].as_str().unwrap_or_default();
    assert!(id.starts_with("local-isolated-"), "{result}");
}
