//! The live suite: the facade and `e2b-api` against E2B's real cloud (network, an API key, a
//! few cents of sandbox time). Ignored in normal runs; run it with
//!
//! ```sh
//! E2B_API_KEY=e2b_... scripts/test --live
//! ```
//!
//! which skips with a message when no key is set. `E2B_DOMAIN` / `E2B_API_URL` point it at a
//! self-hosted E2B instead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2b::api::models::SandboxState;
use e2b::api::{ApiClient, ListQuery};
use e2b::{CommandOptions, Sandbox};

fn require_key() {
    assert!(
        std::env::var("E2B_API_KEY").is_ok_and(|k| !k.is_empty()),
        "E2B_API_KEY is not set: the live suite talks to E2B's cloud; run it as `E2B_API_KEY=e2b_... scripts/test --live`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "live: needs E2B_API_KEY and network; run `E2B_API_KEY=... scripts/test --live`"]
async fn live_create_run_list_timeout_kill() {
    require_key();
    let tag = format!(
        "e2b-rs-live-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let sbx = Sandbox::builder("base")
        .metadata("suite", tag.clone())
        .timeout(Duration::from_secs(120))
        .create()
        .await
        .unwrap();
    let out = sbx
        .commands()
        .run("echo live; whoami", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "live\nuser\n");
    sbx.files().write("live.txt", "from e2b-rs").await.unwrap();
    assert_eq!(
        sbx.files().read_text("live.txt").await.unwrap(),
        "from e2b-rs"
    );

    let info = sbx.info().await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    let api = ApiClient::from_env().unwrap();
    let listed = api
        .list(ListQuery::new().metadata("suite", tag.clone()))
        .collect(None)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    sbx.set_timeout(Duration::from_secs(300)).await.unwrap();
    assert!(sbx.info().await.unwrap().end_at > info.end_at);

    let again = Sandbox::connect_by_id(sbx.id()).await.unwrap();
    let out = again
        .commands()
        .run("cat live.txt", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "from e2b-rs");

    let id = sbx.id().to_owned();
    sbx.kill().await.unwrap();
    assert!(!Sandbox::kill_by_id(&id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "live: needs E2B_API_KEY and network; run `E2B_API_KEY=... scripts/test --live`"]
async fn live_pause_and_resume() {
    require_key();
    let sbx = Sandbox::builder("base")
        .timeout(Duration::from_secs(120))
        .create()
        .await
        .unwrap();
    sbx.files().write("state.txt", "kept").await.unwrap();
    assert!(sbx.pause().await.unwrap());
    assert!(!sbx.is_running().await.unwrap());
    assert!(sbx.resume().await.unwrap());
    assert_eq!(sbx.files().read_text("state.txt").await.unwrap(), "kept");
    sbx.kill().await.unwrap();
}
