//! A polled watcher (`CreateWatcher`) keeps a bounded buffer: when events are not collected in
//! time it fails with `resource_exhausted` instead of growing. (Own test binary: it sets
//! `E2B_ENVD_WATCHER_BUFFER_EVENTS` for the daemon in this process.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use serde_json::{Value, json};

async fn unary(url: &str, token: &str, method: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}/filesystem.Filesystem/{method}"))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_is_an_error() {
    // SAFETY: set before the daemon starts; no other thread reads the environment yet.
    unsafe { std::env::set_var("E2B_ENVD_WATCHER_BUFFER_EVENTS", "500") };
    let envd = e2b_test_support::spawn_envd().await;
    let (url, token) = (envd.url(), envd.access_token().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (s, v) = unary(&url, &token, "CreateWatcher", json!({"path": dir.path()})).await;
    assert_eq!(s, 200);
    let id = v["watcherId"].as_str().unwrap().to_string();
    // Below the limit, events are delivered.
    for i in 0..100 {
        std::fs::File::create(dir.path().join(format!("a{i}"))).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = unary(&url, &token, "GetWatcherEvents", json!({"watcherId": id})).await;
    assert_eq!(s, 200);
    assert_eq!(v["events"].as_array().unwrap().len(), 100);
    // Above it, the watcher fails and says why.
    let d = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        for i in 0..1000 {
            std::fs::File::create(d.join(format!("b{i}"))).unwrap();
        }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = unary(&url, &token, "GetWatcherEvents", json!({"watcherId": id})).await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(v["code"], "resource_exhausted");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("overflowed (500 events"),
        "{v}"
    );
    // It stays failed until removed; the daemon keeps serving.
    let (_, v) = unary(&url, &token, "GetWatcherEvents", json!({"watcherId": id})).await;
    assert_eq!(v["code"], "resource_exhausted");
    let (s, _) = unary(&url, &token, "RemoveWatcher", json!({"watcherId": id})).await;
    assert_eq!(s, 200);
    let (s, _) = unary(&url, &token, "Stat", json!({"path": dir.path()})).await;
    assert_eq!(s, 200);
}
