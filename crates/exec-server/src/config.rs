//! Command-line and environment configuration.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::error::ExecServerError;

/// The default `--max-chunk-bytes`: 512 KiB, about 700 KB of base64 per result.
pub(crate) const DEFAULT_MAX_CHUNK_BYTES: u64 = 512 * 1024;
/// The longest timeout accepted in the configuration (30 days).
const MAX_CONFIG_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// Options of `e2b exec-server` (and of the standalone `e2b-exec-server` binary).
///
/// Flatten it into a clap command with `#[command(flatten)]`.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct ExecServerArgs {
    /// Serve MCP over standard input/output (the default when --http is not given).
    #[arg(long, conflicts_with = "http")]
    pub stdio: bool,

    /// Serve Streamable HTTP at /mcp on ADDR (HOST:PORT). Without a value:
    /// 127.0.0.1 and the port from PORT (default 3005).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
    pub http: Option<String>,

    /// The port used when --http has no address.
    #[arg(long, env = "PORT", default_value_t = 3005)]
    pub port: u16,

    /// Run the tools in the sandbox whose envd is at URL instead of the embedded local sandbox.
    #[arg(long, value_name = "URL", env = "E2B_SANDBOX_URL")]
    pub sandbox: Option<String>,

    /// The envd access token for --sandbox.
    #[arg(long, env = "E2B_ACCESS_TOKEN", hide_env_values = true)]
    pub access_token: Option<String>,

    /// The local sandbox's isolation (used without --sandbox).
    #[command(flatten)]
    pub local: LocalSandboxArgs,

    /// The sandbox id to report (default: the sandbox's own id).
    #[arg(long, env = "SANDBOX_ID")]
    pub sandbox_id: Option<String>,

    /// Require this key on /mcp as `x-api-key` or `Authorization: Bearer` (HTTP only). A
    /// non-loopback --http address refuses to start without one (see --insecure-no-auth).
    #[arg(long, env = "API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Serve a non-loopback --http address without an API key: anyone who can reach the port
    /// runs commands in the sandbox. Logged loudly; meant for a private network you trust.
    #[arg(long)]
    pub insecure_no_auth: bool,

    /// Browser origins (`scheme://host[:port]`) allowed to call /mcp (repeat or
    /// comma-separate). A request with any other `Origin` header is refused with 403; requests
    /// without `Origin` (non-browser clients) are unaffected. Default: none.
    #[arg(
        long = "allowed-origin",
        env = "ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,

    /// Also emit the Node exec_server's text (`stdout:` / `stderr:` / `exit_code: N`,
    /// `(no output)`) in content\[0\], for adapters that still parse it (migration phase 1-2).
    #[arg(long, env = "EXEC_SERVER_LEGACY_TEXT")]
    pub legacy_text: bool,

    /// Default command timeout in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    pub default_timeout: f64,

    /// Maximum command timeout in seconds (`timeout: 0` asks for it).
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    pub max_timeout: f64,

    /// Output kept per command (head and tail); more is dropped with a marker. The default
    /// keeps a result under the 1 MiB SSE event limit of the official MCP Python SDK (text
    /// that grows when escaped as JSON is cut further, with `truncated: true`).
    #[arg(long, value_name = "BYTES", default_value_t = 512 * 1024)]
    pub max_output_bytes: usize,

    /// Largest chunk download_file returns in one call. The default keeps one result (base64,
    /// 4/3 of the bytes) under the 1 MiB SSE event limit of the official MCP Python SDK.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_CHUNK_BYTES)]
    pub max_chunk_bytes: u64,

    /// Time limit of one file or compat tool call (upload_file, download_file, read, write,
    /// edit, grep, glob, ls), in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    pub file_timeout: f64,

    /// Largest HTTP request body (and stdio line) accepted.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Host names accepted in the Host header (repeat or comma-separate; `*` accepts any).
    /// Loopback names and the bound address are always accepted.
    #[arg(long = "allowed-host", env = "ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Answer POSTs with plain application/json (stateless, no Mcp-Session-Id), for clients
    /// that call `resp.json()`.
    #[arg(long, env = "EXEC_SERVER_JSON_RESPONSE")]
    pub json_response: bool,

    /// Answer a request POSTed inside a session (and `initialize`) at `/mcp` and `/mcp/legacy`
    /// with plain application/json when its only message is the response and the client accepts
    /// JSON (`/mcp/session-json` always does); SSE otherwise.
    #[arg(long, env = "EXEC_SERVER_SESSION_JSON")]
    pub session_json: bool,

    /// Default working directory of commands (default: the sandbox's).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,

    /// The shell that runs exec_command's `cmd` as `<shell> -c <cmd>`.
    #[arg(
        long,
        value_name = "PATH",
        env = "EXEC_SERVER_SHELL",
        default_value = "/bin/bash"
    )]
    pub shell: String,

    /// Run the shell as a login shell (`-l`, E2B's convention; sources the profile on every
    /// command, which costs time).
    #[arg(long)]
    pub login_shell: bool,

    /// Milliseconds between progress notifications carrying new output.
    #[arg(long, value_name = "MS", default_value_t = 250)]
    pub progress_interval_ms: u64,

    /// Bytes of output kept per background process (a ring: a reader that falls further
    /// behind is told how many bytes it lost).
    #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024)]
    pub process_output_bytes: usize,

    /// The most background processes kept at once (finished ones are forgotten oldest first).
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_processes: usize,

    /// Register the `mount` and `unmount` tools: the model may add tools at runtime, each a
    /// shell command run in the sandbox with the sandbox's powers (see docs/security.md). Off
    /// by default.
    #[arg(long, env = "EXEC_SERVER_ALLOW_MOUNT")]
    pub allow_mount: bool,

    /// A chunked upload_file that receives no chunk for this many seconds is abandoned and its
    /// staged part files are removed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub upload_idle_seconds: f64,

    /// The most tools mounted at once (with --allow-mount).
    #[arg(long, value_name = "N", default_value_t = crate::mounts::DEFAULT_MAX_MOUNTS)]
    pub max_mounts: usize,
}

