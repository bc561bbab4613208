//! Through the real embedded envd daemon: the fake agent runs as a sandbox command started with
//! `start_streaming`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use agent_client_protocol::Client;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, InitializeRequest, NewSessionRequest,
    PromptRequest, StopReason, TextContent,
};
use common::{HANG_GUARD, alive, eventually_dead, fake, received, recv_json, request};
use e2b_acp::{AcpError, AcpOptions, AcpTransport, CommandLine, Commands, Direction};
use e2b_commands::{EnvdConnection, EnvdEndpoint};
use serde_json::{Value, json};

async fn sandbox() -> (e2b_test_support::TestEnvd, Commands) {
    let envd = e2b_test_support::spawn_envd().await;
    let mut ep = EnvdEndpoint::new(envd.url());
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    let commands = Commands::new(EnvdConnection::new(ep).unwrap());
    (envd, commands)
}

async fn start(c: &Commands, args: &[&str], opts: AcpOptions) -> AcpTransport {
    e2b_acp::start_acp_transport(
        c,
        CommandLine::exec(fake(), args.iter().map(|s| s.to_string())),
        opts,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn rewrite_interception_junk_and_utf8_through_the_daemon() {
    let (_envd, c) = sandbox().await;
    let t = start(&c, &[], AcpOptions::new()).await;
    let (r, _) = request(
        &t,
        1,
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}}),
    )
    .await;
    assert_eq!(
        r["result"]["_meta"]["receivedClientCapabilities"],
        json!({"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false})
    );
    let msg = "{\"jsonrpc\":\"2.0\",\"method\":\"_u\",\"params\":{\"t\":\"😀\"}}\n";
    let cut = msg.find('😀').unwrap() + 2;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let (_, before) = request(
        &t,
        2,
        "_fake/do",
        json!({"actions":[
            {"request": {"id": 77, "method": "fs/read_text_file", "params": {}}},
            {"blank_lines": 2}, {"emit": "junk\n"},
            {"emit_hex_parts": [hex(&msg.as_bytes()[..cut]), hex(&msg.as_bytes()[cut..])], "delay_ms": 50}
        ]}),
    )
    .await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["params"]["t"], json!("😀"));
    let lines = received(&t, 3).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains(r#""id":77,"error":{"code":-32601"#)),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("-32700")), "{lines:?}");
    t.stop(Duration::from_secs(5)).await.unwrap();
    let exit = t.wait().await.unwrap();
    assert!(exit.success() && !exit.killed, "{exit:?}");
}

#[tokio::test]
async fn oversize_stderr_flood_and_failed_exit_through_the_daemon() {
    let (_envd, c) = sandbox().await;
    let t = start(
        &c,
        &["--actions", r#"[{"stderr": 10485760}]"#],
        AcpOptions::new().max_message_bytes(100_000),
    )
    .await;
    let (r, _) = request(&t, 1, "_fake/echo", json!({"ok": 1})).await;
    assert_eq!(r["result"], json!({"ok": 1}));
    assert!(t.stderr_tail().len() <= 64 * 1024);
    t.send_json(
        &json!({"jsonrpc":"2.0","id":2,"method":"_fake/do","params":{"actions":[
        {"notify":{"method":"_first"}}, {"big_line": 200_000}, {"sleep_ms": 30000}]}}),
    )
    .await
    .unwrap();
    assert_eq!(recv_json(&t).await["method"], json!("_first"));
    let err = tokio::time::timeout(Duration::from_secs(5), t.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            AcpError::MessageTooLarge {
                direction: Direction::FromAgent,
                ..
            }
        ),
        "{err}"
    );
    let w = tokio::time::timeout(Duration::from_secs(5), t.wait())
        .await
        .unwrap();
    assert!(matches!(w, Err(AcpError::MessageTooLarge { .. })), "{w:?}");

    let t = start(&c, &[], AcpOptions::new()).await;
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[{"stderr": 3}, {"exit": 3}]}}))
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), t.wait())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, AcpError::AgentFailed { code: Some(3), .. }),
        "{err}"
    );
}

