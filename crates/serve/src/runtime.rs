//! The runtime seam: how a sandbox's envd is started, frozen, thawed, measured and killed.
//!
//! [`PlainRuntime`] runs each sandbox as its own envd process on an ephemeral loopback port, as
//! PID 1 of its own PID namespace where the machine allows it (see `pidns`). An isolated
//! runtime (namespaces, a template root, cgroup limits) implements the same two traits.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::Signal;
use tokio::io::AsyncBufReadExt as _;
use tokio::process::{Child, Command};

use crate::error::ServeError;
use crate::proctree;

/// How long a new envd may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What the runtime needs to start one sandbox.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SandboxSpec {
    /// The sandbox id (`[a-z0-9]+`).
    pub id: String,
    /// A directory that belongs to this sandbox alone (removed when it is killed).
    pub dir: PathBuf,
    /// Whether the sandbox may reach the internet (E2B's `allow_internet_access`, default
    /// `true`). Isolated sandboxes get `--network internet` (a user-mode NAT helper) or
    /// `--network none` (loopback only); plain ones share the machine's network either way.
    pub allow_internet_access: bool,
}

/// Resources a sandbox used at one moment.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct Usage {
    /// CPU time used by all of the sandbox's processes since it started, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory of all of the sandbox's processes, in bytes.
    pub memory_bytes: u64,
    /// Bytes used and total of the sandbox's own filesystem, when it has one (an isolated
    /// sandbox's root). `None`: the registry reports the filesystem of the sandbox's directory.
    pub disk: Option<(u64, u64)>,
}

/// The size of each isolated sandbox: its memory limit (also the size of its writable
/// filesystem) and its CPU quota. E2B's equivalent is a template's `memoryMB` and `cpuCount`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SandboxLimits {
    memory_mb: u64,
    cpu_count: Option<f64>,
}

impl SandboxLimits {
    /// Memory of a sandbox when none is given (MiB), as `e2b envd --isolate`'s default.
    pub const DEFAULT_MEMORY_MB: u64 = 2048;
    /// The least memory a sandbox may have (MiB): envd and a shell need about 30.
    pub const MIN_MEMORY_MB: u64 = 64;
    /// The most memory a sandbox may be given (MiB): 16 TiB.
    pub const MAX_MEMORY_MB: u64 = 16 << 20;

    /// `memory_mb` MiB of memory and writable filesystem; `cpu_count` CPUs (fractions allowed)
    /// or no CPU limit.
    ///
    /// # Errors
    ///
    /// [`ServeError::Config`] naming the accepted range when `memory_mb` is outside
    /// [`MIN_MEMORY_MB`](Self::MIN_MEMORY_MB)..=[`MAX_MEMORY_MB`](Self::MAX_MEMORY_MB) or
    /// `cpu_count` is not a positive number.
    pub fn new(memory_mb: u64, cpu_count: Option<f64>) -> Result<Self, ServeError> {
        if !(Self::MIN_MEMORY_MB..=Self::MAX_MEMORY_MB).contains(&memory_mb) {
            return Err(ServeError::Config(format!(
                "--memory-mb {memory_mb}: a sandbox needs between {} and {} MiB",
                Self::MIN_MEMORY_MB,
                Self::MAX_MEMORY_MB
            )));
        }
        if let Some(c) = cpu_count
            && !(c.is_finite() && c > 0.0 && c <= 1e6)
        {
            return Err(ServeError::Config(format!(
                "--cpu-count {c}: give a positive number of CPUs, such as 2 or 0.5"
            )));
        }
        Ok(Self {
            memory_mb,
            cpu_count,
        })
    }

    /// Memory limit and writable filesystem size, in MiB.
    pub fn memory_mb(&self) -> u64 {
        self.memory_mb
    }

    /// CPU quota in CPUs; `None`: not limited.
    pub fn cpu_count(&self) -> Option<f64> {
        self.cpu_count
    }
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory_mb: Self::DEFAULT_MEMORY_MB,
            cpu_count: None,
        }
    }
}

impl std::fmt::Display for SandboxLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} MiB of memory and of disk, ", self.memory_mb)?;
        match self.cpu_count {
            Some(1.0) => write!(f, "1 CPU"),
            Some(c) => write!(f, "{c} CPUs"),
            None => write!(f, "CPU not limited"),
        }
    }
}

