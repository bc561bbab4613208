//! The `Sandbox` facade.

use e2b_commands::Commands;
use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
use e2b_envd_version::EnvdVersion;
use e2b_filesystem::Filesystem;

use crate::control::{ControlPlane, CreateOptions};
use crate::error::SandboxError;

/// How a [`Sandbox::local_unisolated`] sandbox's own clients reach its embedded daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LocalTransport {
    /// gRPC calls go straight into the daemon's service in this process: no socket, no HTTP/2
    /// framing, no connection tasks (the daemon's code, checks and process handling are the
    /// same). Lower latency and CPU per byte; the default. REST calls (`/files`) still use the
    /// loopback port.
    #[default]
    InProcess,
    /// Every call goes over the daemon's loopback port (gRPC over h2c), exactly as an external
    /// client's would.
    Loopback,
}

/// One sandbox: an envd and the clients that talk to it.
///
/// Dropping a local sandbox ([`Sandbox::local`], [`Sandbox::local_unisolated`]) stops its
/// daemon and kills every process it started; dropping a connected sandbox only closes the connection.
#[derive(Debug)]
pub struct Sandbox {
    id: String,
    conn: EnvdConnection,
    commands: Commands,
    files: Filesystem,
    #[cfg(feature = "local")]
    local: Option<crate::local::LocalDaemon>,
    /// Set for an isolated local sandbox ([`Sandbox::local_isolated`]).
    #[cfg(feature = "local")]
    isolated: Option<crate::local::IsolatedDaemon>,
    /// Set for a sandbox created or connected through E2B's API.
    cloud: Option<crate::cloud::CloudSandbox>,
}

impl Sandbox {
    /// A local sandbox, isolated: the daemon runs as `e2b-envd --isolate --network internet`
    /// (a separate process in its own user, mount, PID, UTS, IPC and network namespaces, the
    /// `base` template's root filesystem with a private `/home/user` and `/tmp`, cgroup limits;
    /// see the project's docs/isolation.md), bound to a free loopback port with a random access
    /// token; this sandbox's clients call it over that port. What a command does stays inside:
    /// it cannot read your home directory, see or signal your processes, or outlive the
    /// sandbox. Dropping or killing the sandbox stops the daemon and every process in it.
    ///
    /// Linux with user namespaces, and `pasta` or `slirp4netns` for the network (or
    /// [`LocalOptions::network`](crate::LocalOptions::network) `None`). As root the sandbox
    /// has its own root and `user` (passwordless `sudo`) and cgroup limits; as any other user
    /// it has one account, `user` (your own ids, no root or `sudo` inside), and rlimits
    /// instead of cgroups (docs/isolation.md, "Unprivileged"). The daemon binary is
    /// found as [`LocalOptions::envd_bin`](crate::LocalOptions::envd_bin) says. Where any of that
    /// is missing, this fails saying what and how; it never falls back to an unisolated
    /// sandbox: [`local_unisolated`](Self::local_unisolated) is that, asked for explicitly.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Isolated`] naming what is missing (user namespaces, the NAT helper or
    /// access to `/dev/net/tun`, the binary) or why the daemon did not start.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a daemon started before the future is dropped is stopped.
    #[cfg(feature = "local")]
    pub async fn local() -> Result<Sandbox, SandboxError> {
        Self::local_with_options(crate::local::LocalOptions::default()).await
    }

    /// The same as [`local`](Self::local) (kept for callers that name the isolation).
    ///
    /// # Errors
    ///
    /// As [`local`](Self::local).
    ///
    /// # Cancel safety
    ///
    /// As [`local`](Self::local).
    #[cfg(feature = "local")]
    pub async fn local_isolated() -> Result<Sandbox, SandboxError> {
        Self::local_with_options(crate::local::LocalOptions::isolated()).await
    }

    /// An unisolated local sandbox: the embedded envd on `127.0.0.1:<free port>` in this
    /// process, with a random access token and a fresh temporary directory as the default
    /// working directory. Commands run directly on this machine as this user, with its powers
    /// (use it for your own trusted work, tests of the daemon, or where isolation cannot run;
    /// never for an untrusted agent). This sandbox's own clients call the daemon in-process
    /// ([`LocalTransport::InProcess`]), while the port serves everything outside the program
    /// (the official SDKs, `curl`). Needs no binary and no privileges.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Local`] when the daemon cannot start (no free port, no temporary
    /// directory, an invalid config).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future stops the daemon if it had started.
    #[cfg(feature = "local")]
    pub async fn local_unisolated() -> Result<Sandbox, SandboxError> {
        Self::local_with(e2b_envd::EnvdConfig::ephemeral()).await
    }

