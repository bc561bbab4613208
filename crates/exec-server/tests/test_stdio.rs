//! The binary over stdio, driven by rmcp's client, tools running in the embedded local envd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use common::*;
use serde_json::json;

#[tokio::test]
async fn exec_contract_over_stdio() {
    let c = stdio_client(&[], &[("SANDBOX_ID", "rust-stdio")]).await;
    let info = c.peer_info().unwrap();
    assert_eq!(
        info.meta.as_ref().unwrap().0["sandbox_id"],
        json!("rust-stdio")
    );

    let r = call(
        &c,
        "exec_command",
        json!({"cmd": "printf 'a\\000b'; sleep 0.1; printf e >&2; exit 42"}),
    )
    .await;
    assert_eq!(text(&r), "a\0be");
    assert_eq!(meta(&r, "exit_code"), json!(42));
    assert_eq!(meta(&r, "sandbox_id"), json!("rust-stdio"));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["exit_code"],
        json!(42)
    );

    let r = call(&c, "exec_command", json!({"cmd": "true"})).await;
    assert_eq!(text(&r), "");
    let r = call(
        &c,
        "exec_command",
        json!({"cmd": "sleep 10", "timeout": 0.5}),
    )
    .await;
    assert_eq!(meta(&r, "exit_code"), json!(124));
    assert_eq!(meta(&r, "timed_out"), json!(true));
    let r = call(&c, "exec_command", json!({"cmd": "kill -TERM $$"})).await;
    assert_eq!(meta(&r, "exit_code"), json!(143));
    assert_eq!(meta(&r, "signal"), json!(15));
    let r = call(&c, "execute", json!({"cmd": "nonexistent_cmd_e2b"})).await;
    assert_eq!(meta(&r, "exit_code"), json!(127));
    let r = call(
        &c,
        "exec_command",
        json!({"cmd": "head -c 3", "stdin": "x".repeat(1 << 20)}),
    )
    .await;
    assert_eq!(
        (text(&r), meta(&r, "exit_code")),
        ("xxx".to_owned(), json!(0))
    );
    let r = call(
        &c,
        "exec_command",
        json!({"cmd": "pwd", "cwd": "/nonexistent-e2b-dir"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(meta(&r, "exit_code"), json!(126));
    let r = call(&c, "exec_command", json!({"cmd": "true", "timeout": -1})).await;
    assert_eq!(r.is_error, Some(true));
    let r = call(
        &c,
        "exec_command",
        json!({"cmd": "true", "stdin": "unread"}),
    )
    .await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    assert_ne!(r.is_error, Some(true));
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn files_over_stdio() {
    let c = stdio_client(&["--max-chunk-bytes", "1000"], &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x/y.bin").to_string_lossy().into_owned();
    let data: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    for (i, chunk) in data.chunks(1000).enumerate() {
        // The destination appears only when the last chunk is in.
        assert!(
            !std::path::Path::new(&p).exists(),
            "a partial file was published"
        );
        let a = json!({"path": p, "content_base64": b64.encode(chunk), "offset": i * 1000, "total_size": data.len()});
        let r = call(&c, "upload_file", a).await;
        assert_eq!(text(&r), format!("Written {} bytes to {p}", chunk.len()));
        if i == 2 {
            assert_eq!(meta(&r, "complete"), json!(true));
            let sha = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&data));
            assert_eq!(meta(&r, "sha256"), json!(sha));
        }
    }
    let mut got = Vec::new();
    loop {
        let r = call(&c, "download_file", json!({"path": p, "offset": got.len()})).await;
        got.extend(b64.decode(text(&r)).unwrap());
        if meta(&r, "eof") == json!(true) {
            break;
        }
    }
    assert_eq!(got, data);
    let r = call(&c, "download_file", json!({"path": "relative"})).await;
    assert_eq!(meta(&r, "error"), json!("invalid_path"));
    let r = call(
        &c,
        "download_file",
        json!({"path": dir.path().join("nope").to_string_lossy()}),
    )
    .await;
    assert_eq!(meta(&r, "error"), json!("file_not_found"));
    let r = call(
        &c,
        "download_file",
        json!({"path": dir.path().to_string_lossy()}),
    )
    .await;
    assert_eq!(meta(&r, "error"), json!("is_directory"));
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn an_over_long_stdio_line_is_answered() {
    let c = stdio_client(&["--max-body-bytes", "10000"], &[]).await;
    let big = "A".repeat(40_000);
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        call(
            &c,
            "upload_file",
            json!({"path": "/tmp/e2b-too-long", "content_base64": big}),
        ),
    )
    .await
    .expect("no answer to an over-long line: the client would hang");
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("10000"), "{}", text(&r));
    assert!(!std::path::Path::new("/tmp/e2b-too-long").exists());
    // The session goes on.
    let r = call(&c, "exec_command", json!({"cmd": "echo on"})).await;
    assert_eq!(text(&r), "on\n");
    c.cancel().await.unwrap();
}
