#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `Sandbox::local()` (isolated by default, as `Sandbox::local_isolated()` and
//! `LocalOptions::isolated()`): the daemon runs as `e2b-envd --isolate` (found through
//! `E2B_ENVD_BIN`, next to the test binary, or on `PATH`; build it with
//! `cargo build -p e2b-envd`). Needs root and user namespaces; fails saying what is missing.

use e2b::{CommandOptions, LocalOptions, Sandbox};

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test]
async fn local_isolated_runs_commands_inside_a_sandbox() {
    let marker = std::path::PathBuf::from(format!("/var/tmp/e2b-local-iso-{}", std::process::id()));
    std::fs::write(&marker, "host-secret").unwrap();
    let sb = Sandbox::local_with_options(
        LocalOptions::isolated().mount_ro(format!("{}:/opt/shown", marker.display())),
    )
    .await
    .unwrap_or_else(|e| panic!("the isolated local sandbox did not start: {e}"));
    assert!(sb.is_local());
    let script = format!(
        "id -un; cat {} 2>/dev/null || echo hidden; cat /opt/shown; echo; (exec -a {} sleep 1000) >/dev/null 2>&1 &",
        marker.display(),
        tag()
    );
    let out = sb
        .commands()
        .run(script, CommandOptions::new())
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        &lines[..3],
        ["user", "hidden", "host-secret"],
        "{}",
        out.stdout
    );
    // The file API works inside too (the sandbox's own /home/user).
    sb.files()
        .write("/home/user/note.txt", "inside")
        .await
        .unwrap();
    assert_eq!(
        sb.files().read_text("/home/user/note.txt").await.unwrap(),
        "inside"
    );
    assert!(
        !std::path::Path::new("/home/user/note.txt").exists() || {
            // A host that happens to have the path must not have our content.
            std::fs::read_to_string("/home/user/note.txt").unwrap_or_default() != "inside"
        }
    );
    // The sandbox's processes are found on the host by the sleep's marker: none after kill.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tagged() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(tagged() > 0, "the background sleep is not running");
    sb.kill().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tagged() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(tagged(), 0, "kill left the sandbox's processes running");
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test]
async fn local_is_isolated_by_default_with_its_own_network() {
    let marker =
        std::path::PathBuf::from(format!("/root/e2b-local-default-{}", std::process::id()));
    std::fs::write(&marker, "host-secret").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = Sandbox::local()
        .await
        .unwrap_or_else(|e| panic!("Sandbox::local() (isolated by default) did not start: {e}"));
    assert!(sb.is_local() && !sb.is_embedded());
    assert!(sb.id().starts_with("local-isolated-"), "{}", sb.id());
    assert!(
        sb.workdir().is_none(),
        "an isolated sandbox has no host workdir"
    );
    let script = format!(
        "hostname; cat {} 2>/dev/null || echo hidden; \
         (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo unreachable; \
         ls /sys/class/net | sort | tr '\\n' ' '",
        marker.display()
    );
    let out = sb
        .commands()
        .run(script, CommandOptions::new())
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[1..3], ["hidden", "unreachable"], "{}", out.stdout);
    // The default network is `internet`: its own namespace with a NAT helper's interface
    // besides loopback (not the host's interfaces, not loopback only).
    let ifaces: Vec<&str> = lines[3].split_whitespace().collect();
    assert!(
        ifaces.contains(&"lo") && ifaces.len() >= 2,
        "{}",
        out.stdout
    );
    sb.kill().await.unwrap();
    drop(listener);
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test]
async fn a_missing_daemon_binary_is_named_and_never_falls_back() {
    let err =
        Sandbox::local_with_options(LocalOptions::default().envd_bin("/nonexistent/e2b-envd"))
            .await
            .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, e2b::SandboxError::Isolated(_)), "{msg}");
    assert!(
        msg.contains("/nonexistent/e2b-envd") && msg.contains("local_unisolated"),
        "{msg}"
    );
}

fn tag() -> String {
    format!("e2b-local-iso-sleep-{}", std::process::id())
}

/// Host processes named [`tag`].
fn tagged() -> usize {
    let tag = tag();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            alive(*pid)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| c.starts_with(tag.as_bytes()))
                    .unwrap_or(false)
        })
        .count()
}
