#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod acp;
pub mod args;
pub mod files_cmd;
mod run;
pub mod sandbox_cmd;
mod serve;

pub use acp::acp;
pub use args::{AcpArgs, Cli, Command, ExecServerCmd, RunArgs, SandboxArgs};
pub use run::{CliError, TIMEOUT_EXIT_CODE, exec_server, open_sandbox, run};
pub use serve::{SANDBOX_ENVD_BIN, run_main, sandbox_envd_main, serve};
