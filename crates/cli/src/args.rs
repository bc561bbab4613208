//! Command-line arguments of `e2b`.

/// `e2b`: sandboxes for AI agents.
#[derive(Debug, clap::Parser)]
#[command(
    name = "e2b",
    version,
    about = "Sandboxes for AI agents: local envd, commands, ACP agents, MCP exec tools"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run the local envd-compatible daemon (gRPC, gRPC-Web and Connect on one port).
    Envd(e2b_envd::EnvdArgs),
}