/// Starts sandboxes. Implementations must be cheap to share between tasks.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// A short name for logs and `e2b serve`'s banner (`plain`, `isolated`).
    fn name(&self) -> &'static str;

    /// Whether each sandbox has a network of its own, so that one without internet access
    /// (`allow_internet_access: false`) can be made. `false`: sandboxes share the machine's
    /// network, and `e2b serve` refuses to create one that asks to be cut off.
    fn isolates_network(&self) -> bool {
        false
    }

    /// Starts the envd of a new sandbox and returns once it accepts connections. `e2b serve`
    /// then sends it `POST /init` (default user, working directory, env vars, access token).
    ///
    /// # Errors
    ///
    /// [`ServeError::Spawn`] when the daemon cannot be started or does not come up in time.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills a half-started daemon (its child handle is `kill_on_drop`).
    async fn spawn(&self, spec: SandboxSpec) -> Result<Box<dyn Instance>, ServeError>;
}

/// One running sandbox, as its runtime controls it.
#[async_trait]
pub trait Instance: Send + Sync + 'static {
    /// The loopback address of the sandbox's envd.
    fn envd_addr(&self) -> SocketAddr;
    /// The user commands run as by default (sent as `defaultUser` in `/init`).
    fn default_user(&self) -> String;
    /// The working directory of commands that name none (sent as `defaultWorkdir`).
    fn default_workdir(&self) -> String;
    /// Freezes every process of the sandbox, envd included.
    ///
    /// # Errors
    ///
    /// [`ServeError::Control`] when the processes cannot be signalled.
    fn pause(&self) -> Result<(), ServeError>;
    /// Thaws what [`pause`](Self::pause) froze.
    ///
    /// # Errors
    ///
    /// [`ServeError::Control`] when the processes cannot be signalled.
    fn resume(&self) -> Result<(), ServeError>;
    /// CPU time and memory of all of the sandbox's processes.
    fn usage(&self) -> Usage;
    /// Kills every process of the sandbox and waits until they are gone.
    ///
    /// # Cancel safety
    ///
    /// The SIGKILL is sent before the first await: dropping the future only skips the wait.
    async fn kill(&self);
    /// A process inside the sandbox's own network namespace, when it has one (the edge
    /// connects to the sandbox's user ports from there). `None`: the sandbox shares the
    /// machine's network.
    fn netns_pid(&self) -> Option<i32> {
        None
    }
    /// The sandbox's size when the runtime holds it to one (`None`: the machine's).
    fn limits(&self) -> Option<SandboxLimits> {
        None
    }
}

/// How the runtime runs envd: a program and the arguments that select its envd mode. With the
/// `e2b` binary this is `e2b serve envd`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnvdCommand {
    /// The program (an absolute path is best).
    pub program: PathBuf,
    /// Arguments that make `program` run envd; `e2b serve` appends `--port 0 --bind 127.0.0.1`
    /// and `--user-alias user`.
    pub envd_args: Vec<OsString>,
}

impl EnvdCommand {
    /// The `e2b-serve` or `e2b` binary running now: `<exe> <prefix> envd`, where `prefix` is
    /// what reaches [`ServeArgs`](crate::ServeArgs) (empty for `e2b-serve`, `serve` for `e2b`).
    ///
    /// # Errors
    ///
    /// [`ServeError::Io`] when the path of the running program cannot be found.
    pub fn current_exe(prefix: &[&str]) -> Result<Self, ServeError> {
        let program = std::env::current_exe()?;
        let mut envd_args: Vec<OsString> = prefix.iter().map(OsString::from).collect();
        envd_args.push("envd".into());
        Ok(Self { program, envd_args })
    }

    /// `program` run as `program <envd_args> ...` (for example `e2b-envd` with no arguments).
    pub fn envd(program: impl Into<PathBuf>, envd_args: Vec<OsString>) -> Self {
        Self {
            program: program.into(),
            envd_args,
        }
    }
}

/// The command line without the flags `e2b serve` adds, as `/usr/bin/e2b serve envd`.
impl std::fmt::Display for EnvdCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.envd_args {
            write!(f, " {}", arg.to_string_lossy())?;
        }
        Ok(())
    }
}

