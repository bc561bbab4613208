//! The `e2b` command: run the local envd, run commands in a sandbox, bridge ACP agents and serve
//! MCP exec tools. The binary is `e2b`; this library holds its argument types so they can be
//! embedded and tested.

pub mod args;

pub use args::{Cli, Command};
