//! Keeping track of everything a command starts, so that nothing survives a kill, the
//! timeout or the daemon's exit, without a PID namespace:
//!
//! - **A cgroup per command** when a cgroup v2 hierarchy is writable (root, or a delegated
//!   subtree): the child joins `<own cgroup>/e2b-envd-<pid>-<n>/c<seq>` between fork and exec,
//!   so every descendant (`setsid`, double forks) stays in it; a kill writes `cgroup.kill`.
//! - **A sentinel process** forked once per daemon: it holds the read end of a pipe whose write
//!   end only the daemon holds, and an open `cgroup.kill` of the daemon's base cgroup. When the
//!   daemon dies (even by SIGKILL) the pipe hits EOF and the sentinel kills every command's
//!   subtree, then exits.
//! - **Without a cgroup**, a kill also reaches every process whose parent chain leads to the
//!   command, and every process in the command's session or process group (a `/proc` walk).
//! - **Orphan reaping**: when the process is a child subreaper (the `e2b-envd` binary makes
//!   itself one), orphaned descendants are re-parented to it; they are reaped here. Children
//!   this module did not start for a command (tracked in [`DIRECT`]) are never waited for.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Pids of the commands the daemon spawned and has not yet waited for (tokio waits for
/// them). The orphan reaper leaves these alone; spawning holds the lock from fork to insert so
/// the reaper never sees an unregistered child.
pub(crate) static DIRECT: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

pub(crate) fn direct() -> MutexGuard<'static, Option<HashSet<i32>>> {
    DIRECT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Forgets a waited-for child.
pub(crate) fn forget_direct(pid: u32) {
    if let (Some(set), Ok(pid)) = (direct().as_mut(), i32::try_from(pid)) {
        set.remove(&pid);
    }
}

/// The cgroup v2 mount point and this process's cgroup path in it.
fn own_cgroup_dir() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if !right.starts_with("cgroup2 ") {
            return None;
        }
        let f: Vec<&str> = left.split(' ').collect();
        // Only a mount of the hierarchy's root maps paths directly.
        if f.get(3) == Some(&"/") {
            f.get(4).map(PathBuf::from)
        } else {
            None
        }
    })?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(own.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// Whether `pid` (as the mounted `/proc` numbers it, see [`e2b_isolation::proc_pid`]) is a live
/// process.
fn proc_alive(pid: i32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Kills what is left in a cgroup and removes it (children first).
fn purge(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                purge(&e.path());
            }
        }
    }
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a cgroup's subtree holds no process (`populated 0` in `cgroup.events`).
fn unpopulated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .map(|s| s.lines().any(|l| l.trim() == "populated 0"))
        .unwrap_or(false)
}

/// Removes a cgroup and its children, without killing anything (fails on a populated one).
fn remove_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes empty base cgroups left by daemons that died (their pid is gone from `/proc`), such
/// as a sandbox's envd that `e2b serve` killed. Populated ones are left alone: the pid may belong
/// to another PID namespace sharing this cgroup. A base named after pid 1 that is not ours is
/// stale too: only the init of a PID namespace gets that name, and the daemons that did so
/// while sharing a cgroup with others (PID 1 of a namespace that sees the host's `/proc`) now
/// name theirs after their host pid.
fn clean_stale(parent: &Path, me: i32) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("e2b-envd-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid != me && (pid == 1 || !proc_alive(pid)) && unpopulated(&e.path()) {
            remove_tree(&e.path());
        }
    }
}

/// The cgroup of one command.
#[derive(Debug)]
pub(crate) struct CmdGroup {
    dir: PathBuf,
}

