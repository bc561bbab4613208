//! Per-sandbox cgroups: v1 (memory, pids, cpu, cpuacct, freezer hierarchies) or v2 (one
//! directory with memory.max, pids.max, cpu.max, cgroup.freeze, cgroup.kill).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::IsolationError;

const ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup layout the host has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    V1,
    V2,
    None,
}

/// Forces the cgroup v2 code path on the v2 hierarchy mounted at this directory (for example
/// `/sys/fs/cgroup/unified` on a hybrid host), to test it where v1 is the default.
pub(crate) const V2_ROOT_ENV: &str = "E2B_ISOLATION_CGROUP_V2_ROOT";

/// The v2 hierarchy's mount point.
fn v2_root() -> PathBuf {
    std::env::var_os(V2_ROOT_ENV).map_or_else(|| PathBuf::from(ROOT), PathBuf::from)
}

pub(crate) fn layout() -> Layout {
    if std::env::var_os(V2_ROOT_ENV)
        .is_some_and(|r| Path::new(&r).join("cgroup.controllers").exists())
    {
        return Layout::V2;
    }
    if Path::new(ROOT).join("cgroup.controllers").exists() {
        Layout::V2
    } else if Path::new(ROOT).join("memory").is_dir() || Path::new(ROOT).join("pids").is_dir() {
        Layout::V1
    } else {
        Layout::None
    }
}

/// The cgroup path of this process in the hierarchy named `controller` (v1) or in the unified
/// one (`""`), from /proc/self/cgroup.
fn own_path(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controller.is_empty() {
            if ctrls.is_empty() {
                return Some(path.to_string());
            }
        } else if ctrls.split(',').any(|c| c == controller) {
            return Some(path.to_string());
        }
    }
    None
}

/// This process's pid as the mounted `/proc` numbers it (the first `NSpid` field of
/// `/proc/self/status`): its pid on the host when it is PID 1 of a PID namespace but still sees
/// the host's `/proc` (each sandbox of `e2b serve`). A cgroup named after it can be recognised
/// as left behind once `/proc/<pid>` is gone, where a name with the pid inside the namespace
/// (1) could not.
pub fn proc_pid() -> i32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            nspid.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| i32::try_from(std::process::id()).unwrap_or(i32::MAX))
}

/// The cgroup name of sandbox `id`, the `n`th of this process: `e2b-<id>-<owner pid>-<n>`.
pub(crate) fn name(id: &str, n: u32) -> String {
    format!("e2b-{id}-{}-{n}", proc_pid())
}

/// The owner pid in a name made by [`name`] (`None` for any other name, envd's
/// `e2b-envd-<pid>-<n>-<hex>` base cgroups included).
fn owner_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("e2b-")?;
    if rest.starts_with("envd-") {
        return None;
    }
    let mut parts = rest.rsplitn(3, '-');
    parts.next()?.parse::<u32>().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next().filter(|id| !id.is_empty()).map(|_| pid)
}

/// Removes the cgroups under `parent` that sandboxes left when their supervisor was killed
/// before it could remove them (`e2b serve` kills a sandbox's whole process tree): those whose
/// owner pid is no longer in `/proc`. Children go first; the kernel refuses to remove a cgroup
/// that still holds a process, so a populated one stays.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let me = proc_pid();
    for e in entries.flatten() {
        let Some(owner) = e.file_name().to_str().and_then(owner_of) else {
            continue;
        };
        if owner != me && !Path::new("/proc").join(owner.to_string()).exists() {
            remove_tree(&e.path());
        }
    }
}

/// Removes a cgroup and the cgroups below it, deepest first, killing nothing.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    if std::fs::remove_dir(dir).is_ok() {
        tracing::debug!(dir = %dir.display(), "removed a stale sandbox cgroup");
    }
}

/// One sandbox's cgroups.
#[derive(Debug)]
pub(crate) struct Cgroup {
    layout: Layout,
    /// Every directory created (v1: one per hierarchy), to join and to remove.
    dirs: Vec<PathBuf>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    freezer: Option<PathBuf>,
    /// What is enforced, for [`crate::Limits`].
    pub(crate) enforced: Vec<&'static str>,
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value)
}

impl Cgroup {
    /// Creates the sandbox's cgroups (under this process's own cgroup in each hierarchy) and
    /// writes the limits. `Ok(None)` when no cgroup can be created here.
    pub(crate) fn create(
        name: &str,
        memory_mb: u64,
        pids_max: u64,
        cpus: Option<f64>,
    ) -> Result<Option<Cgroup>, IsolationError> {
        match layout() {
            Layout::V1 => Self::create_v1(name, memory_mb, pids_max, cpus),
            Layout::V2 => Self::create_v2(name, memory_mb, pids_max, cpus),
            Layout::None => Ok(None),
        }
    }