impl Default for ExecServerArgs {
    fn default() -> Self {
        Self {
            stdio: false,
            http: None,
            port: 3005,
            sandbox: None,
            access_token: None,
            local: LocalSandboxArgs::default(),
            sandbox_id: None,
            api_key: None,
            insecure_no_auth: false,
            allowed_origins: Vec::new(),
            legacy_text: false,
            default_timeout: 120.0,
            max_timeout: 3600.0,
            max_output_bytes: 512 * 1024,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            file_timeout: 120.0,
            max_body_bytes: 64 * 1024 * 1024,
            allowed_hosts: Vec::new(),
            json_response: false,
            session_json: false,
            cwd: None,
            shell: "/bin/bash".into(),
            login_shell: false,
            progress_interval_ms: 250,
            process_output_bytes: 1024 * 1024,
            max_processes: 32,
            allow_mount: false,
            upload_idle_seconds: 600.0,
            max_mounts: crate::mounts::DEFAULT_MAX_MOUNTS,
        }
    }
}

/// How the local sandbox (the one used without `--sandbox`) is isolated: the flags of
/// `e2b-exec-server`, `e2b exec-server`, `e2b run` and `e2b acp`.
///
/// Flatten it into a clap command with `#[command(flatten)]`.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct LocalSandboxArgs {
    /// `on` (default): the local sandbox is isolated (`e2b-envd --isolate`: its own user,
    /// mount, PID, UTS, IPC and network namespaces, root filesystem and limits; see
    /// docs/isolation.md; Linux, root). `none`: commands run directly on this machine as this
    /// user (said on stderr).
    #[arg(
        long,
        value_name = "on|none",
        default_value = "on",
        env = "E2B_ISOLATION"
    )]
    pub isolation: String,
    /// With isolation on: the sandbox's network. `internet` (default, as E2B's
    /// `allow_internet_access`): outbound through `pasta` or `slirp4netns`, not the host's
    /// loopback; `none`: loopback only; `host`: the host's network, shared.
    #[arg(
        long,
        value_name = "internet|none|host",
        default_value = "internet",
        env = "E2B_NETWORK"
    )]
    pub network: String,
    /// With isolation on: the sandbox's root filesystem: `base` (default: the host's system
    /// directories read-only, a private /home/user and /tmp), a root filesystem directory, a
    /// `docker export` tarball (.tar, .tar.gz) or an OCI image layout directory (unpacked once
    /// into $E2B_CACHE/templates and shared read-only; see docs/isolation.md).
    #[arg(
        long,
        value_name = "base|DIR|TARBALL|OCI-LAYOUT",
        default_value = "base"
    )]
    pub template: String,
    /// With isolation on: show a host path read-only inside the sandbox, at the same path or
    /// at SANDBOX (repeatable).
    #[arg(long = "mount-ro", value_name = "HOST[:SANDBOX]")]
    pub mount_ro: Vec<String>,
}

impl Default for LocalSandboxArgs {
    fn default() -> Self {
        Self {
            isolation: "on".into(),
            network: "internet".into(),
            template: "base".into(),
            mount_ro: Vec::new(),
        }
    }
}