impl CmdGroup {
    /// `cgroup.procs`, opened for the child to write itself into between fork and exec.
    pub(crate) fn procs_fd(&self) -> io::Result<OwnedFd> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))?;
        Ok(OwnedFd::from(f))
    }

    pub(crate) fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Sends `sig` to every process in the cgroup (SIGKILL through `cgroup.kill`, which also
    /// stops processes forking during the kill).
    pub(crate) fn signal(&self, sig: nix::sys::signal::Signal) {
        if sig == nix::sys::signal::Signal::SIGKILL
            && std::fs::write(self.dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for pid in self.pids() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// Removes the cgroup if it is empty.
    pub(crate) fn try_remove(&self) -> bool {
        std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists()
    }
}

/// The cgroups of ended commands that still held processes when their command ended; each is
/// tried again (and removed once empty) whenever another command ends.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leftovers(std::sync::Arc<Mutex<Vec<CmdGroup>>>);

impl Leftovers {
    /// Removes `group` if empty, else keeps it; retries the ones kept earlier.
    pub(crate) fn ended(&self, group: CmdGroup) {
        let mut left = lock(&self.0);
        left.retain(|g| !g.try_remove());
        if !group.try_remove() {
            left.push(group);
        }
    }
}

/// Per-daemon tracking: the base cgroup, the sentinel, cgroups of ended commands whose
/// descendants still run.
#[derive(Debug)]
pub(crate) struct Tracker {
    base: Option<PathBuf>,
    seq: AtomicU64,
    sentinel: Mutex<Option<(i32, OwnedFd)>>,
    leftovers: Leftovers,
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tracker {
    /// Sets up the base cgroup (if possible), the sentinel, and the orphan reaper (if this
    /// process is a child subreaper and a tokio runtime is running).
    pub(crate) fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = own_cgroup_dir().and_then(|parent| {
            // Named after our pid as `/proc` numbers it (our host pid as PID 1 of a sandbox's
            // namespace), so daemons in different namespaces name their bases apart and
            // `clean_stale` can tell when one's owner is gone.
            let me = e2b_isolation::proc_pid();
            clean_stale(&parent, me);
            // The pid alone is not unique: daemons in different PID namespaces with their own
            // `/proc` share it. A random suffix keeps one daemon's `cgroup.kill` away from
            // another's commands.
            let dir = parent.join(format!(
                "e2b-envd-{}-{}-{}",
                me,
                N.fetch_add(1, Ordering::Relaxed),
                &uuid::Uuid::new_v4().simple().to_string()[..12]
            ));
            match std::fs::create_dir(&dir) {
                Ok(()) => Some(dir),
                Err(e) => {
                    tracing::debug!(dir = %dir.display(), error = %e, "no cgroup for commands; falling back to session and /proc tracking");
                    None
                }
            }
        });
        // As the init (PID 1) of a PID namespace, our death makes the kernel kill every
        // process in it: no sentinel is needed.
        let sentinel = base.as_deref().filter(|_| !is_pid_namespace_init());
        let sentinel = sentinel.and_then(|b| match start_sentinel(b) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the sentinel that kills commands if the daemon dies");
                None
            }
        });
        let reaper = (is_subreaper() || is_pid_namespace_init())
            .then(|| tokio::runtime::Handle::try_current().ok())
            .flatten()
            .map(|h| h.spawn(reap_orphans_forever()));
        Self {
            base,
            seq: AtomicU64::new(0),
            sentinel: Mutex::new(sentinel),
            leftovers: Leftovers::default(),
            reaper: Mutex::new(reaper),
        }
    }

    /// A fresh cgroup for the next command, if cgroups are available.
    pub(crate) fn new_group(&self) -> Option<CmdGroup> {
        let base = self.base.as_ref()?;
        let dir = base.join(format!("c{}", self.seq.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir(&dir).ok()?;
        Some(CmdGroup { dir })
    }

    /// Called when a command's process has ended: drops its cgroup once empty, keeping it
    /// (for the daemon's exit) while descendants run.
    pub(crate) fn ended(&self, group: CmdGroup) {
        self.leftovers.ended(group);
    }

    /// Where a cgroup goes when its command ended, for code that cannot borrow the tracker.
    pub(crate) fn leftovers(&self) -> Leftovers {
        self.leftovers.clone()
    }

    /// Kills every descendant of every command, ended ones included (daemon exit).
    pub(crate) fn kill_everything(&self) {
        if let Some(base) = &self.base {
            let _ = std::fs::write(base.join("cgroup.kill"), "1");
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if let Some(r) = lock(&self.reaper).take() {
            r.abort();
        }
        self.kill_everything();
        if let Some((pid, pipe)) = lock(&self.sentinel).take() {
            drop(pipe);
            // The sentinel exits at once on EOF; reap it (briefly) so no zombie is left.
            for _ in 0..100 {
                // SAFETY: waitpid on our own child with WNOHANG.
                let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                if r != 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if let Some(base) = &self.base {
            purge(base);
        }
    }
}

/// Forks the sentinel: it waits for EOF on a pipe only the daemon writes to, then writes `1`
/// to the base cgroup's `cgroup.kill` and exits.
fn start_sentinel(base: &Path) -> io::Result<(i32, OwnedFd)> {
    let kill = OwnedFd::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open(base.join("cgroup.kill"))?,
    );
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors, which we own from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let (rd_raw, kill_raw) = (rd.as_raw_fd(), kill.as_raw_fd());
    let (lo, hi) = (rd_raw.min(kill_raw), rd_raw.max(kill_raw));
    // SAFETY: after fork the child calls only async-signal-safe functions (setsid, raw
    // close_range, read, write, _exit) on descriptors prepared before the fork; it never
    // returns into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            libc::setsid();
            // Keep only the pipe's read end and cgroup.kill: no sockets or pipes of the
            // daemon stay open in the sentinel.
            if lo > 0 {
                libc::syscall(libc::SYS_close_range, 0u32, (lo - 1) as u32, 0u32);
            }
            if hi - lo > 1 {
                libc::syscall(
                    libc::SYS_close_range,
                    (lo + 1) as u32,
                    (hi - 1) as u32,
                    0u32,
                );
            }
            libc::syscall(libc::SYS_close_range, (hi + 1) as u32, u32::MAX, 0u32);
            let mut b = [0u8; 64];
            loop {
                let n = libc::read(rd_raw, b.as_mut_ptr().cast(), b.len());
                if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                    break;
                }
            }
            libc::write(kill_raw, b"1".as_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    drop(rd);
    drop(kill);
    Ok((pid, wr))
}

/// Whether this process is a child subreaper (`PR_SET_CHILD_SUBREAPER`).
pub(crate) fn is_subreaper() -> bool {
    let mut v: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the pointer.
    let r = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut v as *mut libc::c_int) };
    r == 0 && v != 0
}

/// `(state, ppid, pgrp, session)` from `/proc/<pid>/stat`.
pub(crate) fn stat(pid: i32) -> Option<(char, i32, i32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let sid = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp, sid))
}

