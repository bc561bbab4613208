//! A sandbox whose timeout expires is killed with every process it ran.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_commands::{CommandOptions, Transport};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_kills_the_sandbox_and_its_processes() {
    let env = start().await;
    let sbx = env.create(json!({"timeout": 30})).await;
    let id = common::id(&sbx);
    let marker = format!("expirymarker{id}");
    let cmds = env.commands(&sbx, Transport::GrpcWeb);
    cmds.run(
        format!("(setsid bash -c 'exec -a {marker}a sleep 3600' >/dev/null 2>&1 &) ; true"),
        CommandOptions::new(),
    )
    .await
    .unwrap();
    cmds.start(
        format!("exec -a {marker}b sleep 3600"),
        CommandOptions::new().no_timeout(),
    )
    .await
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || pids_with(&marker).len() >= 2).await);
    // Shorten to 1 s: the sandbox is gone shortly after.
    let (status, _) = env
        .post(&format!("/sandboxes/{id}/timeout"), json!({"timeout": 1}))
        .await;
    assert_eq!(status, 204);
    let mut gone = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if env.get(&format!("/sandboxes/{id}")).await.0 == 404 {
            gone = true;
            break;
        }
    }
    assert!(gone, "the sandbox outlived its timeout");
    assert_eq!(env.health(&id).await, 502);
    assert!(
        eventually(Duration::from_secs(10), || pids_with(&marker).is_empty()).await,
        "processes survived the expiry: {:?}",
        pids_with(&marker)
    );
    // timeout 0 expires at once.
    let sbx = env.create(json!({})).await;
    let (status, _) = env
        .post(
            &format!("/sandboxes/{}/timeout", common::id(&sbx)),
            json!({"timeout": 0}),
        )
        .await;
    assert_eq!(status, 204);
    let mut gone = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if env.get(&format!("/sandboxes/{}", common::id(&sbx))).await.0 == 404 {
            gone = true;
            break;
        }
    }
    assert!(gone);
    env.serve.shutdown().await;
}