    /// A local sandbox with [`LocalOptions`](crate::LocalOptions): isolated (the default) or
    /// embedded ([`LocalOptions::unisolated`](crate::LocalOptions::unisolated)).
    ///
    /// # Errors
    ///
    /// As [`local`](Self::local) or [`local_unisolated`](Self::local_unisolated).
    ///
    /// # Cancel safety
    ///
    /// As [`local`](Self::local).
    #[cfg(feature = "local")]
    pub async fn local_with_options(
        opts: crate::local::LocalOptions,
    ) -> Result<Sandbox, SandboxError> {
        if !opts.isolated {
            return Self::local_unisolated().await;
        }
        let daemon = crate::local::IsolatedDaemon::start(&opts).await?;
        let endpoint = EnvdEndpoint::new(daemon.url()).access_token(daemon.access_token());
        let id = format!(
            "local-isolated-{}",
            daemon.url().rsplit(':').next().unwrap_or_default()
        );
        let conn = EnvdConnection::new(endpoint)?;
        Ok(Sandbox {
            id,
            commands: Commands::new(conn.clone()),
            files: Filesystem::new(conn.clone()),
            conn,
            local: None,
            isolated: Some(daemon),
            cloud: None,
        })
    }

    /// Like [`local_unisolated`](Self::local_unisolated) with your daemon configuration (an
    /// embedded, unisolated daemon). A config without an access token gets a random one;
    /// without a default workdir, a temporary directory.
    ///
    /// # Errors
    ///
    /// As [`local_unisolated`](Self::local_unisolated).
    ///
    /// # Cancel safety
    ///
    /// As [`local_unisolated`](Self::local_unisolated).
    #[cfg(feature = "local")]
    pub async fn local_with(config: e2b_envd::EnvdConfig) -> Result<Sandbox, SandboxError> {
        Self::local_with_transport(config, LocalTransport::InProcess).await
    }

    /// Like [`local_with`](Self::local_with), choosing how this sandbox's own clients reach the
    /// embedded daemon (see [`LocalTransport`]). The daemon serves its loopback port either way.
    ///
    /// # Errors
    ///
    /// As [`local_unisolated`](Self::local_unisolated).
    ///
    /// # Cancel safety
    ///
    /// As [`local_unisolated`](Self::local_unisolated).
    #[cfg(feature = "local")]
    pub async fn local_with_transport(
        config: e2b_envd::EnvdConfig,
        transport: LocalTransport,
    ) -> Result<Sandbox, SandboxError> {
        let daemon = crate::local::LocalDaemon::start(config).await?;
        let mut endpoint = EnvdEndpoint::new(daemon.url());
        if let Some(t) = daemon.access_token() {
            endpoint = endpoint.access_token(t);
        }
        if let Some(v) = daemon.envd_version()
            && let Ok(v) = v.parse::<EnvdVersion>()
        {
            endpoint = endpoint.envd_version(v);
        }
        let id = format!("local-{}", daemon.port());
        let conn = match (transport, daemon.local_service()) {
            (LocalTransport::InProcess, Some(service)) => {
                EnvdConnection::with_service(endpoint, service)?
            }
            _ => EnvdConnection::new(endpoint)?,
        };
        Ok(Sandbox {
            id,
            commands: Commands::new(conn.clone()),
            files: Filesystem::new(conn.clone()),
            conn,
            local: Some(daemon),
            isolated: None,
            cloud: None,
        })
    }

    /// Connects to any envd: our daemon elsewhere, or a real E2B sandbox (use
    /// [`Transport::GrpcWeb`](crate::Transport::GrpcWeb), the default for `https://` URLs).
    /// Nothing is dialled until the first call.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Envd`] with [`EnvdError::InvalidEndpoint`](e2b_envd_client::EnvdError::InvalidEndpoint)
    /// for a URL that is not `http://` or `https://`, or TLS roots that cannot be loaded.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is sent.
    pub async fn connect(endpoint: EnvdEndpoint) -> Result<Sandbox, SandboxError> {
        let conn = EnvdConnection::new(endpoint)?;
        let id = conn.sandbox_id().unwrap_or(conn.url()).to_owned();
        Ok(Self::remote(id, conn, None))
    }

    pub(crate) fn with_cloud(
        id: String,
        conn: EnvdConnection,
        cloud: crate::cloud::CloudSandbox,
    ) -> Sandbox {
        Self::remote(id, conn, Some(cloud))
    }

    /// A sandbox whose envd runs elsewhere (no embedded daemon).
    fn remote(
        id: String,
        conn: EnvdConnection,
        cloud: Option<crate::cloud::CloudSandbox>,
    ) -> Sandbox {
        Sandbox {
            id,
            commands: Commands::new(conn.clone()),
            files: Filesystem::new(conn.clone()),
            conn,
            #[cfg(feature = "local")]
            local: None,
            #[cfg(feature = "local")]
            isolated: None,
            cloud,
        }
    }

