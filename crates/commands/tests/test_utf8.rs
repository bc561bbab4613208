#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Incremental UTF-8: split characters are never broken, invalid bytes become U+FFFD, a
//! trailing incomplete character is flushed at the end; the bytes view is exact.

mod common;

use common::Via;

use std::sync::{Arc, Mutex};

use e2b_commands::{CommandOptions, OutputCallback};

fn collect() -> (OutputCallback, Arc<Mutex<Vec<String>>>) {
    let chunks = Arc::new(Mutex::new(Vec::new()));
    let c2 = chunks.clone();
    (
        OutputCallback::text(move |s: &str| c2.lock().unwrap().push(s.to_owned())),
        chunks,
    )
}

async fn a_character_split_across_chunks_arrives_whole(via: Via) {
    let env = common::env_via(via).await;
    let (cb, chunks) = collect();
    // € = e2 82 ac, sent in two writes with a pause so they arrive as two chunks.
    let out = env
        .commands
        .run(
            r"printf 'a\xe2'; sleep 0.3; printf '\x82\xacb'; sleep 0.3; printf '\xf0\x9d'; sleep 0.3; printf '\x84\x9e'",
            CommandOptions::new().on_stdout(cb),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "a€b𝄞");
    assert_eq!(&out.stdout_bytes[..], "a€b𝄞".as_bytes());
    let chunks = chunks.lock().unwrap().clone();
    assert!(chunks.len() >= 3, "arrived in pieces: {chunks:?}");
    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
    assert_eq!(chunks.concat(), "a€b𝄞");
}
common::transport_cases!(a_character_split_across_chunks_arrives_whole: h2c, in_process);

async fn invalid_bytes_become_replacement_and_bytes_stay_exact(via: Via) {
    let env = common::env_via(via).await;
    let (cb, chunks) = collect();
    let out = env
        .commands
        .run(
            r"printf 'x\xffy\xe2\x82'",
            CommandOptions::new().on_stdout(cb),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "x\u{FFFD}y\u{FFFD}");
    assert_eq!(&out.stdout_bytes[..], b"x\xffy\xe2\x82");
    assert_eq!(
        chunks.lock().unwrap().concat(),
        "x\u{FFFD}y\u{FFFD}",
        "flushed at the end"
    );
}
common::transport_cases!(invalid_bytes_become_replacement_and_bytes_stay_exact: h2c, in_process);

async fn trailing_incomplete_character_is_flushed_when_the_stream_errors(via: Via) {
    let env = common::env_via(via).await;
    let (cb, chunks) = collect();
    let err = env
        .commands
        .run(
            r"printf 'z\xe2'; sleep 5",
            CommandOptions::new()
                .on_stdout(cb)
                .timeout(std::time::Duration::from_millis(700)),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        e2b_commands::CommandError::DeadlineExceeded { .. }
    ));
    assert_eq!(chunks.lock().unwrap().concat(), "z\u{FFFD}");
}
common::transport_cases!(trailing_incomplete_character_is_flushed_when_the_stream_errors: h2c, in_process);

async fn retained_text_holds_an_incomplete_character_until_the_end(via: Via) {
    let env = common::env_via(via).await;
    let h = env
        .commands
        .start(
            r"printf 'q\xe2\x82'; sleep 2; printf '\xac'",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    for _ in 0..100 {
        if h.stdout_bytes().len() == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(h.stdout_bytes().len(), 3);
    assert_eq!(
        h.stdout(),
        "q",
        "incomplete character held back while running"
    );
    assert_eq!(h.wait().await.unwrap().stdout, "q€");
}
common::transport_cases!(retained_text_holds_an_incomplete_character_until_the_end: h2c, in_process);
