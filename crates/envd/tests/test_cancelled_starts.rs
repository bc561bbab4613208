//! Starts that do not complete leave nothing behind: a Start cancelled by its client while it
//! waited for the spawner (the soak's clients give up after 60 s under overload) starts no
//! process that nothing tracks, and a Start that fails leaves no cgroup. The daemon runs in
//! this test process, so its commands are this process's children; each test is alone in its
//! process under nextest, which keeps those counts its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use e2b_envd_proto::process::{ListRequest, ProcessConfig, StartRequest};

/// Running (not zombie) children of this process whose command name is `comm`.
fn children_named(comm: &str) -> HashSet<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            (name == comm && f.first() != Some(&"Z") && f.get(1) == Some(&me.as_str()))
                .then_some(pid)
        })
        .collect()
}

/// The per-command cgroups (`c<n>`) of every daemon this process runs, when commands get
/// cgroups here (cgroup v2 writable); `None` otherwise.
fn command_cgroups() -> Option<usize> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        (right.starts_with("cgroup2 ") && f.get(3) == Some(&"/")).then(|| PathBuf::from(f[4]))
    })?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(own.trim_start_matches('/'));
    let prefix = format!("e2b-envd-{}-", std::process::id());
    let bases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    if bases.is_empty() {
        return None;
    }
    Some(
        bases
            .iter()
            .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .count(),
    )
}

fn sleep_request(secs: &str) -> StartRequest {
    StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/sleep".into(),
            args: vec![secs.into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    }
}

/// Hundreds of Starts at once queue on the spawner thread; most of their clients give up
/// within 0–39 ms. Every `sleep` that runs afterwards must be one the daemon lists (the
/// client of a listed one kept its stream or saw its start), and every command cgroup must
/// belong to one of them. Before the fix, a Start cancelled while queued still forked its
/// command, which then ran unlisted, in an orphaned cgroup, until the daemon exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_cancelled_in_the_spawn_queue_leave_no_untracked_process() {
    let envd = spawn_envd().await;
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(h2c(&envd).await);
    }
    // Warm up (the spawner thread, the connections).
    let mut warm = channels[0].clone();
    collect(start_bash(&mut warm, &envd, "true").await, |m| m.event).await;

    let n = 240;
    let mut calls = Vec::new();
    for i in 0..n {
        let mut c = channels[i % channels.len()].clone();
        let r = req(&envd, sleep_request("300"));
        let patience = Duration::from_millis((i % 40) as u64);
        calls.push(tokio::spawn(async move {
            // A stream that arrives in time is kept, so its process stays tracked and live.
            tokio::time::timeout(patience, c.start(r))
                .await
                .ok()
                .and_then(|r| r.ok())
                .map(|r| r.into_inner())
        }));
    }
    let mut kept = Vec::new();
    for c in calls {
        if let Some(s) = c.await.unwrap() {
            kept.push(s);
        }
    }
    // Let the spawner's queue drain: every job has run (or been skipped) once a Start sent
    // now has gone through it. On a fresh connection: the server may close one whose client
    // reset many streams before they were accepted (h2's rapid-reset guard), which is not what
    // this test is about.
    let mut probe = h2c(&envd).await;
    collect(start_bash(&mut probe, &envd, "true").await, |m| m.event).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let listed: HashSet<u32> = probe
        .list(req(&envd, ListRequest {}))
        .await
        .unwrap()
        .into_inner()
        .processes
        .iter()
        .filter(|p| p.config.as_ref().is_some_and(|c| c.cmd == "/bin/sleep"))
        .map(|p| p.pid)
        .collect();
    let running = children_named("sleep");
    let untracked: Vec<_> = running.difference(&listed).collect();
    eprintln!(
        "{n} starts: {} streams kept, {} sleeps listed, {} running, {} untracked",
        kept.len(),
        listed.len(),
        running.len(),
        untracked.len()
    );
    assert!(
        untracked.is_empty(),
        "{} commands run that the daemon does not list (their Start was cancelled): {untracked:?}",
        untracked.len()
    );
    if let Some(groups) = command_cgroups() {
        assert!(
            groups <= listed.len(),
            "{groups} command cgroups for {} listed commands",
            listed.len()
        );
    } else {
        eprintln!("no command cgroups here; the cgroup count is not checked");
    }
    drop(kept);
    envd.shutdown().await;
}

/// A Start whose command cannot be executed answers `invalid_argument` and leaves no cgroup
/// (before the fix each failed Start left an empty `c<n>` cgroup until the daemon exited).
#[tokio::test]
async fn a_failed_start_leaves_no_cgroup() {
    let envd = spawn_envd().await;
    let mut c = h2c(&envd).await;
    let Some(before) = command_cgroups() else {
        eprintln!("no command cgroups here (cgroup v2 not writable): nothing to check");
        return;
    };
    for _ in 0..20 {
        let mut r = sleep_request("1");
        if let Some(p) = r.process.as_mut() {
            p.cmd = "/nonexistent/e2b-no-such-command".into();
        }
        let err = c.start(req(&envd, r)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    }
    let after = command_cgroups().unwrap_or(0);
    assert!(
        after <= before,
        "{} command cgroups left by 20 failed starts",
        after - before
    );
    envd.shutdown().await;
}
