//! The isolated runtime (`e2b-isolation`): each sandbox its own root, `/tmp`, hostname and
//! `user` with sudo; pause freezes it, kill leaves nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_commands::{CommandOptions, Transport};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_sandboxes_see_only_themselves() {
    let env = start_isolated().await;
    assert_eq!(env.serve.runtime_name(), "isolated");
    let a = env.create(json!({})).await;
    let b = env.create(json!({})).await;
    let ca = env.commands(&a, Transport::Grpc);
    let cb = env.commands(&b, Transport::GrpcWeb);
    let out = ca
        .run(
            "whoami; pwd; hostname; sudo -n true && echo sudo-ok; echo secret > /tmp/only-a",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        ["user", "/home/user", id(&a).as_str(), "sudo-ok"],
        "{}",
        out.stderr
    );
    let out = cb
        .run("cat /tmp/only-a", CommandOptions::new())
        .await
        .unwrap();
    assert_ne!(out.exit_code, 0, "sandbox b sees sandbox a's /tmp");

    // Pause freezes the sandbox's processes; connect resumes them.
    let marker = format!("isomarker{}", id(&a));
    ca.start(
        format!("exec -a {marker} sleep 3600"),
        CommandOptions::new().no_timeout(),
    )
    .await
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || !pids_with(&marker).is_empty()).await);
    let (status, _) = env
        .post(&format!("/sandboxes/{}/pause", id(&a)), json!({}))
        .await;
    assert_eq!(status, 204);
    for pid in pids_with(&marker) {
        assert_eq!(proc_state(pid), Some('T'));
    }
    assert_eq!(env.health(&id(&a)).await, 502);
    let (status, _) = env
        .post(
            &format!("/sandboxes/{}/connect", id(&a)),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        ca.run("echo back", CommandOptions::new())
            .await
            .unwrap()
            .stdout,
        "back\n"
    );

    // Kill leaves nothing of it.
    let (status, _) = env.delete(&format!("/sandboxes/{}", id(&a))).await;
    assert_eq!(status, 204);
    assert!(
        eventually(Duration::from_secs(10), || pids_with(&marker).is_empty()).await,
        "survivors: {:?}",
        pids_with(&marker)
    );
    env.serve.shutdown().await;
}