/// Whether this process is PID 1 of its PID namespace: orphans of the whole namespace are
/// re-parented to it, and when it dies the kernel kills the rest of the namespace.
pub(crate) fn is_pid_namespace_init() -> bool {
    std::process::id() == 1
}

/// How a reaping pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// No exited child is left to look at.
    Done,
    /// The next exited child is a command tokio has not reaped yet; orphans may wait behind it.
    StoppedAtCommand,
}

/// Reaps exited children that are not commands we spawned (orphans re-parented to us) now.
/// `waitid(WNOWAIT)` looks at the next exited child without reaping it. [`DIRECT`] is held
/// throughout (spawning holds it from fork to insert, so every command forked so far is in it):
/// an untracked child is reaped; a tracked one is left for tokio, and the pass ends there (the
/// kernel reports exited children in order; the next pass, after tokio's reap, sees the ones
/// behind it). No `/proc` scan: it works in a PID namespace whose `/proc` is the host's.
pub(crate) fn reap_orphans_once() -> Pass {
    let guard = direct();
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with WNOHANG | WNOWAIT only inspects our children.
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set for the CLD_* codes waitid reports (0 when none exited).
        let pid = unsafe { info.si_pid() };
        if r != 0 || pid <= 0 {
            return Pass::Done;
        }
        if guard.as_ref().is_some_and(|s| s.contains(&pid)) {
            return Pass::StoppedAtCommand;
        }
        // SAFETY: waitpid with WNOHANG on an exited child that no one else waits for.
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
        }
    }
}

