//! Real third-party ACP agents, run inside the sandbox (the real embedded daemon), offline:
//! the ACP Python SDK's echo agent (full cycle) and Gemini CLI (`gemini --acp`, initialize and
//! session/new with a dummy key); plus the bridge driven by the Rust and Python SDK clients.
//!
//! The agents are installed by `scripts/install-acp-agents` into `$ACP_AGENTS_DIR`
//! (default `/tmp/acp-agents`). A missing agent FAILS the test, naming the script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, InitializeRequest, NewSessionRequest,
    PromptRequest, SessionNotification, SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client, on_receive_notification};
use e2b_acp::{AcpOptions, CommandLine, Commands};
use e2b_commands::{EnvdConnection, EnvdEndpoint};
use serde_json::Value;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

fn agents_dir() -> PathBuf {
    PathBuf::from(std::env::var("ACP_AGENTS_DIR").unwrap_or_else(|_| "/tmp/acp-agents".to_owned()))
}

fn require(path: &Path, what: &str) -> String {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run `scripts/install-acp-agents` (ACP_AGENTS_DIR={})",
        path.display(),
        agents_dir().display()
    );
    path.display().to_string()
}

fn python() -> String {
    require(
        &agents_dir().join("venv/bin/python"),
        "the ACP Python SDK venv",
    )
}

fn echo_agent() -> String {
    require(
        &agents_dir().join("python/examples/echo_agent.py"),
        "the ACP Python SDK echo agent",
    )
}

fn gemini() -> String {
    require(
        &agents_dir().join("npm/node_modules/.bin/gemini"),
        "Gemini CLI",
    )
}

async fn sandbox() -> (e2b_test_support::TestEnvd, Commands, ()) {
    let envd = e2b_test_support::spawn_envd().await;
    let mut ep = EnvdEndpoint::new(envd.url());
    if let Some(t) = envd.access_token() {
        ep = ep.access_token(t);
    }
    let commands = Commands::new(EnvdConnection::new(ep).unwrap());
    (envd, commands, ())
}

fn all_caps() -> InitializeRequest {
    InitializeRequest::new(ProtocolVersion::V1).client_capabilities(
        ClientCapabilities::new()
            .fs(FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true))
            .terminal(true),
    )
}

/// The initialize line the agent read, from the tee log in front of it.
fn logged_initialize(log: &Path) -> Value {
    let text = std::fs::read_to_string(log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("\"initialize\""))
        .expect("initialize in the log");
    serde_json::from_str(line).unwrap()
}

fn assert_caps_off(init: &Value) {
    let caps = &init["params"]["clientCapabilities"];
    assert_eq!(caps["fs"]["readTextFile"], Value::Bool(false), "{init}");
    assert_eq!(caps["fs"]["writeTextFile"], Value::Bool(false), "{init}");
    assert_eq!(caps["terminal"], Value::Bool(false), "{init}");
}

