//! The official ACP client (agent-client-protocol 5.x) over our transport, fake agent as a local
//! child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, InitializeRequest, NewSessionRequest,
    PromptRequest, ReadTextFileRequest, ReadTextFileResponse, SessionNotification, StopReason,
    TextContent, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{Client, on_receive_notification, on_receive_request};
use common::{HANG_GUARD, fake};
use e2b_acp::{AcpAgent, AcpError, AcpOptions, LocalProcess};

#[derive(Default)]
struct Counters {
    updates: AtomicUsize,
    fs_calls: AtomicUsize,
    texts: std::sync::Mutex<Vec<String>>,
}

async fn connect(args: &[&str], opts: AcpOptions, c: Arc<Counters>) -> AcpAgent {
    let (c1, c2, c3) = (c.clone(), c.clone(), c.clone());
    let client = Client
        .v1()
        .name("e2b-acp-test")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                c1.updates.fetch_add(1, Ordering::SeqCst);
                if let agent_client_protocol::v1::schema::SessionUpdate::AgentMessageChunk(chunk) =
                    n.update
                    && let ContentBlock::Text(t) = chunk.content
                {
                    c1.texts.lock().unwrap().push(t.text);
                }
                Ok(())
            },
            on_receive_notification!(),
        )
        .on_receive_request(
            async move |_r: ReadTextFileRequest, responder, _cx| {
                c2.fs_calls.fetch_add(1, Ordering::SeqCst);
                responder.respond(ReadTextFileResponse::new("host secret"))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |_r: WriteTextFileRequest, responder, _cx| {
                c3.fs_calls.fetch_add(1, Ordering::SeqCst);
                responder.respond(WriteTextFileResponse::new())
            },
            on_receive_request!(),
        );
    let p = LocalProcess::spawn(fake(), args).unwrap();
    AcpAgent::connect(p, client, opts).await.unwrap()
}

fn init_all_caps() -> InitializeRequest {
    InitializeRequest::new(ProtocolVersion::V1).client_capabilities(
        ClientCapabilities::new()
            .fs(FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true))
            .terminal(true),
    )
}

fn text(s: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(s))
}