/// The process runtime: each sandbox is an envd process (own port, own process table, own
/// working directory, own access token), PID 1 of a PID namespace of its own where the machine
/// allows it (root); pause = SIGSTOP of the whole process tree.
///
/// Plain ([`PlainRuntime::new`]): no filesystem or network isolation. Isolated
/// ([`PlainRuntime::isolated`]): envd runs with `--isolate` (crate `e2b-isolation`: its own
/// user, mount, PID, UTS, IPC and network namespaces, the `base` root with a private
/// `/home/user` and `/tmp`, cgroup limits), so a sandbox sees only itself and `user` has
/// passwordless sudo. See `docs/control-plane.md`.
#[derive(Debug, Clone)]
pub struct PlainRuntime {
    command: EnvdCommand,
    /// `Some`: isolated sandboxes of this size.
    limits: Option<SandboxLimits>,
}

impl PlainRuntime {
    /// A plain runtime that starts envd with `command`.
    pub fn new(command: EnvdCommand) -> Self {
        Self {
            command,
            limits: None,
        }
    }

    /// A runtime whose sandboxes are isolated (`envd --isolate`), of the default size
    /// ([`SandboxLimits::default`]: 2 GiB, CPU not limited). The program must call
    /// `e2b_isolation::run_if_child()` first thing in `main`; check the machine with
    /// [`isolation_available`] first.
    pub fn isolated(command: EnvdCommand) -> Self {
        Self::isolated_with(command, SandboxLimits::default())
    }

    /// [`isolated`](Self::isolated) sandboxes of size `limits` (envd's `--memory-mb` and
    /// `--cpu-count`), which info, list and metrics then report.
    pub fn isolated_with(command: EnvdCommand, limits: SandboxLimits) -> Self {
        Self {
            command,
            limits: Some(limits),
        }
    }

    pub(crate) fn is_isolated(&self) -> bool {
        self.limits.is_some()
    }
}

/// Whether this machine can run isolated sandboxes (`Err` says what is missing).
///
/// # Errors
///
/// The reason isolation is unavailable (not root, no user namespaces, ...).
pub fn isolation_available() -> Result<(), String> {
    e2b_isolation::probe()
        .check(e2b_isolation::Network::None)
        .map_err(|e| e.to_string())
}