#[tokio::test]
async fn python_echo_agent_full_cycle_in_the_sandbox() {
    let (py, echo) = (python(), echo_agent());
    let (_envd, c, _) = sandbox().await;
    let texts = Arc::new(Mutex::new(Vec::new()));
    let t2 = texts.clone();
    let client = Client.v1().on_receive_notification(
        async move |n: SessionNotification, _cx| {
            if let SessionUpdate::AgentMessageChunk(ch) = n.update
                && let ContentBlock::Text(t) = ch.content
            {
                t2.lock().unwrap().push(t.text);
            }
            Ok(())
        },
        on_receive_notification!(),
    );
    let agent =
        e2b_acp::connect_acp_agent(&c, CommandLine::exec(py, [echo]), client, AcpOptions::new())
            .await
            .unwrap();
    let cx = agent.connection();
    let init = tokio::time::timeout(
        Duration::from_secs(30),
        cx.send_request(all_caps()).block_task(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(init.protocol_version, ProtocolVersion::V1);
    let s = cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await
        .unwrap();
    let r = cx
        .send_request(PromptRequest::new(
            s.session_id,
            vec![ContentBlock::Text(TextContent::new("hello sandbox"))],
        ))
        .block_task()
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(texts.lock().unwrap().concat(), "hello sandbox");
    let t0 = std::time::Instant::now();
    agent.stop(Duration::from_secs(5)).await.unwrap();
    let exit = agent.wait().await.unwrap();
    assert!(
        exit.success() && !exit.killed,
        "{exit:?}: exits on EOF in {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn gemini_cli_initialize_and_session_new_in_the_sandbox() {
    let bin = gemini();
    let (_envd, c, _) = sandbox().await;
    let home = tempfile::tempdir().unwrap();
    let opts = AcpOptions::new()
        .env("GEMINI_API_KEY", "dummy-key-for-offline-tests")
        .env("HOME", home.path().display().to_string())
        .cwd(home.path().display().to_string());
    let agent =
        e2b_acp::connect_acp_agent(&c, CommandLine::exec(bin, ["--acp"]), Client.v1(), opts)
            .await
            .unwrap();
    let cx = agent.connection();
    let init = tokio::time::timeout(
        Duration::from_secs(60),
        cx.send_request(all_caps()).block_task(),
    )
    .await
    .expect("gemini initialize timed out")
    .unwrap_or_else(|e| panic!("{e:?}\nstderr: {}", agent.stderr_tail()));
    assert_eq!(init.protocol_version, ProtocolVersion::V1);
    let s = tokio::time::timeout(
        Duration::from_secs(60),
        cx.send_request(NewSessionRequest::new(home.path()))
            .block_task(),
    )
    .await
    .expect("gemini session/new timed out")
    .unwrap_or_else(|e| panic!("{e:?}\nstderr: {}", agent.stderr_tail()));
    assert!(!s.session_id.0.is_empty());
    agent.stop(Duration::from_secs(5)).await.unwrap();
    agent.wait().await.unwrap();
}

#[tokio::test]
async fn bridge_with_the_rust_client_and_the_python_echo_agent() {
    let (py, echo) = (python(), echo_agent());
    let (_envd, c, _) = sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent-stdin.log");
    let cmd = format!("tee '{}' | exec '{py}' '{echo}'", log.display());
    let (client_io, bridge_io) = tokio::io::duplex(64 * 1024);
    let (bin, bout) = tokio::io::split(bridge_io);
    let c2 = c.clone();
    let bridge = tokio::spawn(async move {
        e2b_acp::run_bridge_in_sandbox(&c2, CommandLine::shell(cmd), bin, bout, AcpOptions::new())
            .await
    });
    let (cin, cout) = tokio::io::split(client_io);
    Client
        .v1()
        .connect_with(
            ByteStreams::new(cout.compat_write(), cin.compat()),
            async |cx: ConnectionTo<Agent>| {
                cx.send_request(all_caps()).block_task().await?;
                let s = cx
                    .send_request(NewSessionRequest::new("/tmp"))
                    .block_task()
                    .await?;
                let r = cx
                    .send_request(PromptRequest::new(
                        s.session_id,
                        vec![ContentBlock::Text(TextContent::new("hi"))],
                    ))
                    .block_task()
                    .await?;
                assert_eq!(r.stop_reason, StopReason::EndTurn);
                Ok(())
            },
        )
        .await
        .unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), bridge)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert_caps_off(&logged_initialize(&log));
}

#[tokio::test]
async fn bridge_with_the_python_sdk_client_and_the_python_echo_agent() {
    let (py, echo) = (python(), echo_agent());
    let (envd, _c, ()) = sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent-stdin.log");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/acp/python_client_bridge.py");
    let mut cmd = tokio::process::Command::new(&py);
    cmd.arg(&script)
        .arg(env!("CARGO_BIN_EXE_e2b-acp-bridge"))
        .arg("--envd")
        .arg(envd.url());
    if let Some(t) = envd.access_token() {
        cmd.arg("--token").arg(t);
    }
    cmd.arg("--")
        .arg("/bin/sh")
        .arg("-c")
        .arg(format!("tee '{}' | exec '{py}' '{echo}'", log.display()));
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "python client failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_caps_off(&logged_initialize(&log));
}
