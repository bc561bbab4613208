#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod cgroup;
mod child;
mod fs_rules;
mod paths;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod seccomp;
mod spec;
mod sys;
mod template;

use std::ffi::OsStr;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};

pub use cgroup::proc_pid;
pub use paths::command_host_paths;
pub use spec::{IdMap, Network, RoMount, SANDBOX_USER_ID, SandboxSpec, Template};
pub use template::{ArchiveProblem, PreparedTemplate, TemplateCache, UnpackLimits};

use crate::cgroup::Cgroup;
use crate::spec::{ChildSpec, ID_COUNT, Nat};

/// Set in the program's environment when the sandbox's limits are weaker than asked (no
/// cgroup, or some controllers missing): the same text as [`Limits::note`], for the program to
/// report (envd can show it in `/health`).
pub const LIMITS_NOTE_ENV: &str = "E2B_SANDBOX_LIMITS_NOTE";

/// The hidden first argument that makes [`run_if_child`] build a sandbox.
pub const CHILD_ARG: &str = "__e2b-isolation-child";

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IsolationError {
    /// The host lacks something isolation needs.
    #[error(
        "{what} is not available: {reason} (run without isolation: --isolation none / --isolate off)"
    )]
    Unsupported {
        /// The missing feature.
        what: &'static str,
        /// Why, and what to install or enable.
        reason: String,
    },
    /// The spec is invalid.
    #[error("invalid sandbox spec: {0}")]
    Spec(String),
    /// Setting the sandbox up failed (the message comes from inside the setup).
    #[error("the sandbox could not be started: {0}")]
    Setup(String),
    /// A cgroup operation failed.
    #[error("cgroup: {message}")]
    Cgroup {
        /// What failed.
        message: String,
    },
    /// A template archive (tarball or OCI layout) is malformed or hostile; nothing of it is
    /// used (the partial unpack is removed).
    #[error("template {}: {}{problem}", .template.display(), entry_prefix(.entry))]
    Archive {
        /// The tarball or layout.
        template: PathBuf,
        /// The archive entry at fault, when one is.
        entry: Option<String>,
        /// What is wrong.
        problem: ArchiveProblem,
    },
    /// An I/O error talking to the sandbox's processes.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

fn entry_prefix(entry: &Option<String>) -> String {
    entry
        .as_ref()
        .map(|e| format!("entry {e:?}: "))
        .unwrap_or_default()
}

/// Builds the sandbox when this process is the re-executed child of
/// [`IsolatedSandbox::spawn`] (and then never returns); returns immediately otherwise.
///
/// Call it first thing in `main`, before any other thread exists: the child must be
/// single-threaded to enter namespaces.
pub fn run_if_child() {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() != Some(OsStr::new(CHILD_ARG)) {
        return;
    }
    // The description comes through an inherited pipe, not the command line, which every
    // process of the sandbox could read in /proc/1/cmdline.
    let spec: Option<ChildSpec> = args
        .next()
        .and_then(|a| a.to_string_lossy().parse::<RawFd>().ok())
        .filter(|fd| *fd > 2)
        .and_then(|fd| {
            use std::io::Read as _;
            // SAFETY: the parent passed this pipe's read end under this number for us alone.
            let file = unsafe { std::fs::File::from_raw_fd(fd) };
            let mut json = String::new();
            file.take(16 * 1024 * 1024).read_to_string(&mut json).ok()?;
            serde_json::from_str(&json).ok()
        });
    let Some(spec) = spec else {
        eprintln!("e2b-isolation: internal error: the sandbox description is missing or invalid");
        std::process::exit(125);
    };
    std::process::exit(child::stage1(spec));
}

