//! Run ACP coding agents inside an E2B sandbox and drive them from the host.

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
    AcpOptions, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_READ_QUEUE_DEPTH, DEFAULT_STDERR_TAIL_BYTES,
    DEFAULT_STOP_TIMEOUT, DEFAULT_WRITE_QUEUE_DEPTH, StderrCallback,
};
pub use process::{AgentProcess, ByteStream, ProcessExit};
pub use transport::{AcpTransport, AgentExit};

pub mod agent;
pub use agent::{AcpAgent, ClientBuilder};

pub mod bridge;
pub use bridge::run_bridge;

#[cfg(feature = "sandbox")]
pub mod sandbox;
#[cfg(feature = "sandbox")]
pub use e2b_commands::{CommandLine, Commands};
#[cfg(feature = "sandbox")]
pub use sandbox::{
    SandboxCommands, SandboxProcess, connect_acp_agent, run_bridge_in_sandbox, start_acp_transport,
};
