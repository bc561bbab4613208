#![allow(clippy::unwrap_used, clippy::expect_used)]
//! kill and signal: true for a live process, false for an unknown one, the whole group.

mod common;

use common::Via;

use std::time::Duration;

use e2b_commands::{CommandOptions, Signal};

async fn kill_live_and_unknown(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("sleep 30", CommandOptions::new())
        .await
        .unwrap();
    assert!(env.commands.kill(h.pid()).await.unwrap());
    let out = h.wait().await.unwrap();
    assert_eq!(out.signal, Some(9), "{via:?}");
    assert_eq!(out.exit_code, -1);
    assert!(!out.success());
    assert_eq!(out.status.code_or_128_plus_signal(), 137);
    assert!(
        !env.commands.kill(999_999).await.unwrap(),
        "unknown pid → false"
    );
}
common::transport_cases!(kill_live_and_unknown: h2c, grpc_web, in_process);

async fn sigterm_via_handle(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("exec sleep 30", CommandOptions::new())
        .await
        .unwrap();
    assert!(h.signal(Signal::Term).await.unwrap());
    let out = h.wait().await.unwrap();
    assert_eq!(out.signal, Some(15));
    assert_eq!(out.error.as_deref(), Some("signal: terminated"));
    assert!(!env.commands.signal(999_999, Signal::Term).await.unwrap());
}
common::transport_cases!(sigterm_via_handle: h2c, in_process);

async fn kill_reaches_the_whole_process_group(via: Via) {
    let env = common::env_via(via).await;
    let marker = env.envd.workdir().join("grandchild-survived");
    let h = env
        .commands
        .start(
            format!("(sleep 1; touch {}) & sleep 30", marker.display()),
            CommandOptions::new(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(h.kill().await.unwrap());
    h.wait().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!marker.exists());
}
common::transport_cases!(kill_reaches_the_whole_process_group: h2c, in_process);