/// What this machine offers for isolation (see [`probe`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Probe {
    /// Running as root. Only root can map a range of ids into a sandbox ([`IdMap::Range`]:
    /// a root and `user` inside, `sudo`, cgroup limits); any other user gets
    /// [`IdMap::Single`] (its own ids as the sandbox's `user`, rlimits instead of cgroups).
    pub root: bool,
    /// The kernel has user namespaces enabled (`user.max_user_namespaces` > 0).
    pub user_namespaces: bool,
    /// cgroup layout: `"v1"`, `"v2"` or `"none"`.
    pub cgroups: &'static str,
    /// Path of `slirp4netns`, if installed.
    pub slirp4netns: Option<PathBuf>,
    /// Path of `pasta` (package `passt`), if installed.
    pub pasta: Option<PathBuf>,
    /// This user can open `/dev/net/tun` for reading and writing, as the NAT helpers of an
    /// unprivileged supervisor must (most distributions make it mode 0666; root always can).
    pub tun: bool,
    /// Kernel release.
    pub kernel: String,
}

impl Probe {
    /// `Err` naming what is missing to start a sandbox with `network`.
    pub fn check(&self, network: Network) -> Result<(), IsolationError> {
        if !self.user_namespaces {
            return Err(IsolationError::Unsupported {
                what: "user namespaces",
                reason: "the kernel has them disabled (sysctl user.max_user_namespaces is 0)"
                    .into(),
            });
        }
        if network == Network::Internet && self.slirp4netns.is_none() && self.pasta.is_none() {
            return Err(IsolationError::Unsupported {
                what: "--network internet",
                reason: "no user-mode NAT helper is installed: install the `slirp4netns` or \
                         `passt` package, or use --network none"
                    .into(),
            });
        }
        if network == Network::Internet && !self.root && !self.tun {
            return Err(IsolationError::Unsupported {
                what: "--network internet",
                reason: "as a non-root user the NAT helper needs /dev/net/tun readable and \
                         writable by you, and it is not (most distributions make it mode 0666: \
                         `chmod 0666 /dev/net/tun` as root); or use --network none, or run as \
                         root"
                    .into(),
            });
        }
        Ok(())
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Reports which isolation features this machine has.
pub fn probe() -> Probe {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    let user_namespaces = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
        && Path::new("/proc/self/ns/user").exists();
    let cgroups = match cgroup::layout() {
        cgroup::Layout::V1 => "v1",
        cgroup::Layout::V2 => "v2",
        cgroup::Layout::None => "none",
    };
    Probe {
        root,
        user_namespaces,
        cgroups,
        slirp4netns: which("slirp4netns"),
        pasta: which("pasta"),
        // SAFETY: access(2) with a constant path.
        tun: root
            || unsafe { libc::access(c"/dev/net/tun".as_ptr(), libc::R_OK | libc::W_OK) } == 0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

/// Which limits a sandbox got.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// `"v1"`, `"v2"`, or `"none"` (no cgroup could be created: only per-process rlimits).
    pub cgroup: &'static str,
    /// Enforced controllers (`memory`, `pids`, `cpu`, `freezer`).
    pub enforced: Vec<&'static str>,
    /// A human-readable note when limits are weaker than asked (else `None`).
    pub note: Option<String>,
}

/// Resource usage of a sandbox (from its cgroup; `None` where unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Memory in use, in bytes (includes its in-memory filesystem).
    pub memory_bytes: Option<u64>,
    /// CPU time used, in nanoseconds.
    pub cpu_ns: Option<u64>,
    /// Processes and threads.
    pub tasks: Option<u64>,
    /// Processes killed for exceeding the memory limit.
    pub oom_kills: Option<u64>,
}

type SpawnJob = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns from one long-lived thread: `PR_SET_PDEATHSIG` fires when the *thread* that forked a
/// child exits, so spawning from a short-lived thread (a tokio blocking-pool thread) would
/// kill the sandbox with it.
fn spawner() -> Result<mpsc::Sender<SpawnJob>, IsolationError> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    let m = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        let _ = std::thread::Builder::new()
            .name("e2b-isolation-spawner".into())
            .spawn(move || {
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            });
        Mutex::new(tx)
    });
    m.lock()
        .map(|tx| tx.clone())
        .map_err(|_| IsolationError::Setup("the spawner thread's lock is poisoned".into()))
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The next of this process's slots (< 16,384): a sandbox's id range and cgroup name.
fn next_slot() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (std::process::id().wrapping_mul(7919).wrapping_add(n)) % 16_384
}