// A sandbox command's exit is known only after all its output went through the output callbacks:
// with the read queue full, the reader blocks those callbacks, so kill() must release it or
// wait() never returns. (A local child's wait does not depend on its stdout: this needs the
// daemon.)
#[tokio::test]
async fn kill_with_a_full_read_queue_lets_the_exit_be_seen_through_the_daemon() {
    let (_envd, c) = sandbox().await;
    let t = start(&c, &[], AcpOptions::new().read_queue_depth(4)).await;
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[{"flood":{"count":20000,"size":2000}}]}}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let written: usize = t
        .stderr_tail()
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("flooded ").and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    assert!(written < 2000, "agent was not paused: wrote {written}");
    t.kill().await.unwrap();
    let exit = tokio::time::timeout(HANG_GUARD, t.wait())
        .await
        .expect("the exit of an agent killed with a full read queue was never seen")
        .unwrap();
    assert!(exit.killed);
    eventually_dead(t.pid()).await;
    // what was queued stays readable, in order, then the stream ends
    let mut n = 0;
    while let Some(m) = tokio::time::timeout(Duration::from_secs(2), t.recv())
        .await
        .unwrap()
    {
        let v: Value = serde_json::from_slice(&m.unwrap()).unwrap();
        assert_eq!(v["params"]["i"], json!(n));
        n += 1;
    }
    assert!(n <= 4, "{n}");
}

#[tokio::test]
async fn stop_kills_an_agent_ignoring_eof_and_drop_kills_through_the_daemon() {
    let (_envd, c) = sandbox().await;
    let t = start(&c, &["--ignore-eof"], AcpOptions::new()).await;
    request(&t, 1, "_fake/echo", json!({})).await;
    // `Ok` (not `StopTimeout`) means the exit was seen within the stop's own 1 s deadline.
    tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_millis(1000)))
        .await
        .expect("stop hung on an agent that ignores EOF")
        .unwrap();
    assert!(t.wait().await.unwrap().killed);
    eventually_dead(t.pid()).await;

    let t = start(&c, &[], AcpOptions::new()).await;
    request(&t, 1, "_fake/echo", json!({})).await;
    let pid = t.pid();
    assert!(alive(pid));
    drop(t);
    eventually_dead(pid).await;
}

#[tokio::test]
async fn official_client_full_cycle_through_the_daemon() {
    let (_envd, c) = sandbox().await;
    let agent = e2b_acp::connect_acp_agent(
        &c,
        CommandLine::exec(fake(), Vec::<String>::new()),
        Client.v1().name("sandbox-test"),
        AcpOptions::new(),
    )
    .await
    .unwrap();
    let cx = agent.connection();
    let init = cx
        .send_request(
            InitializeRequest::new(ProtocolVersion::V1).client_capabilities(
                ClientCapabilities::new()
                    .fs(FileSystemCapabilities::new()
                        .read_text_file(true)
                        .write_text_file(true))
                    .terminal(true),
            ),
        )
        .block_task()
        .await
        .unwrap();
    let seen: Value = init.meta.unwrap()["receivedClientCapabilities"].clone();
    assert_eq!(seen["terminal"], json!(false));
    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    let r = cx
        .send_request(PromptRequest::new(
            s.session_id,
            vec![ContentBlock::Text(TextContent::new("hi"))],
        ))
        .block_task()
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    agent.stop(Duration::from_secs(5)).await.unwrap();
    assert!(agent.wait().await.unwrap().success());
}

#[tokio::test]
async fn through_the_e2b_facade_sandbox_local() {
    // `Sandbox::local()` is isolated: the fake agent's directory is shown read-only inside.
    let dir = std::path::Path::new(fake())
        .parent()
        .unwrap()
        .display()
        .to_string();
    let sandbox = e2b::Sandbox::local_with_options(
        e2b::LocalOptions::default()
            .network(e2b::LocalNetwork::None)
            .mount_ro(dir),
    )
    .await
    .unwrap_or_else(|e| panic!("the isolated local sandbox did not start: {e}"));
    let agent = e2b_acp::connect_acp_agent(
        &sandbox,
        CommandLine::exec(fake(), Vec::<String>::new()),
        Client.v1(),
        AcpOptions::new(),
    )
    .await
    .unwrap();
    let init = agent
        .connection()
        .send_request(
            InitializeRequest::new(ProtocolVersion::V1).client_capabilities(
                ClientCapabilities::new()
                    .fs(FileSystemCapabilities::new().read_text_file(true))
                    .terminal(true),
            ),
        )
        .block_task()
        .await
        .unwrap();
    assert_eq!(
        init.meta.unwrap()["receivedClientCapabilities"]["fs"]["readTextFile"],
        json!(false)
    );
    let pid = agent.pid();
    drop(agent);
    // The pid is the sandbox's own (its PID namespace): look for it inside.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = sandbox
            .commands()
            .run(
                format!("test -e /proc/{pid} && echo alive || echo gone"),
                e2b::CommandOptions::new(),
            )
            .await
            .unwrap();
        if out.stdout.trim() == "gone" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent (pid {pid} in the sandbox) outlived its dropped transport"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sandbox.kill().await.unwrap();
}

