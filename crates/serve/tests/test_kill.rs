//! Killing a sandbox, stopping `e2b serve` (SIGTERM) and crashing it (SIGKILL) leave no
//! process behind, detached grandchildren included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use e2b_commands::Transport;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leaves_no_process() {
    let env = start().await;
    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    let marker = format!("killmarker{id}");
    spawn_marked(&env.commands(&sbx, Transport::GrpcWeb), &marker).await;
    let (status, _) = env.delete(&format!("/sandboxes/{id}")).await;
    assert_eq!(status, 204);
    assert!(
        eventually(Duration::from_secs(10), || pids_with(&marker).is_empty()).await,
        "survivors: {:?}",
        pids_with(&marker)
    );
    env.serve.shutdown().await;
}

/// Runs the real `e2b-serve` binary; returns the child, the API URL and the edge URL.
fn serve_process(
    state_dir: &std::path::Path,
    isolation: &str,
) -> (std::process::Child, String, String) {
    let mut child = Command::new(BIN)
        .args([
            "--isolation",
            isolation,
            "--api-port",
            "0",
            "--edge-port",
            "0",
            "--api-key",
            KEY,
            "--state-dir",
        ])
        .arg(state_dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let (mut api, mut edge) = (String::new(), String::new());
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(v) = line.strip_prefix("export E2B_API_URL=") {
            api = v.to_string();
        }
        if let Some(v) = line.strip_prefix("export E2B_SANDBOX_URL=") {
            edge = v.to_string();
        }
        if line.starts_with("export E2B_API_KEY=") {
            break;
        }
    }
    assert!(
        !api.is_empty() && !edge.is_empty(),
        "e2b-serve printed no URLs"
    );
    (child, api, edge)
}

