//! Drive an ACP agent in a sandbox from the host: start it in the local sandbox, `initialize`,
//! open a session, send one prompt and print the agent's updates as they arrive.
//!
//! ```text
//! cargo run -p e2b-acp --example drive_agent                       # the fake test agent
//! cargo run -p e2b-acp --example drive_agent -- opencode acp       # a real agent
//! cargo run -p e2b-acp --example drive_agent -- --prompt "hi" gemini --acp
//! ```
//!
//! Without an agent command it runs the scriptable fake agent of `e2b-test-support` (built on
//! first use), which echoes each prompt block back as an update. The agent runs in
//! `e2b::Sandbox::local_unisolated()` (the embedded sandbox on this machine, so a host-installed
//! agent runs as it is; `e2b acp` runs agents isolated and shows their directories read-only,
//! see docs/isolation.md); with another sandbox (`Sandbox::local()`, a remote one), pass its
//! `Sandbox` to `connect_acp_agent` the same way. The client's `fs` and `terminal` capabilities
//! reach the agent as `false`, so it works on the sandbox's files itself. Permission requests are
//! not handled here: the official client answers them with "method not found", which agents take
//! as a refusal.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use e2b_acp::agent_client_protocol::schema::ProtocolVersion;
use e2b_acp::agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, SessionNotification,
    SessionUpdate, TextContent,
};
use e2b_acp::agent_client_protocol::{Client, on_receive_notification};
use e2b_acp::{AcpError, AcpOptions, CommandLine, connect_acp_agent};

/// How long each step may take (real agents need a few seconds to start).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drive_agent: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn step<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(STEP_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} timed out after {STEP_TIMEOUT:?}")),
    }
}

async fn run() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut prompt = "Hello from the host. What can you do?".to_owned();
    if args.first().map(String::as_str) == Some("--prompt") {
        if args.len() < 2 {
            return Err("--prompt needs a text".to_owned());
        }
        prompt = args.remove(1);
        args.remove(0);
    }
    let (command, shown) = match args.split_first() {
        Some((program, rest)) => (
            CommandLine::exec(program.clone(), rest.iter().cloned()),
            args.join(" "),
        ),
        None => {
            let fake = e2b_test_support::fake_acp_agent();
            (
                CommandLine::exec(fake.display().to_string(), Vec::<String>::new()),
                "the fake test agent".to_owned(),
            )
        }
    };

    let sandbox = step(
        "starting the local sandbox",
        e2b::Sandbox::local_unisolated(),
    )
    .await?;

    // Print every agent message chunk as it arrives; summarise the other updates.
    let printed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let p2 = printed.clone();
    let client = Client.v1().name("drive_agent").on_receive_notification(
        async move |n: SessionNotification, _cx| {
            p2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match n.update {
                SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                    ContentBlock::Text(t) => println!("agent: {}", t.text),
                    other => println!("agent sent a {other:?}"),
                },
                other => println!("update: {other:?}"),
            }
            Ok(())
        },
        on_receive_notification!(),
    );

    let opts = AcpOptions::new().on_stderr(|chunk| {
        eprint!("[agent stderr] {}", String::from_utf8_lossy(chunk));
        Ok(())
    });
    let agent = match connect_acp_agent(&sandbox, command, client, opts).await {
        Ok(a) => a,
        Err(AcpError::Spawn { command, reason }) => {
            return Err(format!(
                "the agent `{command}` could not be started in the sandbox ({reason}); is it installed there?"
            ));
        }
        Err(e) => return Err(format!("starting the agent `{shown}` failed: {e}")),
    };
    println!("started {shown} (pid {} in the sandbox)", agent.pid());

    let cx = agent.connection();
    let init = step(
        "initialize",
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
            .block_task(),
    )
    .await;
    let init = match init {
        Ok(init) => init,
        Err(e) => {
            // An agent that is not installed exits with 127 from the shell or the exec.
            if let Ok(Err(AcpError::AgentFailed {
                code, stderr_tail, ..
            })) = tokio::time::timeout(Duration::from_secs(2), agent.wait()).await
            {
                return Err(format!(
                    "the agent `{shown}` exited (code {code:?}) before answering initialize; is it installed in the sandbox?\n{stderr_tail}"
                ));
            }
            return Err(e);
        }
    };
    println!(
        "initialized: protocol {:?}, agent {:?}",
        init.protocol_version,
        init.agent_info.map(|i| i.name)
    );

    let cwd = std::env::temp_dir().display().to_string();
    let session = step(
        "session/new",
        cx.send_request(NewSessionRequest::new(cwd)).block_task(),
    )
    .await?;
    println!("session {}", session.session_id.0);

    let response = step(
        "session/prompt",
        cx.send_request(PromptRequest::new(
            session.session_id.clone(),
            vec![ContentBlock::Text(TextContent::new(prompt))],
        ))
        .block_task(),
    )
    .await?;
    println!(
        "prompt done: {:?} after {} update(s)",
        response.stop_reason,
        printed.load(std::sync::atomic::Ordering::Relaxed)
    );

    step("stopping the agent", agent.stop(Duration::from_secs(5))).await?;
    let _ = sandbox.kill().await;
    Ok(())
}