#[async_trait]
impl Runtime for PlainRuntime {
    fn name(&self) -> &'static str {
        if self.is_isolated() {
            "isolated"
        } else {
            "plain"
        }
    }

    fn isolates_network(&self) -> bool {
        self.is_isolated()
    }

    async fn spawn(&self, spec: SandboxSpec) -> Result<Box<dyn Instance>, ServeError> {
        let home = spec.dir.join("home");
        std::fs::create_dir_all(&home)
            .map_err(|e| ServeError::Spawn(format!("cannot create {}: {e}", home.display())))?;
        // When the machine has a real `user` account and we are root, envd runs commands as
        // that account: give it the sandbox's working directory.
        if nix::unistd::Uid::effective().is_root()
            && let Ok(Some(u)) = nix::unistd::User::from_name("user")
        {
            let _ = nix::unistd::chown(&home, Some(u.uid), Some(u.gid));
        }
        let c = &self.command;
        let mut envd: Vec<OsString> = vec![c.program.clone().into_os_string()];
        envd.extend(c.envd_args.iter().cloned());
        for a in ["--port", "0", "--bind", "127.0.0.1"] {
            envd.push(a.into());
        }
        if let Some(limits) = &self.limits {
            let network = isolated_network(spec.allow_internet_access);
            for a in ["--isolate", "--network", network, "--sandbox-id", &spec.id] {
                envd.push(a.into());
            }
            envd.push("--memory-mb".into());
            envd.push(limits.memory_mb.to_string().into());
            if let Some(c) = limits.cpu_count {
                envd.push("--cpu-count".into());
                envd.push(c.to_string().into());
            }
        } else {
            for a in ["--user-alias", "user", "--default-workdir"] {
                envd.push(a.into());
            }
            envd.push(home.clone().into_os_string());
        }
        let mut cmd = Command::new(&c.program);
        cmd.args(&envd[1..]);
        cmd.current_dir(&home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .process_group(0);
        // Nothing of the control plane's own settings reaches the sandbox.
        for var in [
            "E2B_API_KEY",
            "E2B_ACCESS_TOKEN",
            "E2B_ENVD_ACCESS_TOKEN",
            "E2B_ENVD_PORT",
            "E2B_ENVD_BIND",
            "E2B_ENVD_ROOT",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("E2B_SANDBOX_ID", &spec.id);
        // SAFETY: the closure only calls prctl, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        // An isolated envd builds its own PID namespace (and reads /proc by pid): it is started
        // in ours, where the host's /proc shows its pids.
        let started = crate::pidns::spawn(cmd, !self.is_isolated())
            .await
            .map_err(|e| {
                ServeError::Spawn(format!(
                    "cannot run {}: {e}; set the envd program (e2b serve --envd-program)",
                    c.program.display()
                ))
            })?;
        tracing::debug!(
            sandbox = %spec.id,
            pid = started.child.id(),
            own_pid_namespace = started.own_pid_namespace,
            "envd started"
        );
        let mut child = started.child;
        let Some(stdout) = child.stdout.take() else {
            return Err(ServeError::Spawn("envd's stdout is not a pipe".into()));
        };
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = match tokio::time::timeout(START_TIMEOUT, lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                return Err(ServeError::Spawn(format!(
                    "envd exited before listening ({}); run `{} {}` by hand to see why",
                    status.map(|s| s.to_string()).unwrap_or_default(),
                    c.program.display(),
                    c.envd_args
                        .iter()
                        .map(|a| a.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" ")
                )));
            }
            Ok(Err(e)) => return Err(ServeError::Spawn(format!("reading envd's address: {e}"))),
            Err(_) => {
                return Err(ServeError::Spawn(format!(
                    "envd printed no address within {START_TIMEOUT:?}"
                )));
            }
        };
        let addr = parse_url_addr(&line).ok_or_else(|| {
            ServeError::Spawn(format!("envd printed {line:?}, not an http://IP:PORT URL"))
        })?;
        // Keep draining envd's stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        Ok(Box::new(PlainInstance {
            addr,
            pid,
            limits: self.limits,
            root: std::sync::OnceLock::new(),
            home: if self.is_isolated() {
                "/home/user".into()
            } else {
                home.to_string_lossy().into_owned()
            },
            child: tokio::sync::Mutex::new(child),
        }))
    }
}

/// The `--network` of an isolated sandbox: `internet` when it may reach the internet and this
/// machine has a NAT helper (slirp4netns or pasta), else `none` (loopback only; said once in
/// the log when internet access was asked for but cannot be given).
fn isolated_network(allow_internet_access: bool) -> &'static str {
    static NO_NAT: std::sync::Once = std::sync::Once::new();
    if !allow_internet_access {
        return "none";
    }
    match e2b_isolation::probe().check(e2b_isolation::Network::Internet) {
        Ok(()) => "internet",
        Err(e) => {
            NO_NAT.call_once(|| {
                tracing::warn!("isolated sandboxes get no internet access: {e}");
            });
            "none"
        }
    }
}

fn parse_url_addr(line: &str) -> Option<SocketAddr> {
    line.trim()
        .strip_prefix("http://")?
        .trim_end_matches('/')
        .parse()
        .ok()
}

struct PlainInstance {
    addr: SocketAddr,
    pid: i32,
    /// `Some`: isolated, of this size.
    limits: Option<SandboxLimits>,
    /// An isolated sandbox's root directory, opened once through `/proc/<init>/root` (so a
    /// later sample follows no pid that may have been reused).
    root: std::sync::OnceLock<std::fs::File>,
    home: String,
    child: tokio::sync::Mutex<Child>,
}

impl PlainInstance {
    /// An isolated sandbox's root directory: that of its init, the first process below envd
    /// (lowest pid) whose root is not the machine's. Looked up while envd is alive and
    /// unreaped, once; `None` for plain sandboxes.
    fn sandbox_root(&self) -> Option<&std::fs::File> {
        use std::os::unix::fs::MetadataExt as _;
        self.limits?;
        if let Some(root) = self.root.get() {
            return Some(root);
        }
        let _alive = self.alive().ok()?;
        let host = std::fs::metadata("/").ok()?;
        let mut pids = proctree::descendants(self.pid);
        pids.sort_unstable();
        let init = pids.into_iter().find(|p| {
            std::fs::metadata(format!("/proc/{p}/root"))
                .is_ok_and(|m| (m.dev(), m.ino()) != (host.dev(), host.ino()))
        })?;
        let root = std::fs::File::open(format!("/proc/{init}/root")).ok()?;
        Some(self.root.get_or_init(|| root))
    }