impl LocalSandboxArgs {
    /// The local sandbox's options these flags describe. `--isolation none` is said on stderr
    /// (the sandbox is then this machine).
    ///
    /// # Errors
    ///
    /// [`ExecServerError::Config`] for an unknown `--isolation` or `--network` value.
    pub fn options(&self) -> Result<e2b::LocalOptions, ExecServerError> {
        match self.isolation.as_str() {
            "on" => {
                let network: e2b::LocalNetwork = self
                    .network
                    .parse()
                    .map_err(|e: String| ExecServerError::Config(format!("--network: {e}")))?;
                Ok(self.mount_ro.iter().fold(
                    e2b::LocalOptions::isolated()
                        .network(network)
                        .template(self.template.clone()),
                    |o, m| o.mount_ro(m.clone()),
                ))
            }
            "none" => {
                eprintln!(
                    "e2b: --isolation none: the local sandbox is not isolated; commands run \
                     directly on this machine as this user"
                );
                Ok(e2b::LocalOptions::unisolated())
            }
            other => Err(ExecServerError::Config(format!(
                "unknown --isolation {other:?}: expected on or none"
            ))),
        }
    }
}

impl ExecServerArgs {
    /// The HTTP address to bind, or `None` for stdio.
    pub fn http_addr(&self) -> Result<Option<SocketAddr>, ExecServerError> {
        match self.http.as_deref() {
            None => Ok(None),
            Some("") => Ok(Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                self.port,
            ))),
            Some(s) => {
                if let Ok(a) = s.parse::<SocketAddr>() {
                    return Ok(Some(a));
                }
                if let Ok(ip) = s.parse::<IpAddr>() {
                    return Ok(Some(SocketAddr::new(ip, self.port)));
                }
                if let Some(port) = s.strip_prefix(':').and_then(|p| p.parse().ok()) {
                    return Ok(Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)));
                }
                if s == "localhost" {
                    return Ok(Some(SocketAddr::new(
                        IpAddr::V4(Ipv4Addr::LOCALHOST),
                        self.port,
                    )));
                }
                Err(ExecServerError::Config(format!(
                    "--http {s}: expected HOST:PORT such as 127.0.0.1:3005 or 0.0.0.0:3005"
                )))
            }
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ExecServerError> {
        let secs = |v: f64, name: &str| {
            if v.is_finite() && v > 0.0 && v <= MAX_CONFIG_SECONDS {
                Ok(())
            } else {
                Err(ExecServerError::Config(format!(
                    "{name} must be a positive number of seconds up to {MAX_CONFIG_SECONDS} (30 days), got {v}"
                )))
            }
        };
        secs(self.default_timeout, "--default-timeout")?;
        secs(self.max_timeout, "--max-timeout")?;
        secs(self.file_timeout, "--file-timeout")?;
        secs(self.upload_idle_seconds, "--upload-idle-seconds")?;
        if self.max_output_bytes < 2 {
            return Err(ExecServerError::Config(
                "--max-output-bytes must be at least 2".into(),
            ));
        }
        if self.process_output_bytes == 0 || self.max_processes == 0 || self.max_mounts == 0 {
            return Err(ExecServerError::Config(
                "--process-output-bytes, --max-processes and --max-mounts must be positive".into(),
            ));
        }
        if self.max_chunk_bytes == 0 {
            return Err(ExecServerError::Config(
                "--max-chunk-bytes must be positive".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn limits(&self) -> crate::exec::ExecLimits {
        crate::exec::ExecLimits {
            default_timeout: Duration::from_secs_f64(self.default_timeout),
            max_timeout: Duration::from_secs_f64(self.max_timeout),
            output_cap: self.max_output_bytes,
            progress_interval: Duration::from_millis(self.progress_interval_ms.max(10)),
        }
    }

    /// How long a chunked upload may wait for its next chunk.
    pub(crate) fn upload_idle(&self) -> Duration {
        Duration::try_from_secs_f64(self.upload_idle_seconds)
            .unwrap_or(crate::files::DEFAULT_UPLOAD_IDLE)
    }

    /// The look-ahead bounds of sessions with JSON responses: room for the largest tool result
    /// (output cap or file chunk, JSON-escaped or base64) and a wait as long as the longest tool
    /// may run; past either the answer stays SSE.
    pub(crate) fn session_json_limits(&self) -> crate::session_json::Limits {
        let chunk = usize::try_from(self.max_chunk_bytes).unwrap_or(usize::MAX);
        let largest = self.max_output_bytes.max(chunk);
        let secs = self.max_timeout.max(self.file_timeout) + 30.0;
        crate::session_json::Limits {
            max_buffer: largest.saturating_mul(8).max(16 << 20),
            wait: Duration::try_from_secs_f64(secs).unwrap_or(Duration::from_secs(3630)),
        }
    }

    /// The file tools' time limit.
    pub(crate) fn file_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.file_timeout).unwrap_or(Duration::from_secs(120))
    }

    /// The hosts accepted in `Host`: loopback names, the bound address (unless it is the
    /// unspecified address) and `--allowed-host`. `None` (no check) only with `*`.
    pub(crate) fn resolved_allowed_hosts(&self, addr: SocketAddr) -> Option<Vec<String>> {
        if self.allowed_hosts.iter().any(|h| h.trim() == "*") {
            return None;
        }
        let mut v: Vec<String> = self
            .allowed_hosts
            .iter()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .collect();
        v.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
            v.push(addr.ip().to_string());
        }
        Some(v)
    }

    /// Refuses a non-loopback address without an API key unless `--insecure-no-auth`.
    /// (`serve_http` logs the insecure case loudly.)
    pub(crate) fn check_exposure(&self, addr: SocketAddr) -> Result<(), ExecServerError> {
        let keyed = self.api_key.as_deref().is_some_and(|k| !k.is_empty());
        if addr.ip().is_loopback() || keyed {
            return Ok(());
        }
        if self.insecure_no_auth {
            return Ok(());
        }
        Err(ExecServerError::Config(format!(
            "refusing to serve {addr} without an API key: anyone who could reach it would run commands in the sandbox. Set --api-key (or API_KEY), bind a loopback address such as 127.0.0.1, or pass --insecure-no-auth on a network you trust"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_addresses() {
        let mut a = ExecServerArgs {
            http: Some(String::new()),
            port: 4000,
            ..Default::default()
        };
        assert_eq!(
            a.http_addr().ok().flatten().map(|s| s.to_string()),
            Some("127.0.0.1:4000".into())
        );
        a.http = Some("0.0.0.0:3005".into());
        assert_eq!(
            a.http_addr().ok().flatten().map(|s| s.to_string()),
            Some("0.0.0.0:3005".into())
        );
        a.http = Some("nonsense".into());
        assert!(a.http_addr().is_err());
        a.http = None;
        assert!(matches!(a.http_addr(), Ok(None)));
    }

    #[test]
    fn exposure_needs_a_key_or_the_insecure_flag() {
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap_or_else(|_| unreachable!());
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap_or_else(|_| unreachable!());
        let a = ExecServerArgs::default();
        assert!(a.check_exposure(lo).is_ok());
        assert!(a.check_exposure(any).is_err());
        let keyed = ExecServerArgs {
            api_key: Some("k".into()),
            ..Default::default()
        };
        assert!(keyed.check_exposure(any).is_ok());
        let empty_key = ExecServerArgs {
            api_key: Some(String::new()),
            ..Default::default()
        };
        assert!(empty_key.check_exposure(any).is_err());
        let insecure = ExecServerArgs {
            insecure_no_auth: true,
            ..Default::default()
        };
        assert!(insecure.check_exposure(any).is_ok());
    }

    #[test]
    fn huge_configured_timeouts_are_refused() {
        let a = ExecServerArgs {
            max_timeout: 1e300,
            ..Default::default()
        };
        assert!(a.validate().is_err());
        let a = ExecServerArgs {
            file_timeout: f64::NAN,
            ..Default::default()
        };
        assert!(a.validate().is_err());
    }

    #[test]
    fn hosts() {
        let a = ExecServerArgs::default();
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap_or_else(|_| unreachable!());
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap_or_else(|_| unreachable!());
        assert!(a.resolved_allowed_hosts(lo).is_some());
        // The Host check stays on for non-loopback addresses.
        assert!(a.resolved_allowed_hosts(any).is_some());
        let lan: SocketAddr = "10.1.2.3:1".parse().unwrap_or_else(|_| unreachable!());
        assert!(
            a.resolved_allowed_hosts(lan)
                .is_some_and(|v| v.contains(&"10.1.2.3".to_string()))
        );
        let star = ExecServerArgs {
            allowed_hosts: vec!["*".into()],
            ..Default::default()
        };
        assert!(star.resolved_allowed_hosts(any).is_none());
        let b = ExecServerArgs {
            allowed_hosts: vec!["exec_server".into()],
            ..Default::default()
        };
        assert!(
            b.resolved_allowed_hosts(any)
                .is_some_and(|v| v.contains(&"exec_server".to_string()))
        );
    }
}
