//! Daemon configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The envd version whose features this daemon implements (and reports by default); re-exported
/// from `e2b_envd_version`, the single source of truth.
pub use e2b_envd_version::IMPLEMENTED_ENVD_VERSION;

/// envd's well-known port; re-exported from [`e2b_envd_proto::wire`], the wire contract shared
/// with the client.
pub use e2b_envd_proto::wire::DEFAULT_PORT;

/// Configuration of an [`Envd`](crate::Envd) daemon: data, as docs/api-style.md calls it.
///
/// Start from [`EnvdConfig::ephemeral`] (or [`EnvdConfig::default`]) and set the public
/// fields; the struct is `#[non_exhaustive]` so fields can be added without breaking you.
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
    /// Browser origins (`scheme://host[:port]`, exactly as a browser sends `Origin`) that may
    /// call the daemon; CORS answers only these. A request carrying any other `Origin` is
    /// refused with 403. Default: none (no web page may call the daemon).
    pub allow_origins: Vec<String>,
    /// Extra host names accepted in the `Host` header, besides loopback names (`localhost`,
    /// `127.0.0.0/8`, `[::1]`) and the bind address. A leading `*.` matches any subdomain
    /// (`*.sandbox.local` accepts `49983-abc.sandbox.local`). Other hosts get 403 (DNS
    /// rebinding). Default: none.
    pub allow_hosts: Vec<String>,
    /// Allow starting on a non-loopback address without an access token. Default `false`:
    /// [`Envd::start`](crate::Envd::start) refuses such a configuration.
    pub insecure_no_token: bool,
    /// How long a client may take to send a request's headers (HTTP/1.1). Default 30 s.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed. Default 640 s (envd's
    /// `IdleTimeout`).
    pub idle_timeout: Duration,
    /// HTTP/2 keepalive: a PING is sent after this much silence, and the connection is closed
    /// when it is not answered within [`http2_keepalive_timeout`](Self::http2_keepalive_timeout).
    /// Default 60 s.
    pub http2_keepalive_interval: Duration,
    /// See [`http2_keepalive_interval`](Self::http2_keepalive_interval). Default 20 s.
    pub http2_keepalive_timeout: Duration,
    /// Most connections served at once; further connections wait in the listen backlog until
    /// one closes. Default 4096.
    pub max_connections: usize,
    /// Largest JSON body of a REST route (`/init`, `/files/compose`), in bytes. Default 1 MiB.
    pub max_json_body_bytes: usize,
    /// Most parts in one multipart upload. Default 1000.
    pub max_multipart_parts: usize,
    /// Largest multipart preamble (bytes before the first boundary) and largest header block
    /// of one part, in bytes. Default 16 KiB.
    pub max_multipart_header_bytes: usize,
    /// Largest decompressed size of one gzip upload body, in bytes. Default 64 GiB.
    pub max_decompressed_bytes: u64,
    /// Largest ratio of decompressed to compressed bytes of a gzip upload, enforced once the
    /// output passes 64 MiB. Default 200.
    pub max_gzip_ratio: u64,
    /// Largest age accepted for a signed `/files` URL, in seconds from now to its
    /// `signature_expiration`; when set, URLs signed without an expiration are refused too.
    /// Default `None`: as envd, signatures without expiration never expire (the official SDKs
    /// sign without one unless asked).
    pub signature_max_age: Option<Duration>,
    /// Why the limits asked for this sandbox are not enforced as asked (for example "cgroup v2
    /// without the memory controller: rlimits per process instead"). When set (and not empty),
    /// `GET /health` answers 200 with `{"limits": "<note>"}` instead of 204, and the daemon logs
    /// it once at start. The command line reads it from `E2B_SANDBOX_LIMITS_NOTE`, which an
    /// isolated sandbox's supervisor sets. Default `None`.
    pub limits_note: Option<String>,
    /// Test hook, unstable: in debug builds only, `GET /__envd_test/panic` panics in its
    /// handler (to test that a panic answers 500 and the daemon keeps serving). Ignored in
    /// release builds.
    #[doc(hidden)]
    pub debug_panic_route: bool,
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
            allow_origins: Vec::new(),
            allow_hosts: Vec::new(),
            insecure_no_token: false,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(640),
            http2_keepalive_interval: Duration::from_secs(60),
            http2_keepalive_timeout: Duration::from_secs(20),
            max_connections: 4096,
            max_json_body_bytes: 1024 * 1024,
            max_multipart_parts: 1000,
            max_multipart_header_bytes: 16 * 1024,
            max_decompressed_bytes: 64 << 30,
            max_gzip_ratio: 200,
            signature_max_age: None,
            limits_note: None,
            debug_panic_route: false,
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
}