#[tokio::test]
async fn initialize_session_prompt_with_caps_forced_off() {
    let c = Arc::new(Counters::default());
    let agent = connect(&[], AcpOptions::new(), c.clone()).await;
    let cx = agent.connection();
    let init = cx.send_request(init_all_caps()).block_task().await.unwrap();
    let seen = init.meta.unwrap()["receivedClientCapabilities"].clone();
    assert_eq!(seen["fs"]["readTextFile"], false);
    assert_eq!(seen["fs"]["writeTextFile"], false);
    assert_eq!(seen["terminal"], false);
    assert_eq!(init.agent_info.unwrap().name, "fake-acp-agent");

    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    let r = cx
        .send_request(PromptRequest::new(
            s.session_id.clone(),
            vec![text("hello"), text("world")],
        ))
        .block_task()
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    // updates arrive before the prompt response, in order
    assert_eq!(
        *c.texts.lock().unwrap(),
        vec!["hello".to_owned(), "world".to_owned()]
    );

    // agent fs requests never reach the registered handlers
    let r = cx
        .send_request(PromptRequest::new(
            s.session_id.clone(),
            vec![text(r#"do:[{"request":{"id":9,"method":"fs/read_text_file","params":{"sessionId":"fake-1","path":"/etc/passwd"}}},{"request":{"id":10,"method":"fs/write_text_file","params":{"sessionId":"fake-1","path":"/x","content":"y"}}},{"notify":{"method":"_unknown/notification"}}]"#), text("after")],
        ))
        .block_task()
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(c.fs_calls.load(Ordering::SeqCst), 0);
    agent.stop(Duration::from_secs(5)).await.unwrap();
    assert!(agent.wait().await.unwrap().success());
}

#[tokio::test]
async fn oversized_agent_message_fails_the_connection_with_a_typed_error() {
    let c = Arc::new(Counters::default());
    let agent = connect(&[], AcpOptions::new().max_message_bytes(10_000), c).await;
    let cx = agent.connection().clone();
    cx.send_request(init_all_caps()).block_task().await.unwrap();
    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        cx.send_request(PromptRequest::new(
            s.session_id,
            vec![text(r#"do:[{"big_line":20000},{"sleep_ms":30000}]"#)],
        ))
        .block_task(),
    )
    .await
    .unwrap();
    let err = r.unwrap_err();
    // the SDK fails the pending request because the transport ended the connection
    assert!(
        agent_client_protocol::is_connection_terminated(&err),
        "{err:?}"
    );
    assert!(
        matches!(
            cx.termination(),
            Some(agent_client_protocol::ConnectionTermination::TransportError(_))
        ),
        "{:?}",
        cx.termination()
    );
    assert!(
        agent
            .transport_error()
            .is_some_and(|e| e.is_message_too_large())
    );
    let w = tokio::time::timeout(Duration::from_secs(5), agent.wait())
        .await
        .unwrap();
    assert!(matches!(w, Err(AcpError::MessageTooLarge { .. })), "{w:?}");
}

#[tokio::test]
async fn oversized_outgoing_request_fails_alone() {
    let c = Arc::new(Counters::default());
    let agent = connect(&[], AcpOptions::new().max_message_bytes(10_000), c).await;
    let cx = agent.connection().clone();
    cx.send_request(init_all_caps()).block_task().await.unwrap();
    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    let big = "x".repeat(20_000);
    let err = tokio::time::timeout(
        Duration::from_secs(5),
        cx.send_request(PromptRequest::new(s.session_id.clone(), vec![text(&big)]))
            .block_task(),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(
        err.code,
        agent_client_protocol::ErrorCode::INTERNAL_ERROR,
        "{err:?}"
    );
    let data = err.data.clone().unwrap_or_default();
    assert_eq!(data["reason"], e2b_acp::LOCAL_REFUSAL_TOO_LARGE, "{err:?}");
    assert_eq!(data["limit"], 10_000, "{err:?}");
    // the connection is still usable
    let r = cx
        .send_request(PromptRequest::new(s.session_id, vec![text("small")]))
        .block_task()
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
}

#[tokio::test]
async fn agent_crash_fails_pending_requests_promptly() {
    let c = Arc::new(Counters::default());
    let agent = connect(&[], AcpOptions::new(), c).await;
    let cx = agent.connection().clone();
    cx.send_request(init_all_caps()).block_task().await.unwrap();
    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    // The agent answers nothing: only its exit can fail the request before the guard.
    let r = tokio::time::timeout(
        HANG_GUARD,
        cx.send_request(PromptRequest::new(
            s.session_id,
            vec![text(r#"do:[{"stderr":5},{"exit":1}]"#)],
        ))
        .block_task(),
    )
    .await
    .expect("a pending request outlived the agent's crash");
    assert!(r.is_err(), "{r:?}");
    assert!(matches!(
        agent.wait().await,
        Err(AcpError::AgentFailed { code: Some(1), .. })
    ));
}

#[tokio::test]
async fn out_of_order_responses_are_routed() {
    use agent_client_protocol::UntypedMessage;
    let c = Arc::new(Counters::default());
    let agent = connect(&[], AcpOptions::new(), c).await;
    let cx = agent.connection().clone();
    cx.send_request(init_all_caps()).block_task().await.unwrap();
    let slow = cx
        .send_request(
            UntypedMessage::new("_fake/echo", serde_json::json!({"delay_ms": 300, "n": 1}))
                .unwrap(),
        )
        .block_task();
    let fast = cx
        .send_request(UntypedMessage::new("_fake/echo", serde_json::json!({"n": 2})).unwrap())
        .block_task();
    let (slow, fast) = tokio::join!(slow, fast);
    assert_eq!(slow.unwrap()["n"], 1);
    assert_eq!(fast.unwrap()["n"], 2);
}

// Issue 15: a connect dropped mid-start kills what it started (the driver task used to keep
// the transport, and so the agent, alive).
#[tokio::test]
async fn dropping_connect_mid_start_kills_the_agent() {
    let p = LocalProcess::spawn(fake(), &[] as &[&str]).unwrap();
    let pid = e2b_acp::AgentProcess::pid(&p);
    let fut = AcpAgent::connect(p, Client.v1(), AcpOptions::new());
    let mut fut = Box::pin(fut);
    // One poll: the transport and the driver task are started, the connection is not handed
    // out yet (the driver has not run: this runtime is single-threaded and we do not yield).
    assert!(futures::poll!(fut.as_mut()).is_pending());
    assert!(common::alive(pid));
    drop(fut);
    common::eventually_dead(pid).await;
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn flooded(tail: &str) -> u64 {
    tail.lines()
        .rev()
        .find_map(|l| l.strip_prefix("flooded ").and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

// Issue 15: the official crate reads its input eagerly into an unbounded queue; our flow control
// bounds what it holds. The agent floods 80 MB of notifications while the client's handler is
// paused: the agent is paused too, this process's memory stays flat, and once the handler
// resumes every notification arrives, in order.
#[tokio::test]
async fn a_paused_client_pauses_the_agent_and_loses_nothing() {
    use agent_client_protocol::UntypedMessage;
    const COUNT: u64 = 2_000;
    const SIZE: u64 = 40_000;
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let out_of_order = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, o2) = (seen.clone(), out_of_order.clone());
    let client = Client.v1().on_receive_notification(
        async move |n: UntypedMessage, _cx| {
            if n.method() == "_flood" {
                let mut gate = gate_rx.clone();
                let _ = gate.wait_for(|open| *open).await;
                if n.params()["i"].as_u64() != Some(s2.load(Ordering::SeqCst)) {
                    o2.store(true, Ordering::SeqCst);
                }
                s2.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        },
        on_receive_notification!(),
    );
    let rss_before = rss_kib();
    let flood = format!(r#"[{{"flood":{{"count":{COUNT},"size":{SIZE}}}}}]"#);
    let p = LocalProcess::spawn(fake(), ["--actions", flood.as_str()]).unwrap();
    let opts = AcpOptions::new().read_queue_bytes(1024 * 1024);
    let agent = AcpAgent::connect(p, client, opts).await.unwrap();

    // Wait until the agent stops making progress (it blocks on a full stdout pipe).
    let mut last = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = flooded(&agent.stderr_tail());
        if now == last && now > 0 {
            break;
        }
        last = now;
    }
    let written = flooded(&agent.stderr_tail());
    let grown_mib = rss_kib().saturating_sub(rss_before) / 1024;
    assert!(
        written < COUNT / 10 && grown_mib < 32,
        "the agent was not paused: it wrote {written} of {COUNT} messages and this process grew \
         by {grown_mib} MiB while the client was paused"
    );
    assert!(seen.load(Ordering::SeqCst) <= 1);

    gate_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while seen.load(Ordering::SeqCst) < COUNT {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "only {} of {COUNT} notifications arrived after resuming",
            seen.load(Ordering::SeqCst)
        )
    });
    assert!(
        !out_of_order.load(Ordering::SeqCst),
        "notifications out of order"
    );
    agent.kill().await.unwrap();
}
