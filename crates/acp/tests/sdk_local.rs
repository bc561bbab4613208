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
use common::FAKE;
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
    let p = LocalProcess::spawn(FAKE, args).unwrap();
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
async fn nothing_is_dispatched_after_kill() {
    let c = Arc::new(Counters::default());
    let agent = connect(&[], AcpOptions::new(), c.clone()).await;
    let cx = agent.connection().clone();
    cx.send_request(init_all_caps()).block_task().await.unwrap();
    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    cx.send_request(PromptRequest::new(
        s.session_id,
        vec![text(r#"do:[{"spam_ms":1}]"#)],
    ))
    .block_task()
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(c.updates.load(Ordering::SeqCst) > 0);
    agent.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let n = c.updates.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.updates.load(Ordering::SeqCst), n);
    assert_eq!(c.fs_calls.load(Ordering::SeqCst), 0);
    assert!(agent.wait().await.unwrap().killed);
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
    assert!(format!("{err:?}").contains("transport_error"), "{err:?}");
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
    assert!(format!("{err:?}").contains("exceeds the limit"), "{err:?}");
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
    let t0 = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        cx.send_request(PromptRequest::new(
            s.session_id,
            vec![text(r#"do:[{"stderr":5},{"exit":1}]"#)],
        ))
        .block_task(),
    )
    .await
    .unwrap();
    assert!(r.is_err());
    assert!(t0.elapsed() < Duration::from_secs(2));
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
    let p = LocalProcess::spawn(FAKE, &[] as &[&str]).unwrap();
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