/// A part of a cgroup name that differs between this process's sandboxes.
fn cgroup_suffix() -> u32 {
    next_slot()
}

/// The ids of a new sandbox. As root, a range of its own: 2^30 + slot × 65,536, above the
/// `/etc/subuid` ranges tools allocate by default (100,000 onwards) and below 2^31. Otherwise
/// the kernel lets us map only our own uid and gid.
fn id_map() -> IdMap {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        IdMap::Range {
            base: (1u32 << 30) + next_slot() * ID_COUNT,
        }
    } else {
        IdMap::Single { uid, gid }
    }
}

/// Checks the read-only binds: the host path must exist (it is resolved here, so a symlink
/// swapped later does not matter); the sandbox path must be absolute, without `.` or `..`,
/// not `/` and not under `/proc`, `/dev` or `/sys`.
fn resolve_ro_mounts(mounts: &[RoMount]) -> Result<Vec<(PathBuf, PathBuf)>, IsolationError> {
    mounts
        .iter()
        .map(|m| {
            let host = m.host.canonicalize().map_err(|e| {
                IsolationError::Spec(format!("--mount-ro {}: {e}", m.host.display()))
            })?;
            let bad = |why: &str| {
                IsolationError::Spec(format!("--mount-ro target {}: {why}", m.sandbox.display()))
            };
            let mut comps = m.sandbox.components();
            if comps.next() != Some(std::path::Component::RootDir) {
                return Err(bad("must be an absolute path"));
            }
            let rest: Vec<_> = comps.collect();
            if rest.is_empty() {
                return Err(bad("cannot replace the sandbox's root"));
            }
            if rest
                .iter()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(bad("must not contain `.` or `..`"));
            }
            if let Some(std::path::Component::Normal(first)) = rest.first()
                && ["proc", "dev", "sys"]
                    .iter()
                    .any(|d| OsStr::new(d) == *first)
            {
                return Err(bad("cannot be under /proc, /dev or /sys"));
            }
            Ok((host, m.sandbox.clone()))
        })
        .collect()
}

/// Spawns `cmd` from one long-lived thread with a parent-death signal (SIGKILL): the child
/// is killed when this process exits, even by SIGKILL. (`PR_SET_PDEATHSIG` follows the
/// *thread* that forked, so spawning from a short-lived thread, such as one of tokio's
/// blocking pool, would kill the child when that thread ends.)
///
/// # Errors
///
/// [`IsolationError::Io`] when the command cannot be started; [`IsolationError::Setup`] when
/// the spawner thread is gone.
pub fn spawn_tied_to_process(mut cmd: Command) -> Result<Child, IsolationError> {
    // SAFETY: prctl is async-signal-safe and the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
    spawn_on_spawner(cmd, "start the process")
}

/// Starts `cmd` from the long-lived spawner thread (so a parent-death signal follows this
/// process, not a short-lived thread) and returns the child.
fn spawn_on_spawner(
    cmd: std::process::Command,
    context: &'static str,
) -> Result<std::process::Child, IsolationError> {
    let gone = || IsolationError::Setup("the spawner thread is gone".into());
    let (tx, rx) = mpsc::channel();
    spawner()?.send((cmd, tx)).map_err(|_| gone())?;
    rx.recv()
        .map_err(|_| gone())?
        .map_err(|source| IsolationError::Io { context, source })
}

/// A running sandbox. Dropping it kills every process in it and removes its cgroup.
#[derive(Debug)]
pub struct IsolatedSandbox {
    id: String,
    child: Child,
    cgroup: Option<Cgroup>,
    limits: Limits,
    status: Option<ExitStatus>,
    ids: IdMap,
}