async fn stop_leaves_nothing(signal: nix::sys::signal::Signal, isolation: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, api, edge) = serve_process(dir.path(), isolation);
    let http = reqwest::Client::new();
    let sbx: serde_json::Value = http
        .post(format!("{api}/sandboxes"))
        .header("X-API-Key", KEY)
        .json(&json!({"templateID": "base", "secure": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = id(&sbx);
    let marker = format!("crashmarker{id}");
    spawn_marked(&commands_at(&edge, &sbx, Transport::GrpcWeb), &marker).await;
    // The plain runtime's envd names its directory, the isolated one its sandbox id.
    let envd_marker = if isolation == "plain" {
        dir.path().to_string_lossy().to_string()
    } else {
        format!("--sandbox-id {id}")
    };
    assert!(!pids_with(&envd_marker).is_empty(), "no envd process found");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let _ = child.wait();
    assert!(
        eventually(Duration::from_secs(10), || pids_with(&marker).is_empty()).await,
        "after {signal}: sandbox processes survived: {:?}",
        pids_with(&marker)
    );
    assert!(
        eventually(Duration::from_secs(10), || pids_with(&envd_marker)
            .is_empty())
        .await,
        "after {signal}: envd or its shim survived: {:?}",
        pids_with(&envd_marker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_serve_leaves_no_process() {
    stop_leaves_nothing(nix::sys::signal::Signal::SIGKILL, "plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_serve_leaves_no_isolated_process() {
    if let Err(e) = e2b_serve::isolation_available() {
        panic!(
            "missing: sandbox isolation on this machine ({e}); this test needs root and user namespaces"
        );
    }
    stop_leaves_nothing(nix::sys::signal::Signal::SIGKILL, "isolated").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_serve_leaves_no_process() {
    stop_leaves_nothing(nix::sys::signal::Signal::SIGTERM, "plain").await;
}

/// `(pid, state)` of every child of `parent`, from `/proc/<pid>/stat`.
fn children(parent: i32) -> Vec<(i32, char)> {
    let state_and_parent = |pid: i32| -> Option<(char, i32)> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let mut f = s.rsplit_once(')')?.1.split_whitespace();
        Some((f.next()?.chars().next()?, f.next()?.parse().ok()?))
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| match state_and_parent(pid)? {
            (state, p) if p == parent => Some((pid, state)),
            _ => None,
        })
        .collect()
}

/// With a PID namespace (root here), a plain sandbox is one process: envd as PID 1 of the
/// namespace (no shim, no init, no sentinel), and envd reaps the sandbox's orphans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envd_is_pid_1_and_reaps_the_sandboxs_orphans() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("missing: root (a plain sandbox gets its own PID namespace only as root)");
    }
    let env = start().await;
    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    let envd = pids_with(&format!("/{id}/home"));
    assert_eq!(
        envd.len(),
        1,
        "a sandbox should be its envd alone: {envd:?}"
    );
    let envd = envd[0];
    let status = std::fs::read_to_string(format!("/proc/{envd}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(
        nspid.trim_end().ends_with("\t1"),
        "envd is not PID 1 of its namespace: {nspid}"
    );

    // Orphans: detached short-lived processes, re-parented to envd when their parents exit.
    let cmds = env.commands(&sbx, Transport::GrpcWeb);
    cmds.run(
        "for i in 1 2 3 4 5; do ( sleep 5 </dev/null >/dev/null 2>&1 & ); done; true",
        e2b_commands::CommandOptions::new(),
    )
    .await
    .unwrap();
    assert!(
        children(envd).len() >= 5,
        "the orphans were not re-parented to envd"
    );
    assert!(
        eventually(Duration::from_secs(15), || children(envd).is_empty()).await,
        "envd left orphans unreaped: {:?}",
        children(envd)
    );
    // A command cannot kill or freeze envd from inside, even as root: as the namespace's init
    // it gets no SIGKILL or SIGSTOP from its own namespace (pid 1 there).
    let out = cmds
        .run(
            "id -u; kill -KILL 1; kill -STOP 1; echo tried",
            e2b_commands::CommandOptions::new().user("root"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "0\ntried\n", "{}", out.stderr);
    assert_eq!(proc_state(envd).map(|s| s != 'T' && s != 'Z'), Some(true));
    // envd still serves.
    let out = cmds
        .run("echo still", e2b_commands::CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "still\n");
    env.serve.shutdown().await;
}

/// The cgroup v2 directory holding `pid`'s own cgroup (where envd puts its commands' base
/// cgroup), from the mount table and `/proc/<pid>/cgroup`.
fn cgroup_dir_of(pid: i32) -> std::path::PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            (right.starts_with("cgroup2 ") && f.get(3) == Some(&"/")).then(|| f[4].to_owned())
        })
        .expect("missing: a cgroup v2 hierarchy (envd tracks commands in cgroups there)");
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    std::path::Path::new(&mount).join(own.trim_start_matches('/'))
}

/// Killing a sandbox leaves no cgroup behind: its envd named its commands' base cgroup after
/// its pid on the host (not 1, its pid in its own namespace), so the next envd to start sees
/// the owner is gone and removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sandboxs_cgroup_is_removed() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("missing: root (envd creates cgroups for commands only where it may)");
    }
    let env = start().await;
    let first = env.create(json!({})).await;
    let first_id = id(&first);
    env.commands(&first, Transport::GrpcWeb)
        .run("true", e2b_commands::CommandOptions::new())
        .await
        .unwrap();
    let envd = pids_with(&format!("/{first_id}/home"));
    assert_eq!(envd.len(), 1, "{envd:?}");
    let parent = cgroup_dir_of(envd[0]);
    let prefix = format!("e2b-envd-{}-", envd[0]);
    let bases: Vec<std::path::PathBuf> = std::fs::read_dir(&parent)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert_eq!(
        bases.len(),
        1,
        "envd {} should name its base cgroup in {} after its host pid: {bases:?}",
        envd[0],
        parent.display()
    );
    let (status, _) = env.delete(&format!("/sandboxes/{first_id}")).await;
    assert_eq!(status, 204);
    assert!(
        eventually(Duration::from_secs(10), || !std::path::Path::new(&format!(
            "/proc/{}",
            envd[0]
        ))
        .exists())
        .await,
        "the killed sandbox's envd is gone"
    );
    let second = env.create(json!({})).await;
    env.commands(&second, Transport::GrpcWeb)
        .run("true", e2b_commands::CommandOptions::new())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !bases[0].exists()).await,
        "the killed sandbox's cgroup {} is still there",
        bases[0].display()
    );
    env.serve.shutdown().await;
}

