#![allow(clippy::unwrap_used, clippy::expect_used)]
//! stdin: send_stdin (text, bytes, empty, special characters, multiline), close_stdin, via the
//! handle and via `Commands`.

mod common;

use common::Via;

use std::time::Duration;

use e2b_commands::{CommandError, CommandOptions};

async fn send_stdin_then_close_via_handle(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    h.send_stdin("hello ").await.unwrap();
    h.send_stdin(b"bytes\n".to_vec()).await.unwrap();
    h.send_stdin("").await.unwrap();
    h.send_stdin("!@#$%^&*() äöü €𝄞\nline2\nline3\n")
        .await
        .unwrap();
    h.close_stdin().await.unwrap();
    let out = h.wait().await.unwrap();
    assert_eq!(
        out.stdout, "hello bytes\n!@#$%^&*() äöü €𝄞\nline2\nline3\n",
        "{via:?}"
    );
    assert_eq!(out.exit_code, 0);
}
common::transport_cases!(send_stdin_then_close_via_handle: h2c, grpc_web, in_process);

async fn send_stdin_via_commands_by_pid(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("head -n 2", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    env.commands.send_stdin(h.pid(), "one\n").await.unwrap();
    env.commands.send_stdin(h.pid(), "two\n").await.unwrap();
    let out = h.wait().await.unwrap();
    assert_eq!(out.stdout, "one\ntwo\n");
    // The process is gone now: input is refused.
    let err = env.commands.send_stdin(h.pid(), "late").await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}
common::transport_cases!(send_stdin_via_commands_by_pid: h2c, in_process);

async fn close_stdin_via_commands(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("wc -c", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    env.commands.send_stdin(h.pid(), "12345").await.unwrap();
    env.commands.close_stdin(h.pid()).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(5), h.wait())
        .await
        .expect("EOF ends wc")
        .unwrap();
    assert_eq!(out.stdout.trim(), "5");
}
common::transport_cases!(close_stdin_via_commands: h2c, in_process);

async fn stdin_closed_by_default_refuses_input(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("sleep 5", CommandOptions::new())
        .await
        .unwrap();
    let err = h.send_stdin("x").await.unwrap_err();
    assert!(
        matches!(err, CommandError::InvalidArgument { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("stdin(true)"), "{err}");
    h.kill().await.unwrap();
}
common::transport_cases!(stdin_closed_by_default_refuses_input: h2c, in_process);

async fn start_streaming_opens_stdin_by_default(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start_streaming("cat", CommandOptions::new().retain_output(true))
        .await
        .unwrap();
    h.send_stdin("streamed\n").await.unwrap();
    h.close_stdin().await.unwrap();
    let out = h.wait().await.unwrap();
    assert_eq!(out.stdout, "streamed\n");
}
common::transport_cases!(start_streaming_opens_stdin_by_default: h2c, in_process);
