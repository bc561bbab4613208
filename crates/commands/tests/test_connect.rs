#![allow(clippy::unwrap_used, clippy::expect_used)]
//! connect by pid or tag, unknown pid, reconnect after disconnect, list.

mod common;

use common::Via;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2b_commands::{CommandError, CommandOptions, ConnectOptions, OutputCallback};

async fn connect_by_pid_and_by_tag(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start(
            "sleep 1.5; echo after; exit 7",
            CommandOptions::new().tag("my-tag"),
        )
        .await
        .unwrap();
    let by_pid = env
        .commands
        .connect(h.pid(), ConnectOptions::new())
        .await
        .unwrap();
    let by_tag = env
        .commands
        .connect("my-tag", ConnectOptions::new())
        .await
        .unwrap();
    assert_eq!(by_pid.pid(), h.pid());
    assert_eq!(by_tag.pid(), h.pid());
    for x in [by_pid, by_tag] {
        let out = x.wait().await.unwrap();
        assert_eq!(out.exit_code, 7);
        assert_eq!(out.stdout, "after\n");
    }
}
common::transport_cases!(connect_by_pid_and_by_tag: h2c, in_process);

async fn connect_to_unknown_pid_is_not_found(via: Via) {
    let env = common::env_via(via).await;
    let err = env
        .commands
        .connect(999_999u32, ConnectOptions::new())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.to_string().contains("Commands::list()"), "{err}");
    let err = env
        .commands
        .connect("no-such-tag", ConnectOptions::new())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}
common::transport_cases!(connect_to_unknown_pid_is_not_found: h2c, in_process);

async fn reconnect_after_disconnect(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start(
            "for i in $(seq 1 30); do echo $i; sleep 0.05; done; exit 3",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.disconnect().await;
    let err = h.wait().await.unwrap_err();
    assert!(matches!(err, CommandError::Disconnected { .. }), "{err:?}");
    assert!(err.to_string().contains("Commands::connect"), "{err}");

    let seen = Arc::new(Mutex::new(String::new()));
    let s2 = seen.clone();
    let again = env
        .commands
        .connect(
            h.pid(),
            ConnectOptions::new().on_stdout(OutputCallback::text(move |t: &str| {
                s2.lock().unwrap().push_str(t)
            })),
        )
        .await
        .unwrap();
    let out = again.wait().await.unwrap();
    assert_eq!(
        out.exit_code, 3,
        "the process kept running and its exit code arrived"
    );
    assert!(out.stdout.ends_with("30\n"), "{}", out.stdout);
    assert_eq!(*seen.lock().unwrap(), out.stdout);
}
common::transport_cases!(reconnect_after_disconnect: h2c, grpc_web, in_process);

async fn connect_timeout_stops_following_but_does_not_kill(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("sleep 2", CommandOptions::new())
        .await
        .unwrap();
    let follower = env
        .commands
        .connect(
            h.pid(),
            ConnectOptions::new().timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    let err = follower.wait().await.unwrap_err();
    assert!(
        matches!(err, CommandError::DeadlineExceeded { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("not killed"), "{err}");
    assert!(
        env.commands
            .list()
            .await
            .unwrap()
            .iter()
            .any(|p| p.pid == h.pid())
    );
    assert_eq!(h.wait().await.unwrap().exit_code, 0);
}
common::transport_cases!(connect_timeout_stops_following_but_does_not_kill: h2c, in_process);

async fn list_shows_running_processes(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start(
            "sleep 5",
            CommandOptions::new()
                .tag("listed")
                .env("K", "V")
                .cwd("/tmp"),
        )
        .await
        .unwrap();
    let list = env.commands.list().await.unwrap();
    let p = list.iter().find(|p| p.pid == h.pid()).expect("listed");
    assert_eq!(p.tag.as_deref(), Some("listed"));
    assert_eq!(p.cmd, "/bin/bash");
    assert_eq!(p.args, vec!["-l", "-c", "sleep 5"]);
    assert_eq!(p.envs.get("K").map(String::as_str), Some("V"));
    assert_eq!(p.cwd.as_deref(), Some("/tmp"));
    assert!(h.kill().await.unwrap());
    h.wait().await.unwrap();
    let list = env.commands.list().await.unwrap();
    assert!(list.iter().all(|p| p.pid != h.pid()));
}
common::transport_cases!(list_shows_running_processes: h2c, in_process);
