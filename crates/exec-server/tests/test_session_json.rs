//! Sessions with JSON responses (`/mcp/session-json`, `--session-json`), driven over real HTTP
//! with plain reqwest: every POST answered with `application/json` unless a message precedes
//! the response, then SSE with nothing lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

const ACCEPT: &str = "application/json, text/event-stream";

async fn post(url: &str, sid: Option<&str>, body: Value) -> reqwest::Response {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("accept", ACCEPT)
        .json(&body);
    if let Some(sid) = sid {
        rb = rb.header("mcp-session-id", sid);
    }
    rb.send().await.unwrap()
}

fn content_type(r: &reqwest::Response) -> String {
    r.headers()["content-type"].to_str().unwrap().to_owned()
}

/// initialize + notifications/initialized at `url`; returns the session id.
async fn open_session(url: &str) -> String {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let r = post(url, None, init).await;
    assert_eq!(r.status(), 200);
    assert!(
        content_type(&r).starts_with("application/json"),
        "{}",
        content_type(&r)
    );
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], json!(1));
    assert!(v["result"]["serverInfo"]["sandbox_id"].is_string(), "{v}");
    let r = post(
        url,
        Some(&sid),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )
    .await;
    assert_eq!(r.status(), 202, "a notification passes through untouched");
    sid
}

async fn exec_json(url: &str, sid: &str, id: u64, cmd: &str) -> Value {
    let r = post(
        url,
        Some(sid),
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"exec_command","arguments":{"cmd":cmd}}}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(
        content_type(&r).starts_with("application/json"),
        "{}",
        content_type(&r)
    );
    r.json().await.unwrap()
}

#[tokio::test]
async fn session_json_endpoint_answers_json_and_keeps_the_session() {
    let srv = HttpServer::start(&[], &[]).await;
    let url = format!("{}/mcp/session-json", srv.base);
    let sid = open_session(&url).await;
    assert_eq!(srv.health().await["sessions"], json!(1));

    let v = exec_json(&url, &sid, 2, "echo hi; exit 3").await;
    assert_eq!(v["id"], json!(2));
    assert_eq!(v["result"]["content"][0]["text"], json!("hi\n"));
    assert_eq!(v["result"]["_meta"]["exit_code"], json!(3));
    let v = exec_json(&url, &sid, 3, "echo again").await;
    assert_eq!(v["result"]["content"][0]["text"], json!("again\n"));
    assert_eq!(v["result"]["_meta"]["exit_code"], json!(0));

    // The session is `/mcp`'s: the same id works there (SSE answers).
    let r = post(
        &srv.url(),
        Some(&sid),
        json!({"jsonrpc":"2.0","id":4,"method":"tools/list"}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(content_type(&r).starts_with("text/event-stream"));

    // A client that does not accept JSON never gets it (rmcp refuses such a POST).
    let r = reqwest::Client::new()
        .post(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .json(&json!({"jsonrpc":"2.0","id":5,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()
            .get("content-type")
            .is_none_or(|v| !v.to_str().unwrap().starts_with("application/json")),
        "{:?}",
        r.headers()
    );

    // An unknown session is still refused.
    let r = post(
        &url,
        Some("nope"),
        json!({"jsonrpc":"2.0","id":6,"method":"tools/list"}),
    )
    .await;
    assert!(r.status().is_client_error(), "{}", r.status());
}

#[tokio::test]
async fn progress_before_the_result_falls_back_to_sse_losing_nothing() {
    let srv = HttpServer::start(&["--progress-interval-ms", "10"], &[]).await;
    let url = format!("{}/mcp/session-json", srv.base);
    let sid = open_session(&url).await;
    let r = post(
        &url,
        Some(&sid),
        json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec_command","arguments":{"cmd":"echo early; sleep 0.5; echo late"},"_meta":{"progressToken":"p1"}}}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(
        content_type(&r).starts_with("text/event-stream"),
        "{}",
        content_type(&r)
    );
    let body = r.text().await.unwrap();
    let msgs: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        msgs.iter()
            .any(|m| m["method"] == json!("notifications/progress")
                && m["params"]["progressToken"] == json!("p1")),
        "{body}"
    );
    let last = msgs.last().unwrap();
    assert_eq!(last["id"], json!(7), "{body}");
    assert_eq!(last["result"]["content"][0]["text"], json!("early\nlate\n"));
    // And the session keeps answering in JSON.
    let v = exec_json(&url, &sid, 8, "echo after").await;
    assert_eq!(v["result"]["content"][0]["text"], json!("after\n"));
}

#[tokio::test]
async fn session_json_flag_applies_to_mcp_and_the_rmcp_client_still_works() {
    let srv = HttpServer::start(&[], &[("EXEC_SERVER_SESSION_JSON", "true")]).await;
    let sid = open_session(&srv.url()).await;
    let v = exec_json(&srv.url(), &sid, 2, "echo flag").await;
    assert_eq!(v["result"]["content"][0]["text"], json!("flag\n"));
    // rmcp's own client (accepts JSON) over the same endpoint.
    let c = srv.client().await;
    let r = call(&c, "exec_command", json!({"cmd": "echo rmcp"})).await;
    assert_eq!(text(&r), "rmcp\n");
    c.cancel().await.unwrap();
}
