//! A sandbox whose timeout expires is killed with every process it ran.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_commands::Transport;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_kills_the_sandbox_and_its_processes() {
    let env = start().await;
    let sbx = env.create(json!({"timeout": 30})).await;
    let id = common::id(&sbx);
    let marker = format!("expirymarker{id}");
    spawn_marked(&env.commands(&sbx, Transport::GrpcWeb), &marker).await;
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
