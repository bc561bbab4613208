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
    let env = common::env_via(via).await;
    let seen = Arc::new(AtomicUsize::new(0));
    let span: Arc<std::sync::Mutex<(Option<std::time::Instant>, Option<std::time::Instant>)>> =
        Arc::default();
    let (s2, c2) = (seen.clone(), span.clone());
    let stamps = Arc::new(std::sync::Mutex::new(String::new()));
    let st2 = stamps.clone();
    let bytes = 64 * 1024 * 1024;
    let h = env
        .commands
        .start_streaming(
            format!("date +%s%N >&2; head -c {bytes} /dev/zero; date +%s%N >&2"),
            CommandOptions::new()
                .on_stdout(OutputCallback::bytes_async(move |b: bytes::Bytes| {
                    let (s, c) = (s2.clone(), c2.clone());
                    async move {
                        // 40 ms per MiB, whatever the chunk size: ~2.5 s for the whole stream.
                        let pause = Duration::from_micros(40_000 * b.len() as u64 / (1 << 20));
                        tokio::time::sleep(pause).await;
                        let mut c = c.lock().unwrap();
                        let now = std::time::Instant::now();
                        c.0.get_or_insert(now);
                        c.1 = Some(now);
                        s.fetch_add(b.len(), Ordering::SeqCst);
                    }
                }))
                .on_stderr(OutputCallback::text(move |t: &str| {
                    st2.lock().unwrap().push_str(t)
                })),
        )
        .await
        .unwrap();
    h.wait().await.unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), bytes, "nothing lost");
    let stamps: Vec<u128> = stamps
        .lock()
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let producer = Duration::from_nanos((stamps[1] - stamps[0]) as u64);
    let (first, last) = *span.lock().unwrap();
    let consumer = last.unwrap() - first.unwrap();
    // Without back-pressure `head` would finish in milliseconds; with it, the producer can only
    // run ahead of the callback by the bounded buffers (about 20 MiB of the 64 MiB).
    assert!(
        producer * 2 >= consumer,
        "producer took {producer:?} while the callbacks took {consumer:?}"
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
