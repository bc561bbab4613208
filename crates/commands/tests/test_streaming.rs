#![allow(clippy::unwrap_used, clippy::expect_used)]
//! start_streaming / retain_output(false): nothing kept, every byte delivered in order
//! (sha256 of a large random stream computed in the sandbox), to callbacks and to the event stream.

mod common;

use common::Via;

use std::sync::{Arc, Mutex};

use e2b_commands::{CommandEvent, CommandOptions, OutputCallback};
use futures::StreamExt as _;
use sha2::{Digest as _, Sha256};

const BIG: usize = 64 * 1024 * 1024;

/// Emits BIG random bytes on stdout and their sha256 on stderr.
fn random_stream_cmd(dir: &std::path::Path) -> String {
    let sum = dir.join("sum");
    format!(
        "head -c {BIG} /dev/urandom | tee >(sha256sum | cut -d' ' -f1 > {sum}) ; wait; sleep 0.2; cat {sum} >&2",
        sum = sum.display()
    )
}

async fn callbacks_get_every_byte_and_nothing_is_retained(via: Via) {
    let env = common::env_via(via).await;
    let hasher = Arc::new(Mutex::new((Sha256::new(), 0usize)));
    let h2 = hasher.clone();
    let err = Arc::new(Mutex::new(String::new()));
    let e2 = err.clone();
    let h = env
        .commands
        .start_streaming(
            random_stream_cmd(env.envd.workdir()),
            CommandOptions::new()
                .on_stdout(OutputCallback::bytes(move |b: &[u8]| {
                    let mut g = h2.lock().unwrap();
                    g.0.update(b);
                    g.1 += b.len();
                }))
                .on_stderr(OutputCallback::text(move |s: &str| {
                    e2.lock().unwrap().push_str(s)
                })),
        )
        .await
        .unwrap();
    assert!(!h.retains_output());
    let out = h.wait().await.unwrap();
    assert_eq!(out.exit_code, 0, "{via:?}");
    assert!(out.stdout.is_empty() && out.stdout_bytes.is_empty());
    assert!(out.stderr.is_empty());
    assert_eq!(h.retained_len(), 0);
    assert_eq!(h.stdout(), "");
    let (hasher, n) = std::mem::take(&mut *hasher.lock().unwrap());
    assert_eq!(n, BIG, "{via:?}: every byte");
    assert_eq!(
        hex::encode(hasher.finalize()),
        err.lock().unwrap().trim(),
        "{via:?}: sha256 matches the sandbox's"
    );
}
common::transport_cases!(callbacks_get_every_byte_and_nothing_is_retained: h2c, grpc_web, in_process);

async fn event_stream_gets_every_byte_in_order(via: Via) {
    let env = common::env_via(via).await;
    let mut h = env
        .commands
        .start_streaming(random_stream_cmd(env.envd.workdir()), CommandOptions::new())
        .await
        .unwrap();
    let mut events = h.take_events().expect("fed from the start");
    assert!(h.take_events().is_none(), "taken once");
    let mut hasher = Sha256::new();
    let mut n = 0;
    let mut stderr = Vec::new();
    let mut exit = None;
    while let Some(ev) = events.next().await {
        match ev.unwrap() {
            CommandEvent::Stdout(b) => {
                n += b.len();
                hasher.update(&b);
            }
            CommandEvent::Stderr(b) => stderr.extend_from_slice(&b),
            CommandEvent::Exit(st) => exit = Some(st),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(n, BIG);
    assert_eq!(exit.unwrap().exit_code, 0);
    assert_eq!(
        hex::encode(hasher.finalize()),
        String::from_utf8(stderr).unwrap().trim()
    );
    assert_eq!(h.retained_len(), 0);
    assert_eq!(h.wait().await.unwrap().exit_code, 0);
}
common::transport_cases!(event_stream_gets_every_byte_in_order: h2c, in_process);

async fn async_callbacks_see_text_in_order(via: Via) {
    let env = common::env_via(via).await;
    let seen = Arc::new(tokio::sync::Mutex::new(String::new()));
    let s2 = seen.clone();
    let h = env
        .commands
        .start_streaming(
            "for i in $(seq 1 2000); do echo line-$i; done",
            CommandOptions::new().on_stdout(OutputCallback::text_async(move |t: String| {
                let s = s2.clone();
                async move {
                    s.lock().await.push_str(&t);
                }
            })),
        )
        .await
        .unwrap();
    h.wait().await.unwrap();
    let want: String = (1..=2000).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(*seen.lock().await, want);
}
common::transport_cases!(async_callbacks_see_text_in_order: h2c, in_process);

async fn an_event_stream_taken_later_sees_events_from_then_on(via: Via) {
    let env = common::env_via(via).await;
    let mut h = env
        .commands
        .start("sleep 0.3; echo later", CommandOptions::new())
        .await
        .unwrap();
    let mut events = h.take_events().expect("attach a stream");
    let mut got = Vec::new();
    while let Some(ev) = events.next().await {
        got.push(ev.unwrap());
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        CommandEvent::Stdout(bytes::Bytes::from_static(b"later\n"))
    );
    assert!(matches!(got[1], CommandEvent::Exit(_)));
    assert_eq!(h.stdout(), "later\n", "retention is unaffected");
}
common::transport_cases!(an_event_stream_taken_later_sees_events_from_then_on: h2c, in_process);
