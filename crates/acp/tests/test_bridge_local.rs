//! The bridge driven by the official Rust ACP client over in-memory pipes; the agent behind it
//! is our fake agent as a local child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, InitializeRequest, NewSessionRequest,
    PromptRequest, ReadTextFileRequest, ReadTextFileResponse, StopReason, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client, on_receive_request};
use common::fake;
use e2b_acp::{AcpOptions, AcpTransport, LocalProcess, run_bridge};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

#[tokio::test]
async fn rust_client_through_the_bridge() {
    let (client_io, bridge_io) = tokio::io::duplex(64 * 1024);
    let (bridge_in, bridge_out) = tokio::io::split(bridge_io);
    let transport = AcpTransport::start(
        LocalProcess::spawn(fake(), Vec::<String>::new()).unwrap(),
        &AcpOptions::new(),
    )
    .unwrap();
    let pid = transport.pid();
    let bridge = tokio::spawn(run_bridge(
        bridge_in,
        bridge_out,
        transport,
        Duration::from_secs(5),
    ));

    let (client_in, client_out) = tokio::io::split(client_io);
    let fs_calls = Arc::new(AtomicUsize::new(0));
    let f2 = fs_calls.clone();
    Client
        .v1()
        .on_receive_request(
            async move |_r: ReadTextFileRequest, responder, _cx| {
                f2.fetch_add(1, Ordering::SeqCst);
                responder.respond(ReadTextFileResponse::new("host secret"))
            },
            on_receive_request!(),
        )
        .connect_with(
            ByteStreams::new(client_out.compat_write(), client_in.compat()),
            async |cx: ConnectionTo<Agent>| {
                let init = cx
                    .send_request(InitializeRequest::new(ProtocolVersion::V1).client_capabilities(
                        ClientCapabilities::new()
                            .fs(FileSystemCapabilities::new().read_text_file(true).write_text_file(true))
                            .terminal(true),
                    ))
                    .block_task()
                    .await?;
                let seen = init.meta.unwrap()["receivedClientCapabilities"].clone();
                assert_eq!(seen["fs"]["readTextFile"], false);
                assert_eq!(seen["fs"]["writeTextFile"], false);
                assert_eq!(seen["terminal"], false);
                let s = cx.send_request(NewSessionRequest::new("/tmp")).block_task().await?;
                let r = cx
                    .send_request(PromptRequest::new(
                        s.session_id,
                        vec![ContentBlock::Text(TextContent::new(
                            r#"do:[{"request":{"id":9,"method":"fs/read_text_file","params":{"sessionId":"fake-1","path":"/etc/passwd"}}}]"#,
                        ))],
                    ))
                    .block_task()
                    .await?;
                assert_eq!(r.stop_reason, StopReason::EndTurn);
                Ok(())
            },
        )
        .await
        .unwrap();
    assert_eq!(fs_calls.load(Ordering::SeqCst), 0);
    // the client closed its side: the bridge stops the agent and returns its exit
    let exit = tokio::time::timeout(Duration::from_secs(10), bridge)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    common::eventually_dead(pid).await;
}

#[tokio::test]
async fn bridge_returns_when_the_agent_exits() {
    let (client_io, bridge_io) = tokio::io::duplex(1024);
    let (bridge_in, bridge_out) = tokio::io::split(bridge_io);
    let p = LocalProcess::spawn(fake(), ["--actions", r#"[{"exit":2}]"#]).unwrap();
    let transport = AcpTransport::start(p, &AcpOptions::new()).unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        run_bridge(bridge_in, bridge_out, transport, Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert!(
        matches!(r, Err(e2b_acp::AcpError::AgentFailed { code: Some(2), .. })),
        "{r:?}"
    );
    drop(client_io);
}

// Issue 15: at the editor's EOF the bridge stops the agent; one that ignores the EOF is killed
// when the stop's grace is over, and the bridge returns. (The stop used to be abandoned as soon
// as the agent's output ended, and the bridge then waited forever for an exit.)
#[tokio::test]
async fn bridge_kills_an_agent_that_ignores_eof_and_returns() {
    let (client_io, bridge_io) = tokio::io::duplex(1024);
    let (bridge_in, bridge_out) = tokio::io::split(bridge_io);
    let p = LocalProcess::spawn(fake(), ["--ignore-eof"]).unwrap();
    let transport = AcpTransport::start(p, &AcpOptions::new()).unwrap();
    let pid = transport.pid();
    let bridge = tokio::spawn(run_bridge(
        bridge_in,
        bridge_out,
        transport,
        Duration::from_secs(1),
    ));
    drop(client_io);
    let exit = tokio::time::timeout(Duration::from_secs(10), bridge)
        .await
        .expect("the bridge returns once the stop's grace is over")
        .unwrap()
        .unwrap();
    assert!(exit.killed, "{exit:?}");
    common::eventually_dead(pid).await;
}
