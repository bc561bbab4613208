//! The `e2b` command: run the local envd, run commands in a sandbox, bridge ACP agents and serve
//! MCP exec tools. The binary is `e2b`; this library holds its argument types and subcommands so
//! they can be embedded and tested.

mod acp;
pub mod args;
pub mod files_cmd;
mod run;
pub mod sandbox_cmd;
mod serve;

pub use acp::acp;
pub use args::{AcpArgs, Cli, Command, RunArgs, SandboxArgs};
pub use run::{CliError, TIMEOUT_EXIT_CODE, open_sandbox, run};
pub use serve::serve;
