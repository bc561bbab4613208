//! Command-line entry point, shared by the `e2b-envd` binary and `e2b envd`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::config::{DEFAULT_PORT, EnvdConfig, IMPLEMENTED_ENVD_VERSION};
use crate::error::DaemonError;
use crate::isolated::error as isolation_error;
use crate::server::{Envd, EnvdHandle};

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
    /// Run the daemon inside a sandbox of its own (Linux): its own user, mount, PID, UTS, IPC
    /// and network namespaces, a root filesystem from --template, cgroup limits (as root;
    /// rlimits and a single account, `user`, otherwise). This process stays on the host as
    /// its supervisor and serves the port. See docs/isolation.md.
    #[arg(long)]
    pub isolate: bool,
    /// With --isolate: the sandbox's network: `none` (loopback only), `internet` (outbound
    /// through slirp4netns or pasta, host loopback unreachable) or `host` (shared).
    #[arg(long, default_value = "internet", value_name = "none|internet|host")]
    pub network: String,
    /// With --isolate: memory limit of the sandbox in MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory_mb: u64,
    /// With --isolate: CPU limit in CPUs (default: none).
    #[arg(long)]
    pub cpu_count: Option<f64>,
    /// With --isolate: limit on processes and threads in the sandbox.
    #[arg(long, default_value_t = 1024)]
    pub pids_max: u64,
    /// With --isolate: root filesystem: `base` (the host's /usr read-only, private /home/user
    /// and /tmp), a root filesystem directory, a `docker export` tarball (.tar, .tar.gz,
    /// .tgz) or an OCI image layout directory; archives are unpacked once into
    /// $E2B_CACHE/templates (else ~/.cache/e2b/templates).
    #[arg(long, default_value = "base", value_name = "base|DIR|TARBALL|OCI-DIR")]
    pub template: String,
    /// With --isolate: the sandbox id (its hostname). Default: a random `sbx-…` id.
    #[arg(long)]
    pub sandbox_id: Option<String>,
    /// With --isolate: show a host path read-only inside the sandbox, at the same path or at
    /// SANDBOX (repeatable), e.g. an agent installed under a directory the template hides.
    #[arg(long = "mount-ro", value_name = "HOST[:SANDBOX]")]
    pub mount_ro: Vec<String>,
    /// Internal: why the sandbox's limits are weaker than asked (set by the isolation
    /// supervisor for the daemon inside); shown by `/health`.
    #[arg(long, hide = true, env = e2b_isolation::LIMITS_NOTE_ENV)]
    pub limits_note: Option<String>,
    /// Internal: serve this inherited listening socket (set by --isolate inside the sandbox).
    #[arg(long, hide = true, env = "E2B_ENVD_LISTEN_FD")]
    pub listen_fd: Option<i32>,
}

impl EnvdArgs {
    /// Same as [`isolated::enter_if_child`](crate::isolated::enter_if_child).
    pub fn enter_sandbox_if_child() {
        crate::isolated::enter_if_child();
    }

    /// Same as [`isolated::spawn`](crate::isolated::spawn) (which needs no `cli` feature).
    ///
    /// # Errors
    ///
    /// As [`isolated::spawn`](crate::isolated::spawn).
    pub fn spawn_isolated(
        program: &std::path::Path,
        prefix: &[&str],
        extra: &[String],
    ) -> Result<(String, std::process::Child), DaemonError> {
        crate::isolated::spawn(program, prefix, extra)
    }

    /// Same as [`isolated::spawn_with_env`](crate::isolated::spawn_with_env) (which needs no
    /// `cli` feature).
    ///
    /// # Errors
    ///
    /// As [`isolated::spawn`](crate::isolated::spawn).
    pub fn spawn_isolated_with_env(
        program: &std::path::Path,
        prefix: &[&str],
        extra: &[String],
        env: &[(String, String)],
    ) -> Result<(String, std::process::Child), DaemonError> {
        crate::isolated::spawn_with_env(program, prefix, extra, env)
    }