/// A TCP proxy to `target` whose live connections can be cut while it keeps accepting new ones
/// (the daemon and the agent live on; only the streams break).
struct CuttableProxy {
    url: String,
    conns: std::sync::Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    _accept: tokio::task::JoinHandle<()>,
}

impl CuttableProxy {
    async fn start(target: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let conns = std::sync::Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let set = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                set.lock().unwrap().spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self {
            url,
            conns,
            _accept: accept,
        }
    }

    fn cut(&self) {
        self.conns.lock().unwrap().abort_all();
    }
}

async fn commands_for(url: String, envd: &e2b_test_support::TestEnvd) -> Commands {
    let mut ep = EnvdEndpoint::new(url);
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    Commands::new(EnvdConnection::new(ep).unwrap())
}

// Issue 15: a failed output stream is not an exit. The agent keeps running in the sandbox after
// the stream breaks, so stop() must kill it.
#[tokio::test]
async fn stop_kills_an_agent_whose_stream_was_cut() {
    let envd = e2b_test_support::spawn_envd().await;
    let proxy = CuttableProxy::start(envd.addr()).await;
    let c = commands_for(proxy.url.clone(), &envd).await;
    let t = start(&c, &[], AcpOptions::new()).await;
    request(&t, 1, "_fake/echo", json!({})).await;
    let pid = t.pid();
    proxy.cut();
    // the stream failure reaches the transport
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match t.recv().await {
                Some(Ok(_)) => continue,
                other => break other,
            }
        }
    })
    .await
    .expect("the cut stream ends the transport's input");
    assert!(matches!(end, Some(Err(_)) | None), "{end:?}");
    assert!(alive(pid), "the agent outlives its stream");
    t.stop(Duration::from_secs(5)).await.unwrap();
    eventually_dead(pid).await;
}

// Issue 15: the same for drop.
#[tokio::test]
async fn drop_kills_an_agent_whose_stream_was_cut() {
    let envd = e2b_test_support::spawn_envd().await;
    let proxy = CuttableProxy::start(envd.addr()).await;
    let c = commands_for(proxy.url.clone(), &envd).await;
    let t = start(&c, &[], AcpOptions::new()).await;
    request(&t, 1, "_fake/echo", json!({})).await;
    let pid = t.pid();
    proxy.cut();
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(_)) = t.recv().await {}
    })
    .await
    .expect("the cut stream ends the transport's input");
    // wait() reports the broken stream, not an exit
    assert!(t.wait().await.is_err());
    assert!(alive(pid));
    drop(t);
    eventually_dead(pid).await;
}

// Issue 15: stop() on an envd without stdin close (0.5.1) reports Unsupported and still ends the
// agent.
#[tokio::test]
async fn stop_on_envd_0_5_1_reports_unsupported_and_kills() {
    let envd = e2b_test_support::spawn_envd_with(|mut c| {
        c.envd_version = "0.5.1".into();
        c
    })
    .await;
    let mut ep = EnvdEndpoint::new(envd.url()).envd_version("0.5.1".parse().unwrap());
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    let c = Commands::new(EnvdConnection::new(ep).unwrap());
    let t = start(&c, &[], AcpOptions::new()).await;
    request(&t, 1, "_fake/echo", json!({})).await;
    let pid = t.pid();
    let err = t.stop(Duration::from_secs(5)).await.unwrap_err();
    match &err {
        AcpError::Unsupported {
            required, actual, ..
        } => {
            assert_eq!(required, "0.5.2");
            assert_eq!(actual, "0.5.1");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(err.to_string().contains("0.5.2"), "{err}");
    eventually_dead(pid).await;
    assert!(t.wait().await.unwrap().killed);
}

// Issue 15: kill() says whether it killed.
#[tokio::test]
async fn kill_returns_whether_it_killed_through_the_daemon() {
    let (_envd, c) = sandbox().await;
    let t = start(&c, &[], AcpOptions::new()).await;
    request(&t, 1, "_fake/echo", json!({})).await;
    assert!(t.kill().await.unwrap(), "a running agent is killed");
    assert!(t.wait().await.unwrap().killed);
    assert!(
        !t.kill().await.unwrap(),
        "an agent that exited is not killed again"
    );

    let t = start(&c, &["--actions", r#"[{"exit":0}]"#], AcpOptions::new()).await;
    assert!(t.wait().await.unwrap().success());
    assert!(!t.kill().await.unwrap(), "an agent that exited on its own");
}