async fn reap_orphans_forever() {
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    let mut again = false;
    loop {
        match sigchld.as_mut() {
            // A pass that stopped at a command's exit looks again soon without a new signal.
            _ if again => {}
            Some(s) => {
                let _ = tokio::time::timeout(Duration::from_secs(5), s.recv()).await;
            }
            None => tokio::time::sleep(Duration::from_secs(1)).await,
        }
        again = reap_orphans_once() == Pass::StoppedAtCommand;
        // Debounce: a burst of exits costs one pass per 200 ms.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many times [`signal_tree`] walks `/proc` again for processes forked while it stopped
/// the ones it had found.
const FREEZE_ROUNDS: usize = 8;

/// Without a cgroup: sends `signal` to `root`'s process group and to every process of
/// [`descendants`].
///
/// A SIGKILL first stops them all: the group at once (`killpg` SIGSTOP), then what the walk
/// finds outside it, walking again while new processes appear. Only then are they killed, the
/// group at once and the stopped rest one by one. Killed one at a time while running, a parent
/// could see its child die and act in the moment before its own kill landed (a `(sleep 3;
/// touch f) &` whose `sleep` was killed first ran `touch`: seen on a loaded machine); a stopped
/// process runs nothing, and a stop ends nothing that another could react to.
pub(crate) fn signal_tree(root: i32, signal: nix::sys::signal::Signal) -> nix::Result<()> {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let group = Pid::from_raw(root);
    if signal != Signal::SIGKILL {
        for p in descendants(root) {
            let _ = kill(Pid::from_raw(p), signal);
        }
        return killpg(group, signal);
    }
    let _ = killpg(group, Signal::SIGSTOP);
    let mut stopped = HashSet::new();
    for _ in 0..FREEZE_ROUNDS {
        let fresh: Vec<i32> = descendants(root)
            .into_iter()
            .filter(|p| stopped.insert(*p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
        }
    }
    let res = killpg(group, Signal::SIGKILL);
    for p in stopped {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    res
}

/// Without a cgroup: every process descending from `root` by parent chain, or in its session
/// or process group (a `/proc` walk; an escape by `setsid` plus a double fork is not caught).
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    if !proc_is_own_pid_namespace() {
        // The pids in this /proc are another PID namespace's (a daemon started in a fresh PID
        // namespace without its own /proc mount): our pids name other processes there, so a
        // walk would signal strangers. Rely on the command's process group and cgroup instead.
        return Vec::new();
    }
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs = Vec::new();
    for e in rd.flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
            && let Some((_, ppid, pgrp, sid)) = stat(pid)
        {
            procs.push((pid, ppid, pgrp, sid));
        }
    }
    let mut found: HashSet<i32> = procs
        .iter()
        .filter(|p| p.2 == root || p.3 == root)
        .map(|p| p.0)
        .collect();
    found.insert(root);
    loop {
        let before = found.len();
        for p in &procs {
            if found.contains(&p.1) {
                found.insert(p.0);
            }
        }
        if found.len() == before {
            break;
        }
    }
    found.remove(&root);
    found.remove(&(std::process::id() as i32));
    found.into_iter().collect()
}

/// Whether the mounted `/proc` shows this process's own PID namespace (`/proc/self` names our
/// pid). Checked once: a process does not change PID namespace.
fn proc_is_own_pid_namespace() -> bool {
    static OWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| {
        std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
            == Some(std::process::id())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::process::CommandExt as _;

    /// Without a cgroup, a SIGKILL of a command must not let one of its processes act on the
    /// death of another: each background subshell below writes its file the moment its
    /// `sleep` dies, so a kill that reaches a `sleep` before its subshell leaves a file.
    #[test]
    fn a_kill_leaves_no_process_time_to_act_on_another_s_death() {
        const PAIRS: usize = 24;
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20 {
            let d = dir.path().join(round.to_string());
            std::fs::create_dir(&d).unwrap();
            let d = d.display();
            let script = format!(
                "for i in $(seq {PAIRS}); do (echo > {d}/started$i; sleep 100; echo > {d}/acted$i) & done; wait"
            );
            let mut child = std::process::Command::new("bash")
                .args(["-c", &script])
                .process_group(0)
                .spawn()
                .unwrap();
            let pid = i32::try_from(child.id()).unwrap();
            let started = || {
                std::fs::read_dir(format!("{d}"))
                    .unwrap()
                    .filter(|e| {
                        e.as_ref()
                            .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("started"))
                    })
                    .count()
            };
            for _ in 0..1000 {
                if started() == PAIRS {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(
                started(),
                PAIRS,
                "the script never started its {PAIRS} subshells"
            );
            // Each subshell is in its `sleep` by now.
            std::thread::sleep(std::time::Duration::from_millis(100));
            super::signal_tree(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
            child.wait().unwrap();
            // Let anything that survived act.
            std::thread::sleep(std::time::Duration::from_millis(200));
            let acted: Vec<_> = std::fs::read_dir(format!("{d}"))
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("acted"))
                .collect();
            assert!(
                acted.is_empty(),
                "round {round}: a subshell ran after its sleep was killed: {acted:?}"
            );
        }
    }
}
