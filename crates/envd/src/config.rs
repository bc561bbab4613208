//! Daemon configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The envd version whose features this daemon implements (and reports by default); re-exported
/// from `e2b_envd_version`, the single source of truth.
pub use e2b_envd_version::IMPLEMENTED_ENVD_VERSION;

/// envd's well-known port.
pub const DEFAULT_PORT: u16 = 49983;

/// Configuration of an [`Envd`](crate::Envd) daemon.
///
/// Build it from [`EnvdConfig::default`] and set the public fields (or use the `with_*`
/// helpers); the struct is `#[non_exhaustive]` so fields can be added without breaking you.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnvdConfig {
    /// Address to listen on. Default `127.0.0.1:49983`; use port 0 for any free port.
    pub bind: SocketAddr,
    /// Access token required in `X-Access-Token` on every route except `/health`, `/files` and
    /// `/init`. `None` = open (as envd before `/init` sets one).
    pub access_token: Option<String>,
    /// User that runs commands when a request names none. `None` = `root` when the daemon runs
    /// as root, else the current user.
    pub default_user: Option<String>,
    /// Working directory for commands that give no `cwd`. `None` = the user's home.
    pub default_workdir: Option<PathBuf>,
    /// A user name (for example `user`, which the E2B SDKs assume) accepted as the current user
    /// when the daemon does not run as root, or when no account of that name exists.
    pub user_alias: Option<String>,
    /// The envd version reported in `X-Envd-Version`. Default [`IMPLEMENTED_ENVD_VERSION`].
    pub envd_version: String,
    /// Largest accepted request message (Connect, gRPC, gRPC-Web), in bytes. Default 64 MiB.
    pub max_message_bytes: usize,
    /// Keepalive interval used when a stream request carries no valid
    /// `Keepalive-Ping-Interval` header. Default 90 s.
    pub keepalive: Duration,
    /// How long the end event of an exited process is kept for a late `Connect`. Default 30 s.
    pub exited_retention: Duration,
    /// Extra environment variables given to every command (before the request's own `envs`),
    /// in addition to `E2B_SANDBOX=true`. `POST /init` replaces them.
    pub env_vars: std::collections::HashMap<String, String>,
    /// Reserved for the Filesystem service: an optional root that paths are confined to.
    pub root: Option<PathBuf>,
}

impl Default for EnvdConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            access_token: None,
            default_user: None,
            default_workdir: None,
            user_alias: None,
            envd_version: IMPLEMENTED_ENVD_VERSION.to_string(),
            max_message_bytes: 64 * 1024 * 1024,
            keepalive: Duration::from_secs(90),
            exited_retention: Duration::from_secs(30),
            env_vars: Default::default(),
            root: None,
        }
    }
}

impl EnvdConfig {
    /// A configuration for tests and embedding: `127.0.0.1:0` (any free port), everything else
    /// default.
    pub fn ephemeral() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Self::default()
        }
    }

    /// Sets [`bind`](Self::bind).
    pub fn with_bind(mut self, bind: SocketAddr) -> Self {
        self.bind = bind;
        self
    }

    /// Sets [`access_token`](Self::access_token).
    pub fn with_access_token(mut self, token: impl Into<String>) -> Self {
        self.access_token = Some(token.into());
        self
    }

    /// Sets [`default_user`](Self::default_user).
    pub fn with_default_user(mut self, user: impl Into<String>) -> Self {
        self.default_user = Some(user.into());
        self
    }

    /// Sets [`default_workdir`](Self::default_workdir).
    pub fn with_default_workdir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.default_workdir = Some(dir.into());
        self
    }

    /// Sets [`user_alias`](Self::user_alias).
    pub fn with_user_alias(mut self, alias: impl Into<String>) -> Self {
        self.user_alias = Some(alias.into());
        self
    }

    /// Sets [`envd_version`](Self::envd_version).
    pub fn with_envd_version(mut self, version: impl Into<String>) -> Self {
        self.envd_version = version.into();
        self
    }

    /// Sets [`max_message_bytes`](Self::max_message_bytes).
    pub fn with_max_message_bytes(mut self, max: usize) -> Self {
        self.max_message_bytes = max;
        self
    }

    /// Sets [`keepalive`](Self::keepalive).
    pub fn with_keepalive(mut self, every: Duration) -> Self {
        self.keepalive = every;
        self
    }

    /// Sets [`exited_retention`](Self::exited_retention).
    pub fn with_exited_retention(mut self, keep: Duration) -> Self {
        self.exited_retention = keep;
        self
    }
}