    /// Same as [`isolated::check`](crate::isolated::check) (which needs no `cli` feature).
    ///
    /// # Errors
    ///
    /// As [`isolated::check`](crate::isolated::check).
    pub fn check_isolation(network: &str) -> Result<(), DaemonError> {
        crate::isolated::check(network)
    }

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
            limits_note: self.limits_note.clone(),
            ..EnvdConfig::default()
        }
    }

    /// Like [`to_config`](Self::to_config), with the token read from
    /// [`access_token_file`](Self::access_token_file) when one is given.
    ///
    /// # Errors
    ///
    /// [`DaemonError::Config`] when the token file cannot be read or is empty.
    pub fn resolve_config(&self) -> Result<EnvdConfig, DaemonError> {
        let mut config = self.to_config();
        if let Some(path) = &self.access_token_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                DaemonError::Config(format!(
                    "cannot read the access token file '{}': {e}",
                    path.display()
                ))
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(DaemonError::Config(format!(
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
pub async fn run_cli(args: EnvdArgs) -> Result<(), DaemonError> {
    if let Some(fd) = args.listen_fd {
        return run_in_sandbox(args, fd).await;
    }
    if args.isolate {
        return run_isolated(args).await;
    }
    let handle = Envd::start(args.resolve_config()?).await?;
    println!("{}", handle.url());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    serve_until_signal(handle).await
}

/// Serves until SIGINT or SIGTERM, then shuts the daemon down gracefully. Freed heap memory
/// goes back to the OS whenever the daemon is idle meanwhile (see `memory`).
async fn serve_until_signal(handle: EnvdHandle) -> Result<(), DaemonError> {
    let trimmer = crate::memory::spawn_idle_trim();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    trimmer.abort();
    handle.shutdown().await;
    Ok(())
}

/// `--isolate`: binds the port on the host, starts the sandbox with this same command line
/// inside it (the daemon finds the inherited socket in `E2B_ENVD_LISTEN_FD`), prints the URL,
/// forwards SIGINT/SIGTERM, and exits with the sandbox.
async fn run_isolated(args: EnvdArgs) -> Result<(), DaemonError> {
    use std::os::fd::AsRawFd as _;
    let network: e2b_isolation::Network = args.network.parse().map_err(DaemonError::Config)?;
    let template: e2b_isolation::Template = args.template.parse().map_err(DaemonError::Config)?;
    let addr = SocketAddr::new(args.bind, args.port);
    let listener =
        std::net::TcpListener::bind(addr).map_err(|source| DaemonError::Bind { addr, source })?;
    let local = listener.local_addr()?;
    let id = args.sandbox_id.clone().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("sbx-{:08x}", nanos ^ std::process::id().rotate_left(16))
    });
    let mut spec = e2b_isolation::SandboxSpec::new(id)
        .network(network)
        .template(template)
        .memory_mb(args.memory_mb)
        .cpu_count(args.cpu_count)
        .pids_max(args.pids_max)
        .env("E2B_ENVD_LISTEN_FD", listener.as_raw_fd().to_string());
    for m in &args.mount_ro {
        spec = spec.ro_mount(m.parse().map_err(DaemonError::Config)?);
    }
    // Settings given through the environment reach the daemon inside too.
    for (k, v) in std::env::vars() {
        if (k.starts_with("E2B_ENVD_") && k != "E2B_ENVD_LISTEN_FD") || k == "RUST_BACKTRACE" {
            spec = spec.env(k, v);
        }
    }
    if network == e2b_isolation::Network::Host {
        tracing::warn!("--network host: the sandbox shares the host's network");
    }
    let program = std::env::current_exe()?;
    let argv: Vec<String> = std::env::args().collect();
    let fd = listener.as_raw_fd();
    let mut sandbox = tokio::task::spawn_blocking(move || {
        e2b_isolation::IsolatedSandbox::spawn(&spec, &program, &argv, &[fd])
    })
    .await
    .map_err(isolation_error)?
    .map_err(isolation_error)?;
    drop(listener);
    if let Some(note) = &sandbox.limits().note {
        eprintln!("e2b-envd: sandbox {}: {note}", sandbox.id());
    }
    tracing::info!(
        sandbox = sandbox.id(),
        pid = sandbox.pid(),
        "sandbox started"
    );
    println!("http://{local}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
    let status = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break None,
            _ = term.recv() => break None,
            _ = tick.tick() => {
                if let Some(status) = sandbox.try_wait().map_err(isolation_error)? {
                    break Some(status);
                }
            }
        }
    };
    let mut asked_to_stop = false;
    let status = match status {
        Some(status) => status,
        None => {
            asked_to_stop = true;
            // Graceful: the daemon inside kills its processes; then everything else goes.
            let _ = sandbox.signal(libc::SIGTERM);
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(6);
            loop {
                if let Some(status) = sandbox.try_wait().map_err(isolation_error)? {
                    break status;
                }
                if tokio::time::Instant::now() > deadline {
                    break sandbox.kill().map_err(isolation_error)?;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    let code = e2b_isolation::IsolatedSandbox::exit_code(status);
    if code != 0 && !asked_to_stop {
        return Err(isolation_error(format!(
            "the sandboxed daemon exited with code {code}"
        )));
    }
    Ok(())
}

/// Inside the sandbox: the daemon listens on the sandbox's own loopback (port 49983, as in an
/// E2B sandbox) and serves the socket the supervisor bound on the host.
async fn run_in_sandbox(args: EnvdArgs, fd: i32) -> Result<(), DaemonError> {
    use std::os::fd::FromRawFd as _;
    let mut config = args.to_config();
    if config.default_user.is_none() {
        config.default_user = Some("user".into());
    }
    // SAFETY: the supervisor passed this listening socket under this number for us alone.
    let std_listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    std_listener.set_nonblocking(true)?;
    let mut listeners = vec![tokio::net::TcpListener::from_std(std_listener)?];
    if args.network != "host" {
        // Inside its own network namespace the daemon also answers on the sandbox's loopback
        // at envd's port, as in an E2B sandbox.
        let inner = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT));
        listeners.push(
            tokio::net::TcpListener::bind(inner)
                .await
                .map_err(|source| DaemonError::Bind {
                    addr: inner,
                    source,
                })?,
        );
    }
    // The same server as on the host: Host/Origin guard, connection limits and timeouts apply.
    let handle = Envd::start_on(listeners, config).await?;
    serve_until_signal(handle).await
}
