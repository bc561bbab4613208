//! The embedded daemon behind `Sandbox::local()`.

use std::path::{Path, PathBuf};

use e2b_envd::{Envd, EnvdConfig, EnvdHandle};

use crate::error::SandboxError;

pub(crate) struct LocalDaemon {
    // Dropped first: stops the server and kills every process group it started.
    handle: Option<EnvdHandle>,
    workdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for LocalDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalDaemon")
            .field("url", &self.handle.as_ref().map(EnvdHandle::url))
            .field(
                "workdir",
                &self.workdir.as_ref().map(tempfile::TempDir::path),
            )
            .finish()
    }
}

fn random_token() -> String {
    use rand::Rng as _;
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl LocalDaemon {
    /// Starts the daemon. A config without a token gets a random one; without a default
    /// workdir, a fresh temporary directory (removed when the sandbox goes).
    pub(crate) async fn start(mut config: EnvdConfig) -> Result<Self, SandboxError> {
        if config.access_token.is_none() {
            config.access_token = Some(random_token());
        }
        let workdir = if config.default_workdir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("e2b-sandbox-")
                .tempdir()
                .map_err(|e| SandboxError::Local {
                    message: "cannot create a workdir",
                    source: Box::new(e),
                })?;
            config.default_workdir = Some(dir.path().to_path_buf());
            Some(dir)
        } else {
            None
        };
        let handle = Envd::start(config).await.map_err(|e| SandboxError::Local {
            message: "cannot start the daemon",
            source: Box::new(e),
        })?;
        Ok(Self {
            handle: Some(handle),
            workdir,
        })
    }

    pub(crate) fn url(&self) -> String {
        self.handle
            .as_ref()
            .map(EnvdHandle::url)
            .unwrap_or_default()
    }

    pub(crate) fn access_token(&self) -> Option<String> {
        self.handle.as_ref().and_then(EnvdHandle::access_token)
    }

    pub(crate) fn port(&self) -> u16 {
        self.handle.as_ref().map_or(0, |h| h.local_addr().port())
    }

    /// The daemon as an in-process service (its gRPC calls skip the loopback socket).
    pub(crate) fn local_service(&self) -> Option<e2b_envd::LocalService> {
        self.handle.as_ref().map(EnvdHandle::local_service)
    }

    pub(crate) fn envd_version(&self) -> Option<String> {
        self.handle.as_ref().map(|h| h.envd_version().to_owned())
    }

    pub(crate) fn workdir(&self) -> Option<&Path> {
        self.workdir.as_ref().map(tempfile::TempDir::path)
    }

    /// Graceful stop: every process killed and reaped, then the server stopped.
    pub(crate) async fn shutdown(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
    }
}

impl Drop for LocalDaemon {
    fn drop(&mut self) {
        // The handle's own Drop kills every process group; do it before removing the workdir.
        drop(self.handle.take());
        drop(self.workdir.take());
    }
}

/// The network of an isolated local sandbox ([`LocalOptions::network`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LocalNetwork {
    /// Its own network namespace with outbound access through a user-mode NAT (`pasta` or
    /// `slirp4netns`), without the host's loopback: E2B's default (`allow_internet_access`).
    #[default]
    Internet,
    /// Its own network namespace with only a loopback interface: nothing leaves it.
    None,
    /// The host's network namespace, shared: the sandbox reaches every host port.
    Host,
}

impl LocalNetwork {
    /// The daemon flag's value (`--network internet|none|host`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Internet => "internet",
            Self::None => "none",
            Self::Host => "host",
        }
    }
}

impl std::str::FromStr for LocalNetwork {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "internet" => Ok(Self::Internet),
            "none" => Ok(Self::None),
            "host" => Ok(Self::Host),
            other => Err(format!(
                "unknown network {other:?}: expected internet, none or host"
            )),
        }
    }
}

/// Options of a local sandbox started with [`Sandbox::local_with_options`](crate::Sandbox::local_with_options).
///
/// The default is isolated, as [`Sandbox::local`](crate::Sandbox::local) is: the daemon runs
/// as `e2b-envd --isolate` in its own namespaces, root filesystem and limits.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalOptions {
    pub(crate) isolated: bool,
    pub(crate) network: LocalNetwork,
    pub(crate) template: Option<String>,
    pub(crate) mounts_ro: Vec<String>,
    pub(crate) envd_bin: Option<PathBuf>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self::isolated()
    }
}

impl LocalOptions {
    /// Options for an isolated local sandbox (the default): the daemon runs as `e2b-envd
    /// --isolate` (its own user, mount, PID, UTS, IPC and network namespaces, the `base`
    /// template, cgroup limits; Linux, root; see the project's docs/isolation.md).
    pub fn isolated() -> Self {
        Self {
            isolated: true,
            network: LocalNetwork::default(),
            template: None,
            mounts_ro: Vec::new(),
            envd_bin: None,
        }
    }

    /// Options for an unisolated local sandbox: the daemon is embedded in this process and
    /// commands run directly on this machine as this user, as
    /// [`Sandbox::local_unisolated`](crate::Sandbox::local_unisolated).
    pub fn unisolated() -> Self {
        Self {
            isolated: false,
            ..Self::isolated()
        }
    }

    /// Sets the isolated sandbox's network. Default: [`LocalNetwork::Internet`] (needs `pasta`
    /// or `slirp4netns`; starting fails naming the package otherwise).
    pub fn network(mut self, network: LocalNetwork) -> Self {
        self.network = network;
        self
    }

