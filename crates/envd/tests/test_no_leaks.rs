//! No file descriptor or zombie leaks (alone in its binary so counts are not disturbed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn no_fd_or_process_leak_after_many_commands() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let mut g = h2c(&envd).await;
    // Warm up connections and lazily-created runtime resources.
    collect(start_bash(&mut g, &envd, "true").await, |m| m.event).await;
    let _ = c
        .stream(
            "/process.Process/Start",
            &envelope(0, serde_json::to_string(&bash("true")).unwrap().as_bytes()),
            &[],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = open_fds();
    for i in 0..30 {
        let mut r = bash("echo x; echo y >&2");
        if i % 3 == 0 {
            r.stdin = Some(true);
        }
        if i % 5 == 0 {
            r.pty = Some(e2b_envd_proto::process::Pty {
                size: Some(e2b_envd_proto::process::pty::Size { cols: 80, rows: 24 }),
            });
        }
        collect(g.start(req(&envd, r)).await.unwrap().into_inner(), |m| {
            m.event
        })
        .await;
        let _ = c
            .stream("/process.Process/Start", &envelope(0, b"{bad"), &[])
            .await;
        let _ = c
            .unary(
                "/process.Process/SendInput",
                serde_json::json!({"process": {"pid": 4000000}, "input": {"stdin": "eA=="}}),
            )
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = open_fds();
    assert!(
        after <= before + 2,
        "fd leak: {before} before, {after} after"
    );
    // No zombie children of this process.
    let me = std::process::id().to_string();
    let zombies: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|s| {
            let rest = s.rsplit(')').next().unwrap_or("");
            let f: Vec<_> = rest.split_whitespace().collect();
            f.first() == Some(&"Z") && f.get(1) == Some(&me.as_str())
        })
        .collect();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
}
