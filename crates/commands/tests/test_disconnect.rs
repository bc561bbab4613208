#![allow(clippy::unwrap_used, clippy::expect_used)]
//! disconnect: no callback after it returns, prompt while idle or during a callback, from
//! inside a callback; the exit code is kept when the command ended first; callback errors
//! surface in wait().

mod common;

use common::Via;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2b_commands::{CommandError, CommandHandle, CommandOptions, OutputCallback};

const TICKER: &str = "for i in $(seq 1 200); do echo $i; sleep 0.02; done";

async fn no_callback_runs_after_disconnect_returns(via: Via) {
    let env = common::env_via(via).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let h = env
        .commands
        .start(
            TICKER,
            CommandOptions::new().on_stdout(OutputCallback::text(move |_: &str| {
                c2.fetch_add(1, Ordering::SeqCst);
            })),
        )
        .await
        .unwrap();
    for _ in 0..500 {
        if calls.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A hang guard, not a timing claim: disconnect has nothing to wait for.
    tokio::time::timeout(Duration::from_secs(10), h.disconnect())
        .await
        .expect("disconnect returns when idle");
    let after = calls.load(Ordering::SeqCst);
    assert!(after > 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        after,
        "a callback ran after disconnect"
    );
    assert!(matches!(
        h.wait().await,
        Err(CommandError::Disconnected { .. })
    ));
    // The process keeps running.
    assert!(
        env.commands
            .list()
            .await
            .unwrap()
            .iter()
            .any(|p| p.pid == h.pid())
    );
    env.commands.kill(h.pid()).await.unwrap();
}
common::transport_cases!(no_callback_runs_after_disconnect_returns: h2c, in_process);

async fn disconnect_is_prompt_during_an_in_flight_async_callback(via: Via) {
    let env = common::env_via(via).await;
    let entered = Arc::new(tokio::sync::Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let (e2, c2) = (entered.clone(), calls.clone());
    let h = env
        .commands
        .start(
            TICKER,
            CommandOptions::new().on_stdout(OutputCallback::text_async(move |_: String| {
                let (e, c) = (e2.clone(), c2.clone());
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    e.notify_one();
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            })),
        )
        .await
        .unwrap();
    entered.notified().await;
    // The callback sleeps 30 s: returning well before that shows disconnect does not wait
    // for an in-flight callback.
    tokio::time::timeout(Duration::from_secs(10), h.disconnect())
        .await
        .expect("disconnect does not wait for the in-flight callback");
    let err = tokio::time::timeout(Duration::from_secs(2), h.wait())
        .await
        .expect("wait resolves promptly")
        .unwrap_err();
    assert!(matches!(err, CommandError::Disconnected { .. }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    env.commands.kill(h.pid()).await.unwrap();
}
common::transport_cases!(disconnect_is_prompt_during_an_in_flight_async_callback: h2c, in_process);

async fn disconnect_from_inside_a_callback(via: Via) {
    let env = common::env_via(via).await;
    let slot: Arc<Mutex<Option<CommandHandle>>> = Arc::new(Mutex::new(None));
    let calls = Arc::new(AtomicUsize::new(0));
    let (s2, c2) = (slot.clone(), calls.clone());
    let h = env
        .commands
        .start(
            TICKER,
            CommandOptions::new().on_stdout(OutputCallback::text_async(move |_: String| {
                let (s, c) = (s2.clone(), c2.clone());
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    let h = s.lock().unwrap().clone();
                    if let Some(h) = h {
                        h.disconnect().await;
                    }
                }
            })),
        )
        .await
        .unwrap();
    *slot.lock().unwrap() = Some(h.clone());
    let err = tokio::time::timeout(Duration::from_secs(5), h.wait())
        .await
        .expect("no deadlock")
        .unwrap_err();
    assert!(matches!(err, CommandError::Disconnected { .. }));
    let n = calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.load(Ordering::SeqCst), n);
    env.commands.kill(h.pid()).await.unwrap();
}
common::transport_cases!(disconnect_from_inside_a_callback: h2c, in_process);

async fn exit_code_is_kept_when_disconnected_after_the_end(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("echo bye; exit 42", CommandOptions::new())
        .await
        .unwrap();
    while !h.is_finished() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.disconnect().await;
    let out = h.wait().await.unwrap();
    assert_eq!(out.exit_code, 42);
    assert_eq!(out.stdout, "bye\n");
}
common::transport_cases!(exit_code_is_kept_when_disconnected_after_the_end: h2c, in_process);

async fn exit_code_is_kept_for_a_reconnect_after_the_process_ended(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start("sleep 0.3; exit 9", CommandOptions::new())
        .await
        .unwrap();
    h.disconnect().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    // envd keeps an exited process's end briefly: a late connect still learns the exit code.
    let again = env
        .commands
        .connect(h.pid(), e2b_commands::ConnectOptions::new())
        .await
        .unwrap();
    assert_eq!(again.wait().await.unwrap().exit_code, 9);
}
common::transport_cases!(exit_code_is_kept_for_a_reconnect_after_the_process_ended: h2c, in_process);

#[derive(Debug)]
struct Boom;
impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("boom")
    }
}
impl std::error::Error for Boom {}

async fn an_async_callback_error_is_surfaced_by_wait(via: Via) {
    let env = common::env_via(via).await;
    let failed = Arc::new(AtomicBool::new(false));
    let f2 = failed.clone();
    let h = env
        .commands
        .start(
            "echo one; sleep 0.2; echo two; sleep 5",
            CommandOptions::new().on_stdout(OutputCallback::text_async(move |s: String| {
                let f = f2.clone();
                async move {
                    if s.contains("two") {
                        f.store(true, Ordering::SeqCst);
                        Err(Boom)
                    } else {
                        Ok(())
                    }
                }
            })),
        )
        .await
        .unwrap();
    let err = h.wait().await.unwrap_err();
    assert!(failed.load(Ordering::SeqCst));
    match &err {
        CommandError::Callback { stream, source } => {
            assert_eq!(*stream, "on_stdout");
            assert_eq!(source.to_string(), "boom");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("keeps running"), "{err}");
    assert!(h.kill().await.unwrap());
}
common::transport_cases!(an_async_callback_error_is_surfaced_by_wait: h2c, in_process);

async fn a_sync_callback_error_is_surfaced_by_run(via: Via) {
    let env = common::env_via(via).await;
    let err = env
        .commands
        .run(
            "echo x",
            CommandOptions::new().on_stdout(OutputCallback::text(|_: &str| {
                Err::<(), _>(std::io::Error::other("nope"))
            })),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CommandError::Callback { .. }), "{err:?}");
}
common::transport_cases!(a_sync_callback_error_is_surfaced_by_run: h2c, in_process);

async fn a_panicking_callback_does_not_hang_wait(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start(
            "echo x; sleep 5",
            CommandOptions::new().on_stdout(OutputCallback::text(|s: &str| {
                if !s.is_empty() {
                    panic!("callback bug");
                }
            })),
        )
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), h.wait())
        .await
        .expect("wait resolves")
        .unwrap_err();
    assert!(matches!(err, CommandError::Callback { .. }), "{err:?}");
    assert!(err.to_string().contains("callback bug"), "{err}");
    h.kill().await.unwrap();
}
common::transport_cases!(a_panicking_callback_does_not_hang_wait: h2c, in_process);