    /// Sets the isolated sandbox's root filesystem: `base` (the default: the host's system
    /// directories read-only, a private `/home/user` and `/tmp`), a root filesystem directory,
    /// a `docker export` tarball (`.tar`, `.tar.gz`) or an OCI image layout directory (unpacked
    /// once into a cache and shared read-only; see the project's docs/isolation.md).
    pub fn template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }

    /// Adds a host path shown read-only inside an isolated sandbox, as `HOST[:SANDBOX]`.
    /// Default: none.
    pub fn mount_ro(mut self, spec: impl Into<String>) -> Self {
        self.mounts_ro.push(spec.into());
        self
    }

    /// Sets the daemon binary for an isolated sandbox (`e2b-envd`, or `e2b`, which is run as
    /// `e2b envd`). Default: `E2B_ENVD_BIN`, else `e2b-envd` next to this program (or one
    /// directory up, for test binaries in `target/*/deps`), else on `PATH`. The `e2b` CLI uses
    /// itself (`e2b envd`).
    pub fn envd_bin(mut self, path: impl Into<PathBuf>) -> Self {
        self.envd_bin = Some(path.into());
        self
    }
}

/// The daemon binary for an isolated sandbox and the arguments before its flags.
fn find_envd_bin(explicit: Option<&Path>) -> Result<(PathBuf, Vec<&'static str>), SandboxError> {
    let prefix = |p: &Path| -> Vec<&'static str> {
        if p.file_name().is_some_and(|n| n == "e2b") {
            vec!["envd"]
        } else {
            Vec::new()
        }
    };
    if let Some(p) = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("E2B_ENVD_BIN").map(PathBuf::from))
    {
        return if p.is_file() {
            let pre = prefix(&p);
            Ok((p, pre))
        } else {
            Err(SandboxError::Isolated(format!(
                "the envd binary {} does not exist (E2B_ENVD_BIN or LocalOptions::envd_bin)",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().ok();
    // The `e2b` CLI has the daemon built in (`e2b envd`).
    if let Some(exe) = exe
        .as_ref()
        .filter(|e| e.file_name().is_some_and(|n| n == "e2b"))
    {
        return Ok((exe.clone(), vec!["envd"]));
    }
    let mut dirs = Vec::new();
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        dirs.push(dir.to_path_buf());
        if let Some(up) = dir.parent() {
            dirs.push(up.to_path_buf());
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join("e2b-envd"))
        .find(|p| p.is_file())
        .map(|p| (p, Vec::new()))
        .ok_or_else(|| {
            SandboxError::Isolated(
                "an isolated local sandbox needs the e2b-envd binary: set E2B_ENVD_BIN, put it \
                 next to this program or on PATH (cargo install e2b-envd)"
                    .into(),
            )
        })
}

/// A daemon started as `e2b-envd --isolate` for [`LocalOptions::isolated`] (the default).
pub(crate) struct IsolatedDaemon {
    child: Option<std::process::Child>,
    url: String,
    token: String,
}

impl std::fmt::Debug for IsolatedDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsolatedDaemon")
            .field("url", &self.url)
            .field("pid", &self.child.as_ref().map(std::process::Child::id))
            .finish()
    }
}

impl IsolatedDaemon {
    pub(crate) async fn start(opts: &LocalOptions) -> Result<Self, SandboxError> {
        let network = opts.network.as_str();
        e2b_envd::isolated::check(network).map_err(|e| SandboxError::Isolated(e.to_string()))?;
        let (bin, prefix) = find_envd_bin(opts.envd_bin.as_deref())?;
        let token = random_token();
        let mut extra = vec!["--network".to_string(), network.to_string()];
        if let Some(t) = &opts.template {
            extra.push("--template".into());
            extra.push(t.clone());
        }
        for m in &opts.mounts_ro {
            extra.push("--mount-ro".into());
            extra.push(m.clone());
        }
        let env = vec![("E2B_ENVD_ACCESS_TOKEN".to_string(), token.clone())];
        // The daemon is owned (and its Drop kills it) inside the blocking task: a caller that
        // drops this future while the daemon starts does not leave it running.
        tokio::task::spawn_blocking(move || {
            let (url, child) = e2b_envd::isolated::spawn_with_env(&bin, &prefix, &extra, &env)
                .map_err(|e| SandboxError::Isolated(e.to_string()))?;
            Ok(Self {
                child: Some(child),
                url,
                token,
            })
        })
        .await
        .map_err(|e| SandboxError::Isolated(format!("start the isolated daemon: {e}")))?
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn access_token(&self) -> &str {
        &self.token
    }

    /// SIGTERM (the supervisor stops the sandbox and removes its cgroups), SIGKILL after 6 s.
    pub(crate) async fn shutdown(mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&child);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(6);
            while matches!(child.try_wait(), Ok(None)) {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

fn terminate(child: &std::process::Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain kill of our own, unreaped child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

impl Drop for IsolatedDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&child);
            // A short wait here lets the supervisor remove its sandbox's cgroups even when the
            // program exits right after the drop (its parent-death signal would cut that
            // short); a supervisor that needs longer is reaped off the caller's thread, and
            // killed if it does not stop in time.
            if wait_until(&mut child, std::time::Duration::from_secs(1)) {
                return;
            }
            let _ = std::thread::Builder::new()
                .name("e2b-isolated-reaper".into())
                .spawn(move || {
                    if !wait_until(&mut child, std::time::Duration::from_secs(5)) {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                });
        }
    }
}

/// Polls `child` until it exits (true) or `limit` passes (false).
fn wait_until(child: &mut std::process::Child, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if std::time::Instant::now() >= deadline => return false,
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
}