impl IsolatedSandbox {
    /// Starts `program` with `args` (`args[0]` is its `argv[0]`) as root of a new sandbox
    /// described by `spec`. The descriptors in `keep_fds` (for example a listening socket)
    /// are inherited under the same numbers; the program's stdin is `/dev/null`, its stdout
    /// and stderr are this process's.
    ///
    /// Blocks until the program has been executed inside the sandbox (a few milliseconds); in
    /// async code call it from `spawn_blocking`. Needs [`run_if_child`] at the start of `main`.
    ///
    /// # Errors
    ///
    /// [`IsolationError::Unsupported`] when the machine lacks a feature (message names it and
    /// the package or sysctl), [`IsolationError::Setup`] with the reason when building the
    /// sandbox failed, [`IsolationError::Spec`] for an invalid id.
    pub fn spawn(
        spec: &SandboxSpec,
        program: &Path,
        args: &[String],
        keep_fds: &[RawFd],
    ) -> Result<Self, IsolationError> {
        let timings_from = std::env::var_os("E2B_ISOLATION_TIMINGS").map(|_| child::monotonic_ns());
        if !valid_id(&spec.id) {
            return Err(IsolationError::Spec(format!(
                "sandbox id {:?} must be 1-63 letters, digits, '-', '_' or '.'",
                spec.id
            )));
        }
        let probe = probe();
        probe.check(spec.network)?;
        let nat = match (
            spec.network,
            std::env::var("E2B_ISOLATION_NAT").ok().as_deref(),
        ) {
            (Network::Internet, None | Some("")) => probe
                .slirp4netns
                .clone()
                .map(Nat::Slirp4netns)
                .or(probe.pasta.clone().map(Nat::Pasta)),
            // Forced (to test one helper where both are installed).
            (Network::Internet, Some("pasta")) => Some(Nat::Pasta(probe.pasta.clone().ok_or(
                IsolationError::Unsupported {
                    what: "E2B_ISOLATION_NAT=pasta",
                    reason: "pasta is not installed (package `passt`)".into(),
                },
            )?)),
            (Network::Internet, Some("slirp4netns")) => {
                Some(Nat::Slirp4netns(probe.slirp4netns.clone().ok_or(
                    IsolationError::Unsupported {
                        what: "E2B_ISOLATION_NAT=slirp4netns",
                        reason: "slirp4netns is not installed (package `slirp4netns`)".into(),
                    },
                )?))
            }
            (Network::Internet, Some(other)) => {
                return Err(IsolationError::Spec(format!(
                    "E2B_ISOLATION_NAT={other:?}: expected pasta or slirp4netns"
                )));
            }
            _ => None,
        };
        // Archives are unpacked (once, into the cache) before anything is started.
        let template = spec
            .template_cache
            .clone()
            .unwrap_or_default()
            .prepare(&spec.template)?
            .template;
        let ids = id_map();
        // Named after this supervisor (its pid as `/proc` shows it), so that once it is gone
        // the next sandbox to start removes what it left (see `cgroup::remove_stale`).
        let cg_name = cgroup::name(&spec.id, cgroup_suffix());
        let ro_mounts = resolve_ro_mounts(&spec.ro_mounts)?;
        let program = program
            .canonicalize()
            .map_err(|source| IsolationError::Io {
                context: "resolve the sandbox's program",
                source,
            })?;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: room for two fds.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(IsolationError::Io {
                context: "create the status pipe",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: both fds are new.
        let (status_r, status_w) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The number the child inherits it under.
        let status_fd = status_w.as_raw_fd();
        let exe = std::env::current_exe().map_err(|source| IsolationError::Io {
            context: "find the current executable",
            source,
        })?;
        let mut spec_fds = [0 as libc::c_int; 2];
        // SAFETY: room for two fds.
        if unsafe { libc::pipe2(spec_fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(IsolationError::Io {
                context: "create the description pipe",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: both fds are new.
        let (spec_r, spec_w) = unsafe {
            (
                OwnedFd::from_raw_fd(spec_fds[0]),
                OwnedFd::from_raw_fd(spec_fds[1]),
            )
        };
        let mut cmd = Command::new(exe);
        cmd.arg(CHILD_ARG)
            .arg(spec_r.as_raw_fd().to_string())
            .stdin(std::process::Stdio::null());
        let mut inherit: Vec<RawFd> = keep_fds.to_vec();
        inherit.push(status_w.as_raw_fd());
        inherit.push(spec_r.as_raw_fd());
        // SAFETY: the closure only calls async-signal-safe functions (fcntl, prctl) on data
        // prepared before the fork; it does not allocate.
        unsafe {
            cmd.pre_exec(move || {
                for fd in &inherit {
                    if libc::fcntl(*fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        let child = spawn_on_spawner(cmd, "start the sandbox's setup process")?;
        drop(status_w);
        drop(spec_r);
        // The child is executing (loading the binary) while the cgroups are made: it waits for
        // its description, which names them.
        let cgroup = match Cgroup::create(&cg_name, spec.memory_mb, spec.pids_max, spec.cpu_count) {
            Ok(cg) => cg,
            Err(e) => {
                drop(spec_w);
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let limits = match &cgroup {
            Some(cg) => Limits {
                cgroup: if cgroup::layout() == cgroup::Layout::V2 {
                    "v2"
                } else {
                    "v1"
                },
                enforced: cg.enforced.clone(),
                note: (!cg.enforced.contains(&"memory") || !cg.enforced.contains(&"pids")).then(
                    || {
                        format!(
                            "only {} limits could be set on this host's cgroups",
                            cg.enforced.join(", ")
                        )
                    },
                ),
            },
            None => Limits {
                cgroup: "none",
                enforced: Vec::new(),
                note: Some(format!(
                    "no cgroup could be created{}: memory is limited per process (RLIMIT_AS, \
                     {} MiB), processes per sandbox user (RLIMIT_NPROC, {}), CPU is not \
                     limited, pause/resume is unavailable",
                    if probe.root { "" } else { " (not root)" },
                    spec.memory_mb,
                    spec.pids_max
                )),
            },
        };
        if let Some(note) = &limits.note {
            tracing::warn!(sandbox = %spec.id, "{note}");
        }
        let no_pids_limit = !cgroup
            .as_ref()
            .is_some_and(|cg| cg.enforced.contains(&"pids"));
        let child_spec = ChildSpec {
            id: spec.id.clone(),
            ids,
            network: spec.network,
            nat,
            template,
            program,
            argv: args.to_vec(),
            env: {
                let mut env = spec.env.clone();
                if let Some(note) = &limits.note {
                    env.push((LIMITS_NOTE_ENV.into(), note.clone()));
                }
                env
            },
            keep_fds: keep_fds.to_vec(),
            status_fd,
            cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            writable_mb: spec.writable_mb.unwrap_or(spec.memory_mb),
            rlimit_as: cgroup
                .is_none()
                .then(|| spec.memory_mb.saturating_mul(1024 * 1024)),
            rlimit_nproc: no_pids_limit.then_some(spec.pids_max),
            ro_mounts,
            timings_from,
        };
        let json = match serde_json::to_string(&child_spec) {
            Ok(json) => json,
            Err(e) => {
                drop(spec_w);
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(IsolationError::Spec(format!("serialize: {e}")));
            }
        };
        {
            use std::io::Write as _;
            // The child reads it to EOF before anything else; a failure shows as its error.
            let _ = std::fs::File::from(spec_w).write_all(json.as_bytes());
        }
        let mut sandbox = IsolatedSandbox {
            id: spec.id.clone(),
            child,
            cgroup,
            limits,
            status: None,
            ids,
        };
        // EOF without a message: the program was executed.
        let mut msg = Vec::new();
        let mut file = std::fs::File::from(status_r);
        use std::io::Read as _;
        let _ = (&mut file).take(64 * 1024).read_to_end(&mut msg);
        child::mark(timings_from, "supervisor: the program was executed");
        if !msg.is_empty() {
            let _ = sandbox.kill();
            return Err(IsolationError::Setup(
                String::from_utf8_lossy(&msg).into_owned(),
            ));
        }
        Ok(sandbox)
    }

    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Host pid of the sandbox's outermost process (it forwards signals to the program).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the sandbox's ids map to the host's ([`IdMap::host_uid`] turns one into the other).
    pub fn ids(&self) -> IdMap {
        self.ids
    }

    /// The limits this sandbox got.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Sends `signal` to the program (forwarded through the sandbox's init).
    ///
    /// # Errors
    ///
    /// [`IsolationError::Io`] when the sandbox has exited.
    pub fn signal(&self, signal: i32) -> Result<(), IsolationError> {
        // SAFETY: plain kill.
        if unsafe { libc::kill(self.child.id() as libc::pid_t, signal) } == -1 {
            return Err(IsolationError::Io {
                context: "signal the sandbox",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Pauses every process of the sandbox (cgroup freezer).
    ///
    /// # Errors
    ///
    /// [`IsolationError::Unsupported`] without a freezer cgroup; [`IsolationError::Cgroup`].
    pub fn freeze(&self) -> Result<(), IsolationError> {
        self.cgroup_ref("pause/resume")?.freeze()
    }

    /// Resumes a paused sandbox.
    ///
    /// # Errors
    ///
    /// As [`freeze`](Self::freeze).
    pub fn thaw(&self) -> Result<(), IsolationError> {
        self.cgroup_ref("pause/resume")?.thaw()
    }

    fn cgroup_ref(&self, what: &'static str) -> Result<&Cgroup, IsolationError> {
        self.cgroup.as_ref().ok_or(IsolationError::Unsupported {
            what,
            reason: "no cgroup could be created for this sandbox".into(),
        })
    }

    /// Resource usage from the sandbox's cgroup.
    pub fn stats(&self) -> Stats {
        match &self.cgroup {
            Some(cg) => {
                let (memory_bytes, cpu_ns, tasks) = cg.stats();
                Stats {
                    memory_bytes,
                    cpu_ns,
                    tasks,
                    oom_kills: cg.memory_events(),
                }
            }
            None => Stats::default(),
        }
    }

    /// Kills every process of the sandbox (`setsid` or double-forked ones too) and waits for
    /// the outermost one.
    ///
    /// # Errors
    ///
    /// [`IsolationError::Io`] if waiting fails.
    pub fn kill(&mut self) -> Result<ExitStatus, IsolationError> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
        let _ = self.child.kill();
        self.wait()
    }

    /// Waits for the sandbox's program to exit (its exit code is the sandbox's), then removes
    /// the cgroup. Blocking.
    ///
    /// # Errors
    ///
    /// [`IsolationError::Io`] if waiting fails.
    pub fn wait(&mut self) -> Result<ExitStatus, IsolationError> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().map_err(|source| IsolationError::Io {
            context: "wait for the sandbox",
            source,
        })?;
        self.finish(status);
        Ok(status)
    }

    /// Like [`wait`](Self::wait) without blocking: `None` while the sandbox runs.
    ///
    /// # Errors
    ///
    /// [`IsolationError::Io`] if waiting fails.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, IsolationError> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.finish(status);
                Ok(Some(status))
            }
            Ok(None) => Ok(None),
            Err(source) => Err(IsolationError::Io {
                context: "wait for the sandbox",
                source,
            }),
        }
    }

    fn finish(&mut self, status: ExitStatus) {
        self.status = Some(status);
        if let Some(cg) = &self.cgroup {
            // Helpers (the NAT process) may still be on their way out.
            cg.kill_all();
            cg.remove();
        }
    }

    /// The exit code a shell would report for the sandbox's status.
    pub fn exit_code(status: ExitStatus) -> i32 {
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
    }
}

impl Drop for IsolatedSandbox {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.kill();
        }
    }
}
