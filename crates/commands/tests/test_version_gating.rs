#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Version gating: an endpoint (and a daemon) on an old envd version. A gated call fails with
//! the teaching error and sends nothing.

mod common;

use std::time::Duration;

use e2b_commands::{CommandError, CommandOptions, Commands, EnvdConnection, EnvdVersion};

async fn old(version: &str) -> (e2b_test_support::TestEnvd, Commands) {
    let v = version.to_owned();
    let envd = e2b_test_support::spawn_envd_with(move |mut c| {
        c.envd_version = v;
        c
    })
    .await;
    let ep = common::endpoint(&envd, e2b_commands::Transport::Grpc)
        .envd_version(version.parse::<EnvdVersion>().unwrap());
    let commands = Commands::new(EnvdConnection::new(ep).unwrap());
    (envd, commands)
}

#[tokio::test]
async fn close_stdin_on_0_5_1_teaches_and_sends_nothing() {
    let (_envd, commands) = old("0.5.1").await;
    let h = commands
        .start("cat", CommandOptions::new().stdin(true).no_timeout())
        .await
        .unwrap();
    let err = h.close_stdin().await.unwrap_err();
    match &err {
        CommandError::UnsupportedFeature(u) => {
            assert_eq!(u.required.to_string(), "0.5.2");
            assert_eq!(u.actual.to_string(), "0.5.1");
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("0.5.2") && msg.contains("0.5.1") && msg.contains("Rebuild"),
        "{msg}"
    );
    let err = commands.close_stdin(h.pid()).await.unwrap_err();
    assert!(matches!(err, CommandError::UnsupportedFeature(_)));

    // Nothing was sent: stdin is still open and cat still echoes.
    h.send_stdin("still open\n").await.unwrap();
    for _ in 0..100 {
        if !h.stdout().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(h.stdout(), "still open\n");
    h.kill().await.unwrap();
}

#[tokio::test]
async fn close_stdin_on_0_5_2_works() {
    let (_envd, commands) = old("0.5.2").await;
    let h = commands
        .start("cat", CommandOptions::new().stdin(true))
        .await
        .unwrap();
    h.send_stdin("x").await.unwrap();
    h.close_stdin().await.unwrap();
    assert_eq!(h.wait().await.unwrap().stdout, "x");
}

#[tokio::test]
async fn explicit_closed_stdin_on_0_2_9_teaches_and_starts_nothing() {
    let (_envd, commands) = old("0.2.9").await;
    let err = commands
        .start("sleep 30", CommandOptions::new().stdin(false).tag("never"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommandError::UnsupportedFeature(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("0.3.0"), "{err}");
    assert!(
        commands.list().await.unwrap().is_empty(),
        "nothing was started"
    );
}
