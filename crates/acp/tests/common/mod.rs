#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::Duration;

use e2b_acp::{AcpOptions, AcpTransport, LocalProcess};
use serde_json::{Value, json};

/// How long a test waits for something that must happen before it fails as hung: a guard against
/// hangs, not a speed check (speed is for the benchmarks).
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// The fake ACP agent (in `e2b-test-support`, built on first use).
pub fn fake() -> &'static str {
    e2b_test_support::fake_acp_agent()
        .to_str()
        .expect("a UTF-8 path to the fake agent")
}

pub fn start(args: &[&str], opts: AcpOptions) -> AcpTransport {
    let p = LocalProcess::spawn(fake(), args).expect("spawn fake agent");
    AcpTransport::start(p, &opts).expect("start transport")
}

pub async fn recv_json(t: &AcpTransport) -> Value {
    tokio::time::timeout(Duration::from_secs(10), t.recv_json())
        .await
        .expect("timed out waiting for a message")
        .expect("stream ended")
        .expect("error instead of a message")
}

/// Receive until the response with this id, returning it and the messages before it.
pub async fn response(t: &AcpTransport, id: u64) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let v = recv_json(t).await;
        if v.get("id") == Some(&json!(id)) && v.get("method").is_none() {
            return (v, before);
        }
        before.push(v);
    }
}

pub async fn request(
    t: &AcpTransport,
    id: u64,
    method: &str,
    params: Value,
) -> (Value, Vec<Value>) {
    t.send_json(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
        .await
        .expect("send");
    response(t, id).await
}

pub async fn do_actions(t: &AcpTransport, id: u64, actions: Value) -> Vec<Value> {
    request(t, id, "_fake/do", json!({"actions": actions}))
        .await
        .1
}

pub async fn received(t: &AcpTransport, id: u64) -> Vec<String> {
    let (r, _) = request(t, id, "_fake/received", json!({})).await;
    r["result"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

pub fn alive(pid: u32) -> bool {
    // a zombie counts as dead
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')),
        Err(_) => false,
    }
}

pub async fn eventually_dead(pid: u32) {
    for _ in 0..100 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("process {pid} still alive");
}