    /// envd, locked and checked unreaped: while the guard lives its pid cannot be reused,
    /// so signals to its tree reach only the sandbox.
    fn alive(&self) -> Result<tokio::sync::MutexGuard<'_, Child>, ServeError> {
        let mut child = self
            .child
            .try_lock()
            .map_err(|_| ServeError::Control("the sandbox is being stopped".into()))?;
        match child.try_wait() {
            Ok(None) if self.pid > 0 => Ok(child),
            _ => Err(ServeError::Control("the sandbox has no process".into())),
        }
    }
}

#[async_trait]
impl Instance for PlainInstance {
    fn netns_pid(&self) -> Option<i32> {
        if self.limits.is_none() || self.pid <= 0 {
            return None;
        }
        let own = std::fs::read_link("/proc/self/ns/net").ok()?;
        crate::proctree::descendants(self.pid)
            .into_iter()
            .find(|p| std::fs::read_link(format!("/proc/{p}/ns/net")).is_ok_and(|ns| ns != own))
    }

    fn limits(&self) -> Option<SandboxLimits> {
        self.limits
    }

    fn envd_addr(&self) -> SocketAddr {
        self.addr
    }

    fn default_user(&self) -> String {
        "user".into()
    }

    fn default_workdir(&self) -> String {
        self.home.clone()
    }

    fn pause(&self) -> Result<(), ServeError> {
        let _alive = self.alive()?;
        proctree::stop_tree(self.pid);
        Ok(())
    }

    fn resume(&self) -> Result<(), ServeError> {
        let _alive = self.alive()?;
        proctree::signal_tree(self.pid, Signal::SIGCONT);
        Ok(())
    }

    fn usage(&self) -> Usage {
        let (cpu_seconds, memory_bytes) = match self.alive() {
            Ok(_alive) => proctree::usage(self.pid),
            Err(_) => (0.0, 0),
        };
        let disk = self
            .sandbox_root()
            .and_then(|root| nix::sys::statvfs::fstatvfs(root).ok())
            .map(|v| crate::util::fs_usage(&v));
        Usage {
            cpu_seconds,
            memory_bytes,
            disk,
        }
    }

    async fn kill(&self) {
        // Whole tree first (covers the no-PID-namespace case), then envd, whose death takes
        // the namespace down with it. The tree is stopped before any of it is killed: killed
        // one by one while running, a process could act on another's death first (a reader
        // that sees EOF when its writer dies).
        if self.pid > 0 {
            proctree::stop_tree(self.pid);
            proctree::signal_tree(self.pid, Signal::SIGKILL);
        }
        let mut child = self.child.lock().await;
        if self.pid > 0 && matches!(child.try_wait(), Ok(None)) {
            // A process forked during the first sweep, when there is no PID namespace. Only
            // while envd is unreaped: once reaped, its pid may name a stranger's process.
            proctree::stop_tree(self.pid);
            proctree::signal_tree(self.pid, Signal::SIGKILL);
        }
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_too_small_or_not_a_number_are_refused_with_the_fix() {
        let l = SandboxLimits::new(64, Some(0.25)).unwrap();
        assert_eq!((l.memory_mb(), l.cpu_count()), (64, Some(0.25)));
        assert!(SandboxLimits::new(SandboxLimits::MAX_MEMORY_MB, None).is_ok());
        for mb in [0, 63, SandboxLimits::MAX_MEMORY_MB + 1, u64::MAX] {
            let e = SandboxLimits::new(mb, None).unwrap_err().to_string();
            assert!(e.contains("between 64 and 16777216 MiB"), "{mb}: {e}");
        }
        for cpus in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = SandboxLimits::new(512, Some(cpus)).unwrap_err().to_string();
            assert!(e.contains("positive number of CPUs"), "{cpus}: {e}");
        }
        assert_eq!(
            SandboxLimits::default().to_string(),
            "2048 MiB of memory and of disk, CPU not limited"
        );
        assert_eq!(
            SandboxLimits::new(512, Some(1.5)).unwrap().to_string(),
            "512 MiB of memory and of disk, 1.5 CPUs"
        );
    }
}
