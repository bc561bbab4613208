#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `start`: background handle, retained output, several waiters, stdin closed by default,
//! command timeout vs request timeout.

mod common;

use common::Via;

use std::time::Duration;

use e2b_commands::{CommandError, CommandOptions};

async fn background_handle_retains_output_and_serves_several_waiters(via: Via) {
    let env = common::env_via(via).await;
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
common::transport_cases!(background_handle_retains_output_and_serves_several_waiters: h2c, in_process);

async fn stdin_is_closed_by_default(via: Via) {
    let env = common::env_via(via).await;
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
common::transport_cases!(stdin_is_closed_by_default: h2c, in_process);

/// `Connect-Timeout-Ms` is sent on `Start` whatever the transport.
async fn command_timeout_kills_the_process(via: Via) {
    let env = common::env_via(via).await;
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
common::transport_cases!(command_timeout_kills_the_process: h2c, grpc_web, in_process);

async fn a_long_enough_timeout_is_fine_and_zero_means_none(via: Via) {
    let env = common::env_via(via).await;
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
common::transport_cases!(a_long_enough_timeout_is_fine_and_zero_means_none: h2c, in_process);

async fn command_timeout_reaches_the_whole_process_group(via: Via) {
    let env = common::env_via(via).await;
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
common::transport_cases!(command_timeout_reaches_the_whole_process_group: h2c, in_process);

/// A server that accepts connections and never answers: only the request timeout can fire.
async fn silent_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    addr
}

async fn request_timeout_is_separate_from_the_command_timeout(via: Via) {
    let addr = silent_server().await;
    let conn = e2b_commands::EnvdConnection::new(
        e2b_commands::EnvdEndpoint::new(format!("http://{addr}")).transport(via.transport()),
    )
    .unwrap();
    let commands = e2b_commands::Commands::new(conn);
    // The error names the request timeout (not the command's, which is off): that, not the
    // wall clock, shows which clock fired. The outer timeout only guards against a hang.
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        commands.start(
            "true",
            CommandOptions::new()
                .request_timeout(Duration::from_millis(300))
                .no_timeout(),
        ),
    )
    .await
    .expect("the request timeout fires")
    .unwrap_err();
    assert!(
        matches!(err, CommandError::RequestTimeout { timeout_ms: 300 }),
        "{via:?}: {err:?}"
    );
    assert!(err.to_string().contains("request_timeout"), "{err}");
}
// No in-process case: the silent peer is a socket.
common::transport_cases!(request_timeout_is_separate_from_the_command_timeout: h2c, grpc_web);

async fn a_long_command_outlives_its_request_timeout(via: Via) {
    let env = common::env_via(via).await;
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
common::transport_cases!(a_long_command_outlives_its_request_timeout: h2c, in_process);
