//! Starting a command the way envd does: environment, working directory, user, stdio, PTY.
//! Every command gets its own session (and so its own process group) — a deliberate
//! deviation from envd so kills reach grandchildren.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;

use e2b_envd_proto::process::{StartRequest, pty};
use tonic::Status;

use super::pty::PtyMaster;
use crate::state::{State, User};

/// envd's own PATH, used when the daemon's environment has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A freshly started command and its pipes.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) stdin: Option<tokio::process::ChildStdin>,
    pub(crate) stdout: Option<tokio::process::ChildStdout>,
    pub(crate) stderr: Option<tokio::process::ChildStderr>,
    pub(crate) pty: Option<PtyMaster>,
    /// The command's own cgroup, when cgroups are available.
    pub(crate) group: Option<super::tree::CmdGroup>,
}

/// The environment of a command: PATH, HOME, USER, LOGNAME, then the daemon's global variables,
/// then the request's `envs` (later entries win). Nothing else is inherited.
pub(crate) fn build_env(
    state: &State,
    user: &User,
    request_envs: &HashMap<String, String>,
) -> HashMap<String, String> {
    let mut env = HashMap::new();
    env.insert(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string()),
    );
    env.insert("HOME".to_string(), user.home.to_string_lossy().into_owned());
    env.insert("USER".to_string(), user.name.clone());
    env.insert("LOGNAME".to_string(), user.name.clone());
    env.extend(state.env_vars());
    env.extend(request_envs.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Resolves and checks the working directory.
pub(crate) fn resolve_cwd(
    state: &State,
    user: &User,
    cwd: Option<&str>,
) -> Result<PathBuf, Status> {
    let raw = cwd.unwrap_or("");
    let path = state
        .resolve_path(user, raw)
        .map_err(Status::invalid_argument)?;
    // With `--root`, a command may not start outside it (it still runs unconfined: the root
    // guards paths the API is given, not what the command does).
    crate::filesystem::paths::confine(state.root(), &path).map_err(|e| e.into_status())?;
    if !path.is_dir() {
        return Err(Status::invalid_argument(format!(
            "cwd '{}' does not exist",
            path.display()
        )));
    }
    Ok(path)
}

fn set_cloexec(fd: &OwnedFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    fcntl(fd.as_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(|_| ())
        .map_err(std::io::Error::from)
}

type Job = Box<dyn FnOnce() + Send>;

/// Queues `job` for the one long-lived spawner thread (started on first use), or runs it here
/// if that thread cannot be started or is gone. `PR_SET_PDEATHSIG` fires when the *thread* that
/// forked the child exits, and tokio's blocking-pool threads exit when idle; forking from a
/// thread that lives as long as the process means the signal fires only when the daemon dies.
fn submit(job: Job) {
    static SPAWNER: std::sync::OnceLock<Option<std::sync::Mutex<std::sync::mpsc::Sender<Job>>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("e2b-envd-spawner".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| std::sync::Mutex::new(tx))
    });
    match spawner {
        Some(s) => {
            let sent = s.lock().unwrap_or_else(|p| p.into_inner()).send(job);
            if let Err(std::sync::mpsc::SendError(job)) = sent {
                job();
            }
        }
        None => job(),
    }
}

/// Forks with `fork` on the spawner thread (see [`submit`]).
///
/// Jobs run one after the other, so under load a job may wait in the queue long enough for its
/// caller to give up (the client hung up or timed out and the Start future was dropped). Such a
/// job is skipped, and a command its caller is no longer there to take is killed (see
/// [`Delivery`]): a cancelled Start neither costs a fork nor leaves a process that nothing
/// tracks.
async fn on_spawner_thread(
    fork: impl FnOnce() -> std::io::Result<tokio::process::Child> + Send + 'static,
) -> Result<Delivery, Status> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    submit(Box::new(move || {
        if tx.is_closed() {
            return;
        }
        if let Err(mut refused) = tx.send(Delivery(Some(fork()))) {
            // Cancelled during the fork: kill it now, not after the queue.
            if let Some(res) = refused.0.take() {
                kill_unclaimed(res);
            }
        }
    }));
    rx.await
        .map_err(|_| Status::internal("error starting process: the spawner thread is gone"))
}

