#![cfg_attr(feature = "sandbox", doc = include_str!("../README.md"))]
#![cfg_attr(
    not(feature = "sandbox"),
    doc = "Run ACP coding agents and drive them from the host (the sandbox adapter needs the \
           `sandbox` feature)."
)]
//!
//! ## How it works
//!
//! The agent runs as a sandbox command (`start_streaming`: stdin open, no output retained, no
//! command timeout) and is spoken to in newline-delimited JSON-RPC; the official
//! `agent-client-protocol` client (5.x, protocol v1) runs on top. The agent's tools stay in the
//! sandbox: the client's `fs` and `terminal` capabilities are sent as `false`, and the agent's
//! `fs/*` and `terminal/*` requests are answered with -32601 before they reach your handlers.
//!
//! With the local sandbox (`e2b`'s `local` feature):
//!
//! ```no_run
//! use std::time::Duration;
//! use agent_client_protocol::Client;
//! use agent_client_protocol::schema::ProtocolVersion;
//! use agent_client_protocol::v1::schema::{InitializeRequest, NewSessionRequest};
//! use e2b_acp::{AcpOptions, connect_acp_agent};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let sandbox = e2b::Sandbox::local().await?;
//! let agent = connect_acp_agent(&sandbox, "opencode acp", Client.v1(), AcpOptions::new()).await?;
//! let cx = agent.connection();
//! cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
//! let session = cx.send_request(NewSessionRequest::new("/tmp")).block_task().await?;
//! println!("session {}", session.session_id.0);
//! agent.stop(Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Layers, each usable alone: [`framing`] (the byte splitter with its size limit), [`filter`]
//! (the rewrite and interception rules), [`transport`] (queues and lifecycle over any
//! [`AgentProcess`]: [`LocalProcess`] or, with the default `sandbox` feature, `SandboxProcess`),
//! [`agent`] (the official client on top) and [`bridge`] (serve ACP on a reader/writer pair).

/// The official ACP crate this one builds on (`agent-client-protocol` 5.x), re-exported so that
/// callers use the exact version whose types [`AcpAgent`] takes.
pub use agent_client_protocol;

pub mod error;
pub mod filter;
pub mod framing;
pub mod local;
pub mod options;
pub mod process;
pub mod transport;

pub use error::{AcpError, Direction};
pub use framing::LineSplitter;
pub use local::LocalProcess;
pub use options::{
    AcpOptions, AsyncStderrCallback, CallbackError, DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_READ_QUEUE_BYTES, DEFAULT_READ_QUEUE_DEPTH, DEFAULT_STDERR_TAIL_BYTES,
    DEFAULT_STOP_TIMEOUT, DEFAULT_WRITE_QUEUE_DEPTH, StderrCallback, SyncStderrCallback,
};
pub use process::{AgentProcess, ByteStream, ProcessExit};
pub use transport::{AcpTransport, AgentExit};

pub mod agent;
pub use agent::{AcpAgent, ClientBuilder, LOCAL_REFUSAL_INVALID, LOCAL_REFUSAL_TOO_LARGE};

pub mod bridge;

/// What the fuzz targets in `crates/acp/fuzz` drive (not a stable API).
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::filter::{AgentVerdict, inspect_agent_line, rewrite_client_message};
    pub use crate::framing::LineSplitter;
}
pub use bridge::{run_bridge, run_bridge_until};

#[cfg(feature = "sandbox")]
pub mod sandbox;
#[cfg(feature = "sandbox")]
pub use e2b_commands::{CommandLine, Commands};
#[cfg(feature = "sandbox")]
pub use sandbox::{
    SandboxCommands, SandboxProcess, connect_acp_agent, run_bridge_in_sandbox, start_acp_transport,
};
