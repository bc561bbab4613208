#![allow(clippy::unwrap_used, clippy::expect_used)]
//! stdin: send_stdin (text, bytes, empty, special characters, multiline), close_stdin, via the
//! handle and via `Commands`.

mod common;

use std::time::Duration;

use e2b_commands::{CommandError, CommandOptions};

#[tokio::test]
async fn send_stdin_then_close_via_handle() {
    for t in common::TRANSPORTS {
        let env = common::env_with(t).await;
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
            "{t:?}"
        );
        assert_eq!(out.exit_code, 0);
    }
}

#[tokio::test]
async fn send_stdin_via_commands_by_pid() {
    let env = common::env().await;
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

#[tokio::test]
async fn close_stdin_via_commands() {
    let env = common::env().await;
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

#[tokio::test]
async fn stdin_closed_by_default_refuses_input() {
    let env = common::env().await;
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

#[tokio::test]
async fn start_streaming_opens_stdin_by_default() {
    let env = common::env().await;
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