    fn v1_dir(controller: &str, name: &str) -> Option<PathBuf> {
        let mount = Path::new(ROOT).join(controller);
        if !mount.is_dir() {
            return None;
        }
        let own = own_path(controller).unwrap_or_else(|| "/".into());
        let parent = mount.join(own.trim_start_matches('/'));
        remove_stale(&parent);
        let dir = parent.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => Some(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(dir),
            Err(e) => {
                cannot_create(&dir, &e);
                None
            }
        }
    }

    fn create_v1(
        name: &str,
        memory_mb: u64,
        pids_max: u64,
        cpus: Option<f64>,
    ) -> Result<Option<Cgroup>, IsolationError> {
        let mut cg = Cgroup {
            layout: Layout::V1,
            dirs: Vec::new(),
            memory: Self::v1_dir("memory", name),
            pids: Self::v1_dir("pids", name),
            cpu: Self::v1_dir("cpu", name),
            cpuacct: Self::v1_dir("cpuacct", name),
            freezer: Self::v1_dir("freezer", name),
            enforced: Vec::new(),
        };
        for d in [&cg.memory, &cg.pids, &cg.cpu, &cg.cpuacct, &cg.freezer]
            .into_iter()
            .flatten()
        {
            if !cg.dirs.contains(d) {
                cg.dirs.push(d.clone());
            }
        }
        if cg.dirs.is_empty() {
            return Ok(None);
        }
        let limit_err = |what: &str, e: std::io::Error| IsolationError::Cgroup {
            message: format!("set {what}: {e}"),
        };
        if let Some(m) = &cg.memory {
            let bytes = memory_mb.max(16).saturating_mul(1024 * 1024).to_string();
            write(&m.join("memory.limit_in_bytes"), &bytes)
                .map_err(|e| limit_err("memory.limit_in_bytes", e))?;
            // No swapping around the limit where swap accounting exists.
            let _ = write(&m.join("memory.memsw.limit_in_bytes"), &bytes);
            cg.enforced.push("memory");
        }
        if let Some(p) = &cg.pids {
            write(&p.join("pids.max"), &pids_max.to_string())
                .map_err(|e| limit_err("pids.max", e))?;
            cg.enforced.push("pids");
        }
        if let Some(c) = &cg.cpu {
            // A cgroup competes with the tasks next to it as *one* task of weight cpu.shares:
            // give the sandbox the weight of as many tasks as it may use CPUs, so a busy host
            // does not starve it below one CPU's share.
            let n = cpus.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
            });
            let shares = (1024.0 * n.max(1.0)) as u64;
            let _ = write(&c.join("cpu.shares"), &shares.to_string());
        }
        if let (Some(c), Some(n)) = (&cg.cpu, cpus) {
            let period = 100_000u64;
            let quota = ((n.max(0.01)) * period as f64) as u64;
            write(&c.join("cpu.cfs_period_us"), &period.to_string())
                .map_err(|e| limit_err("cpu.cfs_period_us", e))?;
            write(&c.join("cpu.cfs_quota_us"), &quota.to_string())
                .map_err(|e| limit_err("cpu.cfs_quota_us", e))?;
            cg.enforced.push("cpu");
        }
        if cg.freezer.is_some() {
            cg.enforced.push("freezer");
        }
        Ok(Some(cg))
    }

    fn create_v2(
        name: &str,
        memory_mb: u64,
        pids_max: u64,
        cpus: Option<f64>,
    ) -> Result<Option<Cgroup>, IsolationError> {
        let own = own_path("").unwrap_or_else(|| "/".into());
        let parent = v2_root().join(own.trim_start_matches('/'));
        // Controllers for the children (fails under the no-internal-processes rule when this
        // process's own cgroup is not delegated for it; freeze and kill still work).
        let _ = write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu");
        remove_stale(&parent);
        let dir = parent.join(name);
        if let Err(e) = std::fs::create_dir(&dir)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            cannot_create(&dir, &e);
            return Ok(None);
        }
        let mut cg = Cgroup {
            layout: Layout::V2,
            dirs: vec![dir.clone()],
            memory: None,
            pids: None,
            cpu: None,
            cpuacct: None,
            freezer: Some(dir.clone()),
            enforced: vec!["freezer"],
        };
        let mb = memory_mb.max(16).saturating_mul(1024 * 1024);
        if write(&dir.join("memory.max"), &mb.to_string()).is_ok() {
            let _ = write(&dir.join("memory.swap.max"), "0");
            cg.memory = Some(dir.clone());
            cg.enforced.push("memory");
        }
        if write(&dir.join("pids.max"), &pids_max.to_string()).is_ok() {
            cg.pids = Some(dir.clone());
            cg.enforced.push("pids");
        }
        if let Some(n) = cpus {
            let period = 100_000u64;
            let quota = ((n.max(0.01)) * period as f64) as u64;
            if write(&dir.join("cpu.max"), &format!("{quota} {period}")).is_ok() {
                cg.enforced.push("cpu");
            }
        }
        cg.cpu = Some(dir.clone());
        cg.cpuacct = Some(dir);
        Ok(Some(cg))
    }

    /// The `cgroup.procs` files the sandbox's first process writes its pid to.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    fn pids_in(&self) -> Vec<i32> {
        let Some(dir) = self.dirs.first() else {
            return Vec::new();
        };
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Freezes every process of the sandbox; returns once they are frozen.
    pub(crate) fn freeze(&self) -> Result<(), IsolationError> {
        self.set_frozen(true)
    }

    /// Thaws a frozen sandbox.
    pub(crate) fn thaw(&self) -> Result<(), IsolationError> {
        self.set_frozen(false)
    }

    fn set_frozen(&self, frozen: bool) -> Result<(), IsolationError> {
        let Some(dir) = &self.freezer else {
            return Err(IsolationError::Unsupported {
                what: "pause/resume",
                reason: "no freezer cgroup could be created for this sandbox".into(),
            });
        };
        let err = |e: std::io::Error| IsolationError::Cgroup {
            message: format!("freezer of {}: {e}", dir.display()),
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        match self.layout {
            Layout::V2 => {
                write(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" }).map_err(err)?;
                let want = if frozen { "frozen 1" } else { "frozen 0" };
                loop {
                    let events = std::fs::read_to_string(dir.join("cgroup.events")).map_err(err)?;
                    if events.lines().any(|l| l.trim() == want) || Instant::now() > deadline {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            _ => {
                let state = if frozen { "FROZEN" } else { "THAWED" };
                loop {
                    write(&dir.join("freezer.state"), state).map_err(err)?;
                    let now = std::fs::read_to_string(dir.join("freezer.state")).map_err(err)?;
                    if now.trim() == state {
                        return Ok(());
                    }
                    if Instant::now() > deadline {
                        return Err(IsolationError::Cgroup {
                            message: format!(
                                "the sandbox did not reach {state} within 5 s (state {})",
                                now.trim()
                            ),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }

    /// SIGKILLs every process of the sandbox, including those that forked meanwhile.
    pub(crate) fn kill_all(&self) {
        if self.layout == Layout::V2
            && let Some(dir) = self.dirs.first()
            && write(&dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        // v1: freeze (nothing can fork), kill, thaw (so the kills are delivered).
        let frozen = self.freeze().is_ok();
        for _ in 0..3 {
            let pids = self.pids_in();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: plain kill.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if frozen {
                break;
            }
        }
        if frozen {
            let _ = self.thaw();
        }
    }

    /// Memory in use (bytes), CPU time used (ns) and current number of tasks.
    pub(crate) fn stats(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let read =
            |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        match self.layout {
            Layout::V2 => {
                let dir = self.dirs.first();
                let mem = dir.and_then(|d| read(d.join("memory.current")));
                let cpu = dir.and_then(|d| {
                    let s = std::fs::read_to_string(d.join("cpu.stat")).ok()?;
                    s.lines()
                        .find_map(|l| l.strip_prefix("usage_usec "))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|us| us * 1000)
                });
                let pids = dir.and_then(|d| read(d.join("pids.current")));
                (mem, cpu, pids)
            }
            _ => (
                self.memory
                    .as_ref()
                    .and_then(|d| read(d.join("memory.usage_in_bytes"))),
                self.cpuacct
                    .as_ref()
                    .and_then(|d| read(d.join("cpuacct.usage"))),
                self.pids
                    .as_ref()
                    .and_then(|d| read(d.join("pids.current"))),
            ),
        }
    }

    /// Whether the memory limit was hit (v1 failcnt / v2 events max).
    pub(crate) fn memory_events(&self) -> Option<u64> {
        let m = self.memory.as_ref()?;
        match self.layout {
            Layout::V2 => {
                let s = std::fs::read_to_string(m.join("memory.events")).ok()?;
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            }
            _ => {
                let s = std::fs::read_to_string(m.join("memory.oom_control")).ok()?;
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            }
        }
    }

    /// Removes the directories (after every process has left).
    pub(crate) fn remove(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for dir in &self.dirs {
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) => {
                        if Instant::now() > deadline {
                            tracing::warn!(dir = %dir.display(), error = %e, "cgroup not removed");
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
        }
    }
}

/// Logs a cgroup that could not be made: expected (debug) for a non-root supervisor, which
/// gets rlimits instead, a warning for root.
fn cannot_create(dir: &Path, e: &std::io::Error) {
    // SAFETY: plain getter.
    if e.kind() == std::io::ErrorKind::PermissionDenied && unsafe { libc::geteuid() } != 0 {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot create a cgroup (not root)");
    } else {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot create a cgroup");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names_are_ours_only() {
        let ours = name("i0abc-def", 7);
        assert_eq!(owner_of(&ours), Some(proc_pid()));
        assert_eq!(owner_of("e2b-sbx-123-4"), Some(123));
        assert_eq!(owner_of("e2b-envd-123-0-012345678901"), None);
        assert_eq!(owner_of("e2b-123-4"), None);
        assert_eq!(owner_of("e2b--123-4"), None);
        assert_eq!(owner_of("e2b-i02oglmvhba15945drkmc-10714"), None);
        assert_eq!(owner_of("user.slice"), None);
    }
}
