//! Command-line entry point, shared by the `e2b-envd` binary and `e2b envd`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::config::{DEFAULT_PORT, EnvdConfig, IMPLEMENTED_ENVD_VERSION};
use crate::error::EnvdError;
use crate::server::Envd;

/// Flags of `e2b-envd` (and `e2b envd`). Flatten it into another clap command with
/// `#[command(flatten)]`.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct EnvdArgs {
    /// Port to listen on (0 = any free port).
    #[arg(long, default_value_t = DEFAULT_PORT, env = "E2B_ENVD_PORT")]
    pub port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1", env = "E2B_ENVD_BIND")]
    pub bind: IpAddr,
    /// Require this token in `X-Access-Token` (all routes but /health, /files, /init).
    #[arg(long, env = "E2B_ENVD_ACCESS_TOKEN")]
    pub access_token: Option<String>,
    /// User that runs commands when a request names none (default: root when running as root,
    /// else the current user).
    #[arg(long)]
    pub default_user: Option<String>,
    /// Working directory for commands without a cwd (default: the user's home).
    #[arg(long)]
    pub default_workdir: Option<PathBuf>,
    /// A user name accepted as the current user (e.g. `user`, which the E2B SDKs assume).
    #[arg(long)]
    pub user_alias: Option<String>,
    /// Confine the file API (Filesystem RPCs and /files) and the working directory of new
    /// commands to this directory: paths resolving outside it (after `..` and symlinks) are
    /// refused. Commands still run unconfined. Off by default, as in envd.
    #[arg(long, env = "E2B_ENVD_ROOT")]
    pub root: Option<PathBuf>,
    /// envd version to report in X-Envd-Version.
    #[arg(long, default_value = IMPLEMENTED_ENVD_VERSION)]
    pub envd_version: String,
}

impl EnvdArgs {
    /// The daemon configuration these flags describe.
    pub fn to_config(&self) -> EnvdConfig {
        EnvdConfig {
            bind: SocketAddr::new(self.bind, self.port),
            access_token: self.access_token.clone(),
            default_user: self.default_user.clone(),
            default_workdir: self.default_workdir.clone(),
            user_alias: self.user_alias.clone(),
            envd_version: self.envd_version.clone(),
            root: self.root.clone(),
            ..EnvdConfig::default()
        }
    }
}

/// Runs the daemon until SIGINT or SIGTERM, printing its URL on stdout once it listens, then
/// shuts down gracefully (every process group it started is killed and reaped).
pub async fn run_cli(args: EnvdArgs) -> Result<(), EnvdError> {
    let handle = Envd::start(args.to_config()).await?;
    println!("{}", handle.url());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}
