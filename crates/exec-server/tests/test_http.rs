//! The binary over Streamable HTTP, driven by rmcp's client, tools in the embedded local envd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn http_sessions_health_and_ids() {
    let srv = HttpServer::start(&[], &[]).await;
    let h = srv.health().await;
    assert_eq!(h["status"], json!("ok"));
    let sid = h["sandbox_id"].as_str().unwrap().to_owned();
    assert!(sid.starts_with("local-"), "{sid}");

    let c = srv.client().await;
    let info = c.peer_info().unwrap();
    assert_eq!(info.meta.as_ref().unwrap().0["sandbox_id"], json!(sid));
    assert_eq!(srv.health().await["sessions"], json!(1));
    let r = call(&c, "exec_command", json!({"cmd": "echo hi; exit 3"})).await;
    assert_eq!(text(&r), "hi\n");
    assert_eq!(meta(&r, "exit_code"), json!(3));
    assert_eq!(meta(&r, "sandbox_id"), json!(sid));
    let tools = c.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 15);
    c.cancel().await.unwrap();
}

#[tokio::test]
async fn http_json_mode_and_auth() {
    let srv = HttpServer::start(&["--json-response"], &[("API_KEY", "k")]).await;
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let r = http
        .post(srv.url())
        .json(&init)
        .header("accept", "application/json, text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .post(srv.url())
        .json(&init)
        .header("accept", "application/json, text/event-stream")
        .header("x-api-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let v: serde_json::Value = r.json().await.unwrap();
    let sid = srv.health().await["sandbox_id"].clone();
    assert_eq!(v["result"]["serverInfo"]["sandbox_id"], sid);
    assert_eq!(v["result"]["_meta"]["sandbox_id"], sid);
}
