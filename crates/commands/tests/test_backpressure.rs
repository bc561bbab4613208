#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Back-pressure: a stalled callback or an unread event stream stalls the producer; once
//! released, nothing has been lost.

mod common;

use common::Via;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2b_commands::{CommandEvent, CommandOptions, OutputCallback};
use futures::StreamExt as _;

// Larger than every buffer on the way (envd's per-subscriber channel of 64 chunks of up to
// 256 KiB, coalesced events of up to 1 MiB, the pipe, HTTP/2 windows, our event buffer).
const TOTAL: usize = 128 * 1024 * 1024;

fn producer(marker: &std::path::Path) -> String {
    // `done` is written only after head has written every byte into the pipe.
    format!("head -c {TOTAL} /dev/zero; touch {}", marker.display())
}

async fn a_stalled_callback_stalls_the_producer_and_nothing_is_lost(via: Via) {
    let env = common::env_via(via).await;
    let marker = env.envd.workdir().join("done");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let (g2, s2) = (gate.clone(), seen.clone());
    let h = env
        .commands
        .start_streaming(
            producer(&marker),
            CommandOptions::new().on_stdout(OutputCallback::bytes_async(move |b: bytes::Bytes| {
                let (g, s) = (g2.clone(), s2.clone());
                async move {
                    // Block until released.
                    g.acquire().await.unwrap().forget();
                    s.fetch_add(b.len(), Ordering::SeqCst);
                }
            })),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !marker.exists(),
        "{via:?}: the producer finished although the callback never returned"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    gate.add_permits(usize::MAX >> 4);
    let out = h.wait().await.unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(seen.load(Ordering::SeqCst), TOTAL, "{via:?}: nothing lost");
    assert!(marker.exists());
}
common::transport_cases!(a_stalled_callback_stalls_the_producer_and_nothing_is_lost: h2c, grpc_web, in_process);

async fn a_slow_callback_slows_the_producer(via: Via) {
    // A slow (not stalled) callback: the producer may run ahead of it only by the bounded
    // buffers on the way (about 20 MiB), so when the callback first sees the producer's `done`
    // marker it has already consumed all but those. Judged by that order of events, not by
    // clocks; without back-pressure `head` would be done before the second chunk.
    const BYTES: usize = 96 * 1024 * 1024;
    const MAX_AHEAD: usize = BYTES / 2;
    let env = common::env_via(via).await;
    let marker = env.envd.workdir().join("done-slow");
    let seen = Arc::new(AtomicUsize::new(0));
    let seen_at_marker: Arc<std::sync::Mutex<Option<usize>>> = Arc::default();
    let (s2, m2, marker2) = (seen.clone(), seen_at_marker.clone(), marker.clone());
    let h = env
        .commands
        .start_streaming(
            format!("head -c {BYTES} /dev/zero; touch {}", marker.display()),
            CommandOptions::new().on_stdout(OutputCallback::bytes_async(move |b: bytes::Bytes| {
                let (s, m, marker) = (s2.clone(), m2.clone(), marker2.clone());
                async move {
                    // 15 ms per MiB, whatever the chunk size.
                    let pause = Duration::from_micros(15_000 * b.len() as u64 / (1 << 20));
                    tokio::time::sleep(pause).await;
                    let before = s.fetch_add(b.len(), Ordering::SeqCst);
                    let mut m = m.lock().unwrap();
                    if m.is_none() && marker.exists() {
                        *m = Some(before);
                    }
                }
            })),
        )
        .await
        .unwrap();
    h.wait().await.unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), BYTES, "{via:?}: nothing lost");
    assert!(marker.exists());
    // None: the producer ended after the last chunk was handed to the callback.
    let consumed = seen_at_marker.lock().unwrap().unwrap_or(BYTES);
    assert!(
        consumed + MAX_AHEAD >= BYTES,
        "{via:?}: the producer finished when the callback had consumed only {} MiB of {} MiB",
        consumed >> 20,
        BYTES >> 20
    );
}
common::transport_cases!(a_slow_callback_slows_the_producer: h2c, in_process);

async fn an_unread_event_stream_stalls_the_producer_and_nothing_is_lost(via: Via) {
    let env = common::env_via(via).await;
    let marker = env.envd.workdir().join("done");
    let mut h = env
        .commands
        .start_streaming(producer(&marker), CommandOptions::new())
        .await
        .unwrap();
    let mut events = h.take_events().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !marker.exists(),
        "the producer finished while nobody read the stream"
    );
    let mut n = 0;
    let mut exit = None;
    while let Some(ev) = events.next().await {
        match ev.unwrap() {
            CommandEvent::Stdout(b) => n += b.len(),
            CommandEvent::Exit(st) => exit = Some(st),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(n, TOTAL);
    assert_eq!(exit.unwrap().exit_code, 0);
    assert!(marker.exists());
}
common::transport_cases!(an_unread_event_stream_stalls_the_producer_and_nothing_is_lost: h2c, in_process);
