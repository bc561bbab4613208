//! Command-line arguments of `e2b`.

use std::time::Duration;

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
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the local envd-compatible daemon (gRPC, gRPC-Web and Connect on one port).
    Envd(e2b_envd::EnvdArgs),
    /// Run a command in a sandbox (the embedded local one by default), stream its output live
    /// and exit with its exit code (128+N when signal N ended it).
    Run(RunArgs),
    /// Bridge an ACP agent: speak ACP on this process's stdin/stdout (for an editor such as
    /// Zed) while the real agent runs inside the sandbox, its file and terminal access kept there.
    Acp(AcpArgs),
    /// Serve MCP exec tools (exec_command, upload_file, download_file, ...) over stdio or
    /// Streamable HTTP, running in a sandbox.
    ExecServer(ExecServerCmd),
    /// Manage sandboxes through E2B's API: create, list, info, kill, timeout, pause, resume,
    /// connect (E2B's cloud with E2B_API_KEY, or `e2b serve` with E2B_API_URL).
    #[command(visible_alias = "sbx")]
    Sandbox(crate::sandbox_cmd::SandboxCommandArgs),
    /// Move files in and out of a sandbox: put, get, ls.
    Files(crate::files_cmd::FilesArgs),
    /// Serve E2B's sandbox API on this machine: point E2B_API_URL, E2B_SANDBOX_URL and
    /// E2B_API_KEY at it and the official SDKs create, list, pause and kill local sandboxes.
    Serve(e2b_serve::ServeArgs),
}

/// Which sandbox to use: the embedded local one, or an envd at a URL.
///
/// Global where a command has subcommands (`e2b files put --sandbox-id ID …` and
/// `e2b files --sandbox-id ID put …` alike).
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// envd URL of the sandbox (default: start the embedded local sandbox).
    #[arg(long, value_name = "URL", env = "E2B_SANDBOX_URL", global = true)]
    pub sandbox: Option<String>,
    /// Access token of the envd at --sandbox.
    #[arg(long, env = "E2B_ACCESS_TOKEN", hide_env_values = true, global = true)]
    pub access_token: Option<String>,
    /// Work in this existing sandbox of E2B's API (cloud or `e2b serve`; E2B_API_KEY,
    /// E2B_API_URL); it is resumed if paused and keeps running afterwards.
    #[arg(long, value_name = "ID", global = true)]
    pub sandbox_id: Option<String>,
    /// The local sandbox's isolation.
    #[command(flatten)]
    pub local: LocalIsolationArgs,
}

/// How the local sandbox (used without --sandbox) is isolated: `--isolation`, `--network`,
/// `--mount-ro` (shared with `e2b exec-server`).
pub use e2b_exec_server::LocalSandboxArgs as LocalIsolationArgs;

/// `e2b exec-server`: the server's options (with the local sandbox's isolation).
#[derive(Debug, Clone, clap::Args)]
pub struct ExecServerCmd {
    /// The server's options.
    #[command(flatten)]
    pub args: e2b_exec_server::ExecServerArgs,
}

/// `e2b run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Working directory in the sandbox.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable for the command (repeatable).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = parse_env)]
    pub envs: Vec<(String, String)>,
    /// User to run as.
    #[arg(long)]
    pub user: Option<String>,
    /// Command timeout in seconds; the process group is killed when it expires (0 = none).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub timeout: f64,
    /// The command. One argument runs as a shell line (`/bin/bash -l -c`), several run the
    /// program directly with those arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl RunArgs {
    /// The command timeout (`None` = no timeout).
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout > 0.0).then(|| Duration::from_secs_f64(self.timeout))
    }
}

/// `e2b acp`.
#[derive(Debug, Clone, clap::Args)]
pub struct AcpArgs {
    /// The sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Working directory of the agent in the sandbox.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable for the agent (repeatable), e.g. an API key.
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = parse_env)]
    pub envs: Vec<(String, String)>,
    /// The agent command, e.g. `opencode acp` or `gemini --acp`.
    #[arg(last = true, required = true, value_name = "AGENT_CMD")]
    pub command: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("'{s}' is not KEY=VALUE")),
    }
}