/// A fork's result on its way to its Start. Dropped with the command still in it (the Start
/// was cancelled after the fork, before it took the command), the command is killed and reaped
/// on the spawner thread ([`kill_unclaimed`]), so nothing runs that the daemon does not track.
struct Delivery(Option<std::io::Result<tokio::process::Child>>);

impl Delivery {
    fn take(mut self) -> std::io::Result<tokio::process::Child> {
        self.0
            .take()
            .unwrap_or_else(|| Err(std::io::Error::other("the spawn result was taken already")))
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(res) = self.0.take() {
            submit(Box::new(move || kill_unclaimed(res)));
        }
    }
}

/// Kills a command that was started for a Start nobody waits for any more (its process group,
/// then the process itself) and reaps it before its pid leaves [`super::tree::DIRECT`], so the
/// pid cannot be reused while the orphan reaper still leaves it alone. Runs on the spawner
/// thread; a SIGKILLed process exits at once.
fn kill_unclaimed(res: std::io::Result<tokio::process::Child>) {
    let Ok(mut child) = res else {
        return;
    };
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    // The child made itself a process group leader (or a session leader) before exec.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.start_kill();
    // SAFETY: waitpid on our own child; tokio's later wait of the dropped child gets ECHILD.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    drop(child);
    super::tree::forget_direct(u32::try_from(pid).unwrap_or(0));
}

/// A command's cgroup until the command is registered. Dropped unclaimed (the spawn failed, or
/// the Start was cancelled while it waited for the spawner), the cgroup is removed, or kept
/// with the tracker's leftovers while a process is still in it.
struct PendingGroup {
    group: Option<super::tree::CmdGroup>,
    leftovers: super::tree::Leftovers,
}

impl PendingGroup {
    fn claim(mut self) -> Option<super::tree::CmdGroup> {
        self.group.take()
    }
}

impl Drop for PendingGroup {
    fn drop(&mut self) {
        if let Some(g) = self.group.take() {
            self.leftovers.ended(g);
        }
    }
}