/// The cgroups of sandbox `id` (an isolated sandbox's `e2b-<id>-…`, in every hierarchy).
fn sandbox_cgroups(id: &str) -> Vec<std::path::PathBuf> {
    let prefix = format!("e2b-{id}-");
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
    // The hierarchies' roots and one level below (v1 mounts one per controller).
    for _ in 0..2 {
        let mut next = Vec::new();
        for dir in dirs {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    found.push(e.path());
                } else {
                    next.push(e.path());
                }
            }
        }
        dirs = next;
    }
    found
}

/// Killing an isolated sandbox (its supervisor, envd and everything it ran get SIGKILL) leaves
/// no cgroup behind: the sandbox's cgroups carry its supervisor's pid, and the next sandbox
/// to start removes those whose supervisor is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_isolated_sandboxs_cgroups_are_removed() {
    let env = start_isolated().await;
    let first = env.create(json!({})).await;
    let first_id = id(&first);
    let cgroups = sandbox_cgroups(&first_id);
    assert!(
        !cgroups.is_empty(),
        "missing: the isolated sandbox's cgroups (needs a writable cgroup hierarchy, as root)"
    );
    let (status, _) = env.delete(&format!("/sandboxes/{first_id}")).await;
    assert_eq!(status, 204);
    // Each new sandbox sweeps: a few, in case the first's processes were still exiting when
    // the next one started.
    let mut swept = false;
    for _ in 0..5 {
        let next = env.create(json!({})).await;
        let (status, _) = env.delete(&format!("/sandboxes/{}", id(&next))).await;
        assert_eq!(status, 204);
        if sandbox_cgroups(&first_id).is_empty() {
            swept = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        swept,
        "the killed sandbox's cgroups are still there: {:?}",
        sandbox_cgroups(&first_id)
    );
    env.serve.shutdown().await;
}

/// Killing a sandbox stops its processes before it kills any: killed one by one while running,
/// a process could act on another's death first (here each `cat` reads EOF the moment the
/// `sleep` writing its pipe dies, and its subshell then writes a file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_acts_on_another_s_death_during_the_kill() {
    use std::os::unix::fs::PermissionsExt as _;
    const PIPES: usize = 24;
    let env = start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let count = |what: &str| {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(what))
            })
            .count()
    };
    for round in 0..6 {
        let sbx = env.create(json!({})).await;
        let d = dir.path().display();
        env.commands(&sbx, Transport::GrpcWeb)
            .start(
                format!(
                    "for i in $(seq {PIPES}); do (sleep 100 | (echo > {d}/r{round}started$i; cat; \
                     echo > {d}/r{round}acted$i)) & done; wait"
                ),
                e2b_commands::CommandOptions::new().no_timeout(),
            )
            .await
            .unwrap();
        let started = format!("r{round}started");
        assert!(
            eventually(Duration::from_secs(10), || count(&started) == PIPES).await,
            "round {round}: only {} of {PIPES} pipelines started",
            count(&started)
        );
        // Each `cat` is blocked on its pipe by now.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, _) = env.delete(&format!("/sandboxes/{}", id(&sbx))).await;
        assert_eq!(status, 204);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let acted = count(&format!("r{round}acted"));
        assert_eq!(
            acted, 0,
            "round {round}: {acted} subshells ran on during the kill"
        );
    }
    env.serve.shutdown().await;
}
