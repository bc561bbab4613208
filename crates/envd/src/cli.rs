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
    /// Require this token in `X-Access-Token` (all routes but /health, /files, /init). A flag
    /// shows in `/proc/<pid>/cmdline` to every local user: prefer `--access-token-file` or the
    /// `E2B_ENVD_ACCESS_TOKEN` environment variable.
    #[arg(long, env = "E2B_ENVD_ACCESS_TOKEN", hide_env_values = true)]
    pub access_token: Option<String>,
    /// Read the access token from this file (surrounding whitespace removed).
    #[arg(
        long,
        env = "E2B_ENVD_ACCESS_TOKEN_FILE",
        conflicts_with = "access_token"
    )]
    pub access_token_file: Option<PathBuf>,
    /// Allow starting on a non-loopback address without an access token (anyone who can reach
    /// the address can then run commands).
    #[arg(long)]
    pub insecure_no_token: bool,
    /// A browser origin (`https://app.example:8443`) allowed to call the daemon (CORS);
    /// repeatable. Requests with any other `Origin` are refused. Default: none.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// A host name accepted in the `Host` header besides loopback names and the bind address;
    /// `*.domain` accepts subdomains (an edge proxy's `49983-<id>.<domain>`). Repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Most connections served at once (more wait in the listen backlog).
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Refuse signed `/files` URLs valid for longer than this many seconds (and URLs signed
    /// without an expiration). Default: no maximum (the SDKs sign without expiration).
    #[arg(long, value_name = "SECONDS")]
    pub signature_max_age_secs: Option<u64>,
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
            insecure_no_token: self.insecure_no_token,
            allow_origins: self.allow_origins.clone(),
            allow_hosts: self.allow_hosts.clone(),
            max_connections: self.max_connections,
            signature_max_age: self
                .signature_max_age_secs
                .map(std::time::Duration::from_secs),
            ..EnvdConfig::default()
        }
    }

    /// Like [`to_config`](Self::to_config), with the token read from
    /// [`access_token_file`](Self::access_token_file) when one is given.
    ///
    /// # Errors
    ///
    /// [`EnvdError::Config`] when the token file cannot be read or is empty.
    pub fn resolve_config(&self) -> Result<EnvdConfig, EnvdError> {
        let mut config = self.to_config();
        if let Some(path) = &self.access_token_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                EnvdError::Config(format!(
                    "cannot read the access token file '{}': {e}",
                    path.display()
                ))
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(EnvdError::Config(format!(
                    "the access token file '{}' is empty",
                    path.display()
                )));
            }
            config.access_token = Some(token.to_string());
        }
        Ok(config)
    }
}

/// Runs the daemon until SIGINT or SIGTERM, printing its URL on stdout once it listens, then
/// shuts down gracefully (every process group it started is killed and reaped).
pub async fn run_cli(args: EnvdArgs) -> Result<(), EnvdError> {
    let handle = Envd::start(args.resolve_config()?).await?;
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