/// Starts the command of `req` as `user`, in its own session or process group and (when
/// available) its own cgroup, with `PR_SET_PDEATHSIG(SIGKILL)`.
pub(crate) async fn spawn(
    state: &State,
    user: &User,
    req: &StartRequest,
    tracker: &super::tree::Tracker,
) -> Result<Spawned, Status> {
    let Some(config) = req.process.as_ref() else {
        return Err(Status::invalid_argument(
            "the request has no process config",
        ));
    };
    if config.cmd.is_empty() {
        return Err(Status::invalid_argument(
            "error starting process: empty command",
        ));
    }
    let cwd = resolve_cwd(state, user, config.cwd.as_deref())?;
    let env = build_env(state, user, &config.envs);

    let mut cmd = tokio::process::Command::new(&config.cmd);
    cmd.args(&config.args)
        .env_clear()
        .envs(&env)
        .current_dir(&cwd)
        .kill_on_drop(false);

    let mut master = None;
    if let Some(pty) = req.pty.as_ref() {
        let size = pty.size.unwrap_or(pty::Size { cols: 80, rows: 24 });
        let ws = nix::pty::Winsize {
            ws_row: u16::try_from(size.rows).unwrap_or(u16::MAX),
            ws_col: u16::try_from(size.cols).unwrap_or(u16::MAX),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pair = nix::pty::openpty(Some(&ws), None)
            .map_err(|e| Status::invalid_argument(format!("error starting pty: {e}")))?;
        set_cloexec(&pair.master)
            .and_then(|_| set_cloexec(&pair.slave))
            .map_err(|e| Status::internal(format!("error starting pty: {e}")))?;
        let dup = |fd: &OwnedFd| {
            fd.try_clone()
                .map_err(|e| Status::internal(format!("error starting pty: {e}")))
        };
        cmd.stdin(Stdio::from(dup(&pair.slave)?))
            .stdout(Stdio::from(dup(&pair.slave)?))
            .stderr(Stdio::from(pair.slave));
        master = Some(pair.master);
    } else {
        let stdin = if req.stdin.unwrap_or(true) {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    let is_pty = master.is_some();
    let switch = if state.is_root()
        && (user.uid != state.current_user().uid || user.gid != state.current_user().gid)
    {
        Some(UserSwitch {
            uid: nix::unistd::Uid::from_raw(user.uid),
            gid: nix::unistd::Gid::from_raw(user.gid),
            groups: user
                .groups
                .iter()
                .map(|g| nix::unistd::Gid::from_raw(*g))
                .collect(),
        })
    } else {
        None
    };
    let group = PendingGroup {
        group: tracker.new_group(),
        leftovers: tracker.leftovers(),
    };
    let cgroup_fd = match &group.group {
        Some(g) => match g.procs_fd() {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::debug!(error = %e, "cannot open the command's cgroup.procs");
                None
            }
        },
        None => None,
    };
    pre_exec_setup(&mut cmd, is_pty, switch, cgroup_fd);

    let handle = tokio::runtime::Handle::current();
    let spawned = on_spawner_thread(move || {
        let _rt = handle.enter();
        // Held from fork until the pid is recorded, so the orphan reaper never takes it.
        let mut direct = super::tree::direct();
        let res = cmd.spawn();
        if let Ok(c) = &res
            && let Some(pid) = c.id().and_then(|p| i32::try_from(p).ok())
        {
            direct.get_or_insert_with(Default::default).insert(pid);
        }
        drop(direct);
        drop(cmd);
        res
    })
    .await?
    .take();
    let mut child = spawned.map_err(|e| {
        Status::invalid_argument(format!("error starting process '{}': {e}", config.cmd))
    })?;
    let Some(pid) = child.id() else {
        return Err(Status::internal("error starting process: no pid"));
    };
    let pty = match master.map(PtyMaster::new).transpose() {
        Ok(p) => p,
        Err(e) => {
            // Not registered: nothing else would ever kill or wait for it.
            if let Some(g) = &group.group {
                g.signal(nix::sys::signal::Signal::SIGKILL);
            }
            let _ = child.start_kill();
            return Err(Status::internal(format!("error starting pty: {e}")));
        }
    };
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    if let Some(p) = &stdout {
        grow_pipe(p.as_raw_fd());
    }
    if let Some(p) = &stderr {
        grow_pipe(p.as_raw_fd());
    }
    Ok(Spawned {
        pid,
        stdin: child.stdin.take(),
        stdout,
        stderr,
        child,
        pty,
        group: group.claim(),
    })
}

/// Best effort: a 1 MiB pipe lets a fast writer run ahead while we forward a chunk.
fn grow_pipe(fd: std::os::fd::RawFd) {
    // SAFETY: F_SETPIPE_SZ on a descriptor we own; failure is harmless.
    unsafe {
        libc::fcntl(fd, libc::F_SETPIPE_SZ, 1 << 20);
    }
}

/// Credentials a child switches to, computed before the fork.
struct UserSwitch {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    groups: Vec<nix::unistd::Gid>,
}

/// Between fork and exec: a new session (PTY, or another user) or process group, the
/// command's cgroup, the controlling tty, the user switch, then `PR_SET_PDEATHSIG(SIGKILL)`
/// (after the credential change, which would clear it) and a check that the daemon did not
/// die before it was set.
fn pre_exec_setup(
    cmd: &mut tokio::process::Command,
    is_pty: bool,
    switch: Option<UserSwitch>,
    cgroup_procs: Option<OwnedFd>,
) {
    let parent = std::process::id() as libc::pid_t;
    let new_session = is_pty || switch.is_some();
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions
    // (setsid, setpgid, write, ioctl, setgroups, setgid, setuid, prctl, getppid) on data
    // prepared before the fork; it allocates nothing. The cgroup descriptor is close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if new_session {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
            } else if libc::setpgid(0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = &cgroup_procs {
                // Best effort: without it the session/process-group kill still applies.
                libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1);
            }
            if is_pty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(sw) = &switch {
                nix::unistd::setgroups(&sw.groups).map_err(std::io::Error::from)?;
                nix::unistd::setgid(sw.gid).map_err(std::io::Error::from)?;
                nix::unistd::setuid(sw.uid).map_err(std::io::Error::from)?;
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "envd exited while starting the command",
                ));
            }
            Ok(())
        });
    }
}