    pub(crate) fn cloud_handle(&self) -> Option<&crate::cloud::CloudSandbox> {
        self.cloud.as_ref()
    }

    /// Connects to the envd described by the environment: `E2B_SANDBOX_URL`, `E2B_ACCESS_TOKEN`,
    /// `E2B_SANDBOX_ID`, `E2B_ENVD_VERSION`, `E2B_DEBUG`, `E2B_ENVD_TRANSPORT`, `E2B_USER` (see
    /// the crate README).
    ///
    /// # Errors
    ///
    /// [`SandboxError::Config`] when a variable is missing or malformed (the message names it);
    /// otherwise as [`connect`](Self::connect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is sent.
    pub async fn from_env() -> Result<Sandbox, SandboxError> {
        Self::connect(Self::endpoint_from_env()?).await
    }

    /// The endpoint [`from_env`](Self::from_env) would connect to.
    pub fn endpoint_from_env() -> Result<EnvdEndpoint, SandboxError> {
        crate::env::endpoint_from(|k| std::env::var(k).ok())
    }

    /// Creates a sandbox through any [`ControlPlane`] and connects to it. For E2B's API use
    /// [`Sandbox::create`] or [`Sandbox::builder`].
    ///
    /// # Errors
    ///
    /// Whatever the control plane's [`create`](ControlPlane::create) returns; otherwise as
    /// [`connect`](Self::connect).
    ///
    /// # Cancel safety
    ///
    /// The control plane may have created the sandbox when the future is dropped; it then runs
    /// until its timeout (list and kill it through the control plane).
    pub async fn create_with(
        control_plane: &dyn ControlPlane,
        template: &str,
        opts: CreateOptions,
    ) -> Result<Sandbox, SandboxError> {
        let endpoint = control_plane.create(template, opts).await?;
        Self::connect(endpoint).await
    }

    /// The sandbox id (`local-<port>` for a local sandbox; the URL when none is known).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The envd version the sandbox runs (features are gated on it).
    pub fn envd_version(&self) -> &EnvdVersion {
        self.conn.envd_version()
    }

    /// envd's base URL.
    pub fn url(&self) -> &str {
        self.conn.url()
    }

    /// The connection, for clients this facade does not wrap.
    pub fn connection(&self) -> &EnvdConnection {
        &self.conn
    }

    /// Run and manage commands.
    pub fn commands(&self) -> &Commands {
        &self.commands
    }

    /// Read, write, list and watch files (`e2b-filesystem`). Relative paths resolve against the
    /// user's home (for a local sandbox, envd's rules apply as for commands).
    pub fn files(&self) -> &Filesystem {
        &self.files
    }

    /// An unisolated local sandbox's default working directory (a temporary directory on this
    /// machine), if it made one; `None` for an isolated sandbox (its files live in its own
    /// root: `/home/user`).
    #[cfg(feature = "local")]
    pub fn workdir(&self) -> Option<&std::path::Path> {
        self.local.as_ref().and_then(|l| l.workdir())
    }

    /// Whether this is the unisolated daemon embedded in this program
    /// ([`local_unisolated`](Self::local_unisolated)): its commands run on this machine.
    pub fn is_embedded(&self) -> bool {
        #[cfg(feature = "local")]
        {
            self.local.is_some()
        }
        #[cfg(not(feature = "local"))]
        {
            false
        }
    }

    /// Whether this is a local sandbox (isolated or embedded) that this program started.
    pub fn is_local(&self) -> bool {
        #[cfg(feature = "local")]
        {
            self.local.is_some() || self.isolated.is_some()
        }
        #[cfg(not(feature = "local"))]
        {
            false
        }
    }

    /// Stops the sandbox. For a local sandbox: kills every process (SIGKILL to each process
    /// group), waits until they are reaped, stops the daemon and removes the temporary workdir.
    /// For a sandbox from E2B's API ([`Sandbox::create`], [`Sandbox::connect_by_id`]): kills it
    /// through the API (a sandbox that is already gone is not an error). For a sandbox connected
    /// by URL this only drops the connection.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Api`] when E2B's API refuses the kill or cannot be reached (a sandbox
    /// already gone is not an error); a local or URL-connected sandbox never fails.
    ///
    /// # Cancel safety
    ///
    /// The request may have reached the API when the future is dropped; a local sandbox's daemon
    /// is stopped either way (the dropped sandbox stops it).
    pub async fn kill(self) -> Result<(), SandboxError> {
        if let Some(cloud) = &self.cloud {
            cloud.api.kill_sandbox(&self.id).await?;
        }
        #[cfg(feature = "local")]
        {
            let mut this = self;
            if let Some(local) = this.local.take() {
                local.shutdown().await;
            }
            if let Some(isolated) = this.isolated.take() {
                isolated.shutdown().await;
            }
        }
        Ok(())
    }
}
