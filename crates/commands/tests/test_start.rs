#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `start`: background handle, retained output, several waiters, stdin closed by default,
//! command timeout vs request timeout.

mod common;

use std::time::{Duration, Instant};

use e2b_commands::{CommandError, CommandOptions};

#[tokio::test]
async fn background_handle_retains_output_and_serves_several_waiters() {
    let env = common::env().await;
    let h = env
        .commands
        .start(
            "echo a; sleep 0.3; echo b >&2; exit 5",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert!(h.pid() > 0);
    assert!(h.retains_output());
    let h2 = h.clone();
    let (a, b, c) = tokio::join!(h.wait(), h.wait(), h2.wait());
    for out in [a.unwrap(), b.unwrap(), c.unwrap()] {
        assert_eq!(out.exit_code, 5);
        assert_eq!(out.stdout, "a\n");
        assert_eq!(out.stderr, "b\n");
    }
    // And later.
    assert_eq!(h.wait().await.unwrap().exit_code, 5);
    assert_eq!(h.stdout(), "a\n");
    assert_eq!(h.stderr(), "b\n");
    assert_eq!(h.exit_status().unwrap().exit_code, 5);
}

#[tokio::test]
async fn stdin_is_closed_by_default() {
    let env = common::env().await;
    // With stdin closed, cat reads EOF at once.
    let out = env
        .commands
        .run(
            "cat; echo done",
            CommandOptions::new().timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "done\n");
}

#[tokio::test]
async fn command_timeout_kills_the_process() {
    for t in common::TRANSPORTS {
        command_timeout_kills_the_process_on(t).await;
    }
}

/// `Connect-Timeout-Ms` is sent on `Start` whatever the transport.
async fn command_timeout_kills_the_process_on(t: e2b_commands::Transport) {
    let env = common::env_with(t).await;
    let t0 = Instant::now();
    let err = env
        .commands
        .run(
            "sleep 10",
            CommandOptions::new().timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommandError::DeadlineExceeded { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("Duration::ZERO"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));

    // Background: wait() reports it too.
    let h = env
        .commands
        .start(
            "sleep 10",
            CommandOptions::new().timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    let err = h.wait().await.unwrap_err();
    assert!(
        matches!(err, CommandError::DeadlineExceeded { .. }),
        "{err:?}"
    );
    // envd killed it (its reaping may trail the stream's end by a moment).
    let mut gone = false;
    for _ in 0..40 {
        if env
            .commands
            .list()
            .await
            .unwrap()
            .iter()
            .all(|p| p.pid != h.pid())
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the timed-out process is still listed");
}

#[tokio::test]
async fn a_long_enough_timeout_is_fine_and_zero_means_none() {
    let env = common::env().await;
    let out = env
        .commands
        .run(
            "sleep 0.5; echo ok",
            CommandOptions::new().timeout(Duration::from_secs(4)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "ok\n");
    let out = env
        .commands
        .run("sleep 0.2; echo ok", CommandOptions::new().no_timeout())
        .await
        .unwrap();
    assert_eq!(out.stdout, "ok\n");
}

#[tokio::test]
async fn command_timeout_reaches_the_whole_process_group() {
    let env = common::env().await;
    let marker = env.envd.workdir().join("survivor");
    let err = env
        .commands
        .run(
            format!("(sleep 1.5; touch {}) & sleep 10", marker.display()),
            CommandOptions::new().timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommandError::DeadlineExceeded { .. }),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !marker.exists(),
        "a grandchild survived the command timeout"
    );
}

#[tokio::test]
async fn request_timeout_is_separate_from_the_command_timeout() {
    // A server that accepts and never answers: only the request timeout can fire.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    for t in common::TRANSPORTS {
        let conn = e2b_commands::EnvdConnection::new(
            e2b_commands::EnvdEndpoint::new(format!("http://{addr}")).transport(t),
        )
        .unwrap();
        let commands = e2b_commands::Commands::new(conn);
        let t0 = Instant::now();
        let err = commands
            .start(
                "true",
                CommandOptions::new()
                    .request_timeout(Duration::from_millis(300))
                    .no_timeout(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, CommandError::RequestTimeout { timeout_ms: 300 }),
            "{t:?}: {err:?}"
        );
        assert!(err.to_string().contains("request_timeout"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(3));
    }
}

#[tokio::test]
async fn a_long_command_outlives_its_request_timeout() {
    let env = common::env().await;
    let out = env
        .commands
        .run(
            "sleep 1; echo late",
            CommandOptions::new().request_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "late\n");
}
