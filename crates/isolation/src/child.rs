//! The re-executed child: a fresh, single-threaded process (so allocating between fork and
//! exec is fine here) that builds the sandbox and stays as its outer supervisor.
//!
//! Process tree, outermost first:
//!
//! - **stage 1** (this process, host pid namespace): joins the cgroups; forks the *holder*, which
//!   creates the user (and network) namespace; writes the id maps (a range as host root, its
//!   own ids otherwise); starts the NAT helper; prepares the idmapped mounts (as root);
//!   joins the namespaces, becomes their root (or their one user); unshares mount, PID, UTS,
//!   IPC and cgroup namespaces; forks the sandbox init and lets the holder exit (unless pasta
//!   needs it); forwards
//!   signals to the init and exits with its status.
//! - **init** (PID 1 of the sandbox): builds the root filesystem, `pivot_root`s into it, sets the
//!   hostname, forks the program, forwards signals to it, reaps orphans; when the program exits,
//!   the init exits and the kernel kills every process left in the sandbox.
//! - **program**: `setsid`, then `execveat` of the program opened before `pivot_root`.
//!
//! Each of them dies with its parent (`PR_SET_PDEATHSIG`), so a SIGKILLed supervisor takes the
//! whole sandbox along.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

use crate::spec::{ChildSpec, ID_COUNT, IdMap, Nat, Network, SANDBOX_USER_ID, Template};
use crate::sys::{self, check_int};

/// Exit code of stage 1 / init when setting the sandbox up failed (the reason went to the
/// status pipe).
const SETUP_FAILED: i32 = 125;

/// Signals the outer processes forward to their child.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process of the machine).
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: `ts` is written by the kernel.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// With `E2B_ISOLATION_TIMINGS` set: prints how long after `spawn` began `stage` was reached.
pub(crate) fn mark(from: Option<u64>, stage: &str) {
    if let Some(t0) = from {
        let ms = monotonic_ns().saturating_sub(t0) as f64 / 1e6;
        eprintln!("e2b-isolation timings: {ms:8.2} ms  {stage}");
    }
}

/// Runs stage 1; returns the exit code.
pub(crate) fn stage1(spec: ChildSpec) -> i32 {
    let status_fd = spec.status_fd;
    match stage1_inner(&spec) {
        Ok(code) => code,
        Err(msg) => {
            sys::write_all_fd(status_fd, msg.as_bytes());
            SETUP_FAILED
        }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for two descriptors.
    let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    check_int(ret, "pipe")?;
    use std::os::fd::FromRawFd as _;
    // SAFETY: both fds are new.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn fork() -> Result<libc::pid_t, String> {
    // SAFETY: this process is single-threaded (a fresh exec), so the child may do anything.
    let pid = unsafe { libc::fork() };
    check_int(pid, "fork")
}

fn set_pdeathsig() {
    // SAFETY: plain prctl.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn unblock_all_signals() {
    // SAFETY: sigset manipulation on a local set; SIGPIPE back to its default (Rust programs
    // ignore it, and an ignored signal stays ignored across exec: pasta refuses to start then).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

fn read_byte(fd: RawFd) -> bool {
    let mut b = 0u8;
    loop {
        // SAFETY: one byte into a local.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return n == 1;
    }
}

fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: valid rlimit struct.
    unsafe { libc::setrlimit(resource, &lim) };
}

fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Waits for signals; forwards [`FORWARDED`] ones to `child`, reaps every exited child, and
/// returns `child`'s exit code once it exited. `on_child_exit` runs before returning.
fn supervise(set: &libc::sigset_t, child: libc::pid_t) -> i32 {
    loop {
        // SAFETY: `set` is a valid signal set; `info` is written by the kernel.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(set, &mut info)
        };
        if sig == -1 {
            continue;
        }
        if sig == libc::SIGCHLD {
            loop {
                let mut status = 0;
                // SAFETY: plain waitpid.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid <= 0 {
                    break;
                }
                if pid == child {
                    return exit_code(status);
                }
            }
        } else {
            // SAFETY: plain kill.
            unsafe { libc::kill(child, sig) };
        }
    }
}

fn write_id_maps(pid: libc::pid_t, ids: IdMap) -> Result<(), String> {
    let (uid_line, gid_line) = match ids {
        IdMap::Range { base } => {
            let line = format!("0 {base} {ID_COUNT}\n");
            (line.clone(), line)
        }
        IdMap::Single { uid, gid } => {
            // Without CAP_SETGID on the host the kernel takes a gid map only once
            // setgroups(2) is denied for good in the namespace.
            sys::write_file(&format!("/proc/{pid}/setgroups"), b"deny")?;
            (
                format!("{SANDBOX_USER_ID} {uid} 1\n"),
                format!("{SANDBOX_USER_ID} {gid} 1\n"),
            )
        }
    };
    sys::write_file(&format!("/proc/{pid}/gid_map"), gid_line.as_bytes())?;
    sys::write_file(&format!("/proc/{pid}/uid_map"), uid_line.as_bytes())
}

/// The host directories of the base template that are mounted (idmapped where possible);
/// those that are symlinks on the host (merged /usr) become the same symlinks.
const BASE_DIRS: [&str; 7] = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Mounts of the base template, symlinks (`bin -> usr/bin`), and whether idmapping worked.
type BaseMounts = (Vec<Prepared>, Vec<(&'static str, String)>, bool);

/// One prepared mount for the init to attach.
struct Prepared {
    /// Path relative to the new root.
    rel: &'static str,
    fd: OwnedFd,
}

/// Detached copies of the base template's directories: idmapped into the sandbox's user
/// namespace (so host root's files belong to the sandbox's root and `sudo` works) where the
/// kernel and filesystem allow it, read-only and nodev either way. Also returns whether the
/// idmapping worked.
fn prepare_base_mounts(userns: Option<RawFd>) -> Result<BaseMounts, String> {
    let mut mounts = Vec::new();
    let mut links = Vec::new();
    let mut idmapped = true;
    for rel in BASE_DIRS {
        let host = format!("/{rel}");
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&host) {
                links.push((rel, target.to_string_lossy().into_owned()));
            }
            continue;
        }
        if !meta.is_dir() {
            continue;
        }
        let fd = idmapped_tree(&host, userns).or_else(|first| {
            idmapped = false;
            tracing::debug!(error = %first, "no idmapped mount; plain read-only bind");
            let fd = sys::open_tree_clone(&host, true)?;
            sys::mount_setattr(
                fd.as_raw_fd(),
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NODEV,
                None,
                true,
                &host,
            )?;
            Ok::<_, String>(fd)
        })?;
        mounts.push(Prepared { rel, fd });
    }
    // /etc: read-only and *not* idmapped, so host root's private files (shadow, ssh host keys)
    // stay unreadable even for the sandbox's root (their owner is not mapped in the sandbox).
    let etc = sys::open_tree_clone("/etc", true)?;
    sys::mount_setattr(
        etc.as_raw_fd(),
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NODEV,
        None,
        true,
        "/etc",
    )?;
    mounts.push(Prepared {
        rel: "etc",
        fd: etc,
    });
    Ok((mounts, links, idmapped))
}

fn idmapped_tree(path: &str, userns: Option<RawFd>) -> Result<OwnedFd, String> {
    idmapped_tree_with(path, userns, 0)
}

/// `path` cloned and idmapped into `userns`; `Err` without a user namespace to map into (an
/// unprivileged supervisor cannot idmap the host's filesystems) or where the kernel refuses.
fn idmapped_tree_with(path: &str, userns: Option<RawFd>, extra: u64) -> Result<OwnedFd, String> {
    let Some(userns) = userns else {
        return Err("idmapped mounts need a root supervisor".into());
    };
    let set = sys::MOUNT_ATTR_IDMAP | sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NODEV | extra;
    // Recursive first; a submount whose filesystem cannot be idmapped fails the whole tree,
    // then the top mount alone.
    let fd = sys::open_tree_clone(path, true)?;
    if sys::mount_setattr(fd.as_raw_fd(), set, Some(userns), true, path).is_ok() {
        return Ok(fd);
    }
    let fd = sys::open_tree_clone(path, false)?;
    sys::mount_setattr(fd.as_raw_fd(), set, Some(userns), false, path)?;
    Ok(fd)
}

fn prepare_dir_mount(
    dir: &std::path::Path,
    userns: Option<RawFd>,
) -> Result<(OwnedFd, bool), String> {
    let path = dir.to_string_lossy().into_owned();
    let meta = std::fs::metadata(&path).map_err(|e| format!("template directory {path}: {e}"))?;
    if !meta.is_dir() {
        return Err(format!("template {path} is not a directory"));
    }
    match idmapped_tree(&path, userns) {
        Ok(fd) => Ok((fd, true)),
        Err(e) => {
            tracing::debug!(error = %e, "idmapped template failed; plain read-only bind");
            let fd = sys::open_tree_clone(&path, true)?;
            sys::mount_setattr(fd.as_raw_fd(), sys::MOUNT_ATTR_RDONLY, None, true, &path)?;
            Ok((fd, false))
        }
    }
}

/// A host path prepared for a read-only bind into the sandbox (`--mount-ro`).
struct RoBind {
    fd: OwnedFd,
    /// Absolute path inside the sandbox.
    target: std::path::PathBuf,
    dir: bool,
}

/// A detached read-only (and nosuid, nodev) copy of `host`, idmapped into the sandbox's user
/// namespace where the filesystem allows it (host root's files then belong to the sandbox's
/// root; elsewhere they belong to `nobody` inside, readable as the host's modes allow).
fn prepare_ro_bind(
    host: &std::path::Path,
    target: &std::path::Path,
    userns: Option<RawFd>,
) -> Result<RoBind, String> {
    let path = host.to_string_lossy().into_owned();
    let meta = std::fs::metadata(&path).map_err(|e| format!("--mount-ro {path}: {e}"))?;
    let fd = match idmapped_tree_with(&path, userns, sys::MOUNT_ATTR_NOSUID) {
        Ok(fd) => fd,
        Err(e) => {
            tracing::debug!(error = %e, "idmapped bind failed; plain read-only bind");
            let fd = sys::open_tree_clone(&path, true)?;
            sys::mount_setattr(
                fd.as_raw_fd(),
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOSUID,
                None,
                true,
                &path,
            )?;
            fd
        }
    };
    Ok(RoBind {
        fd,
        target: target.to_path_buf(),
        dir: meta.is_dir(),
    })
}

/// Creates the mount point of `bind` under the new root `r` (directories 0755 on the way, no
/// symlink followed) and attaches the prepared mount there.
fn attach_ro_bind(r: &str, bind: &RoBind) -> Result<(), String> {
    let shown = bind.target.display();
    let comps: Vec<String> = bind
        .target
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let mut cur = r.to_string();
    for (i, c) in comps.iter().enumerate() {
        cur = format!("{cur}/{c}");
        let last = i + 1 == comps.len();
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "--mount-ro target {shown}: {} is a symlink in the sandbox; name the \
                     path it points to",
                    &cur[r.len()..]
                ));
            }
            Ok(m) => {
                if last && m.is_dir() != bind.dir {
                    return Err(format!(
                        "--mount-ro target {shown}: the sandbox has a {} there",
                        if m.is_dir() { "directory" } else { "file" }
                    ));
                }
                if !last && !m.is_dir() {
                    return Err(format!(
                        "--mount-ro target {shown}: {} is not a directory in the sandbox",
                        &cur[r.len()..]
                    ));
                }
            }
            Err(_) => {
                let made = if last && !bind.dir {
                    sys::touch(&cur)
                } else {
                    sys::mkdir(&cur, 0o755)
                };
                made.map_err(|e| {
                    format!(
                        "--mount-ro target {shown}: {e} (inside a read-only directory of the \
                         template the target must already exist)"
                    )
                })?;
            }
        }
        // The sandbox's /root is private (0700); `user` must be able to reach a bind below it.
        if i == 0 && !last && c == "root" {
            sys::chmod(&cur, 0o711)?;
        }
    }
    sys::move_mount(bind.fd.as_raw_fd(), &cur)
}

/// An anonymous in-memory file (close-on-exec), or `None` where the kernel has none.
fn memfd(name: &str) -> Option<std::fs::File> {
    let name = CString::new(name).ok()?;
    // SAFETY: plain memfd_create with a valid C string.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: a fresh fd that nothing else owns.
    (fd >= 0).then(|| unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// The last 2 KiB of what a helper wrote to `file`, on one line.
fn tail_of(file: std::fs::File) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = file;
    let len = file.seek(SeekFrom::End(0)).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(2048)));
    let mut buf = Vec::new();
    let _ = file.take(2048).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        "it printed nothing".into()
    } else {
        format!("it said: {text}")
    }
}

/// Starts the NAT helper for the holder's namespaces. Returns the fds stage 1 must keep (the
/// helper exits when they close, that is when stage 1 exits).
fn start_nat(spec: &ChildSpec, nat: &Nat, holder: libc::pid_t) -> Result<Vec<OwnedFd>, String> {
    match nat {
        Nat::Slirp4netns(bin) => {
            let (ready_r, ready_w) = pipe()?;
            let (exit_r, exit_w) = pipe()?;
            let bin_s = bin.to_string_lossy().into_owned();
            let mut argv = vec![
                bin_s.clone(),
                "--configure".into(),
                "--mtu=65520".into(),
                "--disable-host-loopback".into(),
                "--enable-seccomp".into(),
                format!("--ready-fd={}", ready_w.as_raw_fd()),
                format!("--exit-fd={}", exit_r.as_raw_fd()),
                holder.to_string(),
                "tap0".into(),
            ];
            // Its own mount-namespace sandbox needs root of the sandbox's user namespace,
            // which an unprivileged supervisor's sandbox does not have (it has one id); the
            // seccomp filter stays either way.
            if spec.ids.has_root() {
                argv.insert(4, "--enable-sandbox".into());
            }
            // slirp4netns has no quiet mode: its chatter goes to an anonymous memory file,
            // shown only when it fails (the user's terminal carries the sandbox's own output).
            let log = memfd("e2b-slirp4netns-log");
            let pid = fork()?;
            if pid == 0 {
                unblock_all_signals();
                let out = log.as_ref().map_or(2, |f| f.as_raw_fd());
                // SAFETY: plain dup2 (stdout may carry the supervisor's own output).
                unsafe {
                    libc::dup2(out, 1);
                    libc::dup2(out, 2);
                }
                clear_cloexec(ready_w.as_raw_fd());
                clear_cloexec(exit_r.as_raw_fd());
                exec_path(&bin_s, &argv);
            }
            drop(ready_w);
            drop(exit_r);
            if !read_byte(ready_r.as_raw_fd()) {
                return Err(format!(
                    "{bin_s} did not configure the sandbox's network ({}); use --network none \
                     to run without network",
                    log.map_or_else(|| "see its messages above".into(), tail_of)
                ));
            }
            Ok(vec![exit_w])
        }
        Nat::Pasta(bin) => {
            // pasta forks to the background once the namespace is configured; a watcher
            // process kills it when stage 1's pipe closes.
            let bin_s = bin.to_string_lossy().into_owned();
            let pidfile = format!("/tmp/.e2b-isolation-pasta-{}", std::process::id());
            // `--runas 0` as root: pasta otherwise switches to `nobody`, which cannot join the
            // sandbox's user namespace (created by host root), and fails. Unprivileged, it
            // stays the supervisor's user.
            let runas = match spec.ids {
                IdMap::Range { .. } => 0,
                IdMap::Single { uid, .. } => uid,
            };
            let argv = [
                bin_s.clone(),
                "--runas".into(),
                runas.to_string(),
                "--config-net".into(),
                "--quiet".into(),
                "-t".into(),
                "none".into(),
                "-u".into(),
                "none".into(),
                "-T".into(),
                "none".into(),
                "-U".into(),
                "none".into(),
                "--no-map-gw".into(),
                "--dns-forward".into(),
                "169.254.1.1".into(),
                "-P".into(),
                pidfile.clone(),
                holder.to_string(),
            ];
            let pid = fork()?;
            if pid == 0 {
                unblock_all_signals();
                // SAFETY: plain dup2 (stdout may carry the supervisor's own output).
                unsafe { libc::dup2(2, 1) };
                exec_path(&bin_s, &argv);
            }
            let mut status = 0;
            // SAFETY: plain waitpid on our child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if exit_code(status) != 0 {
                return Err(format!(
                    "{bin_s} failed to configure the sandbox's network (exit {}); use --network \
                     none to run without network",
                    exit_code(status)
                ));
            }
            let daemon: libc::pid_t = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            let _ = std::fs::remove_file(&pidfile);
            let (exit_r, exit_w) = pipe()?;
            let watcher = fork()?;
            if watcher == 0 {
                drop(exit_w);
                close_program_fds(spec);
                read_byte(exit_r.as_raw_fd());
                if daemon > 0 {
                    // SAFETY: plain kill.
                    unsafe { libc::kill(daemon, libc::SIGKILL) };
                }
                // SAFETY: leave without running destructors of the parent's state.
                unsafe { libc::_exit(0) };
            }
            Ok(vec![exit_w])
        }
    }
}

fn close_other_fds(spec: &ChildSpec) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    for fd in fds {
        if fd > 2 && fd != spec.status_fd && !spec.keep_fds.contains(&fd) {
            // SAFETY: closing a descriptor this process does not use (the directory's own fd
            // is already closed, or fails harmlessly).
            unsafe { libc::close(fd) };
        }
    }
}

fn set_cloexec(fd: RawFd) {
    // SAFETY: plain fcntl.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

/// Closes the status pipe and the program's descriptors in a helper process.
fn close_program_fds(spec: &ChildSpec) {
    // SAFETY: closing descriptors this process does not use.
    unsafe {
        libc::close(spec.status_fd);
        for fd in &spec.keep_fds {
            libc::close(*fd);
        }
    }
}

fn clear_cloexec(fd: RawFd) {
    // SAFETY: plain fcntl.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
}

/// execv in a forked child; never returns.
fn exec_path(path: &str, argv: &[String]) -> ! {
    let c_argv: Vec<CString> = argv
        .iter()
        .filter_map(|a| CString::new(a.as_str()).ok())
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    if let Ok(p) = CString::new(path) {
        // SAFETY: NULL-terminated argv of valid strings.
        unsafe { libc::execv(p.as_ptr(), ptrs.as_ptr()) };
    }
    eprintln!("e2b-isolation: exec {path}: {}", sys::errno_text());
    // SAFETY: leave the forked child.
    unsafe { libc::_exit(127) }
}

fn stage1_inner(spec: &ChildSpec) -> Result<i32, String> {
    mark(
        spec.timings_from,
        "stage 1 runs (the binary was executed again)",
    );
    // SAFETY: plain getters.
    let (my_pid, parent) = unsafe { (libc::getpid(), libc::getppid()) };
    // Nothing the supervisor's own parent left open (without close-on-exec) reaches the
    // sandbox: only the status pipe and the program's descriptors stay.
    close_other_fds(spec);
    // Helpers this process execs (the NAT helper) must not inherit the program's descriptors:
    // only the program's own fork clears close-on-exec again.
    set_cloexec(spec.status_fd);
    for fd in &spec.keep_fds {
        set_cloexec(*fd);
    }
    let set = block_signals();
    let own_net = spec.network != Network::Host;

    // The holder creates the user (and network) namespace and keeps them alive until the
    // sandbox's init is in them; then it exits. It is forked before this process joins the
    // cgroups, so that creating the namespaces (a network
    // namespace can wait tens of milliseconds for the kernel's cleanup of earlier ones) and
    // joining the cgroups (a v1 attach waits for an RCU grace period per hierarchy) overlap.
    // The holder only sleeps; everything the sandbox runs is forked after the join.
    let (ready_r, ready_w) = pipe()?;
    let (hold_r, hold_w) = pipe()?;
    let holder = fork()?;
    if holder == 0 {
        set_pdeathsig();
        drop(ready_r);
        drop(hold_w);
        let mut flags = libc::CLONE_NEWUSER;
        if own_net {
            flags |= libc::CLONE_NEWNET;
        }
        // SAFETY: single-threaded child.
        if unsafe { libc::unshare(flags) } == -1 {
            let msg = format!(
                "cannot create a user namespace: {} (the kernel needs user namespaces: check \
                 `sysctl user.max_user_namespaces`; use --isolation none to run without \
                 isolation)",
                sys::errno_text()
            );
            sys::write_all_fd(spec.status_fd, msg.as_bytes());
            // SAFETY: leave the forked child.
            unsafe { libc::_exit(1) };
        }
        sys::write_all_fd(ready_w.as_raw_fd(), b"1");
        close_program_fds(spec);
        read_byte(hold_r.as_raw_fd());
        // SAFETY: leave the forked child.
        unsafe { libc::_exit(0) };
    }
    drop(ready_w);
    drop(hold_r);
    for procs in &spec.cgroup_procs {
        std::fs::write(procs, my_pid.to_string())
            .map_err(|e| format!("join cgroup {}: {e}", procs.display()))?;
    }
    if let Some(bytes) = spec.rlimit_as {
        set_rlimit(libc::RLIMIT_AS, bytes);
    }
    mark(spec.timings_from, "stage 1: joined the cgroups");
    if !read_byte(ready_r.as_raw_fd()) {
        return Err(String::new());
    }
    mark(
        spec.timings_from,
        "holder: user (and network) namespace created",
    );
    write_id_maps(holder, spec.ids)?;
    let userns = sys::open(&format!("/proc/{holder}/ns/user"), libc::O_RDONLY)?;
    let netns = if own_net {
        Some(sys::open(
            &format!("/proc/{holder}/ns/net"),
            libc::O_RDONLY,
        )?)
    } else {
        None
    };
    let nat_fds = match (&spec.network, &spec.nat) {
        (Network::Internet, Some(nat)) => start_nat(spec, nat, holder)?,
        (Network::Internet, None) => {
            return Err(
                "--network internet needs a NAT helper: install the `passt` (pasta) \
                        or `slirp4netns` package, or use --network none"
                    .into(),
            );
        }
        _ => Vec::new(),
    };

    mark(spec.timings_from, "stage 1: id maps written, NAT started");
    // A root supervisor prepares the mounts here, in the host's mount namespace: idmapping
    // needs CAP_SYS_ADMIN there. An unprivileged one can only clone mounts in the sandbox's
    // own mount namespace, after the unshare below.
    let early = if spec.ids.has_root() {
        Some(prepare_root(spec, Some(userns.as_raw_fd()))?)
    } else {
        None
    };
    let program = sys::open(&spec.program.to_string_lossy(), libc::O_PATH)?;
    mark(spec.timings_from, "stage 1: mounts prepared");

    // Enter the namespaces as their root.
    // SAFETY: single-threaded process; fds are valid namespace fds.
    check_int(
        unsafe { libc::setns(userns.as_raw_fd(), libc::CLONE_NEWUSER) },
        "join the sandbox's user namespace",
    )?;
    if let Some(netns) = &netns {
        // SAFETY: as above.
        check_int(
            unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) },
            "join the sandbox's network namespace",
        )?;
    }
    if netns.is_some() {
        loopback_up()?;
    }
    // Root of the sandbox, or (unprivileged) its `user`, the one id it has; setgroups(2) is
    // denied there and the supplementary groups stay empty.
    let inner = if spec.ids.has_root() {
        0
    } else {
        SANDBOX_USER_ID
    };
    // SAFETY: credential calls with constant arguments.
    unsafe {
        if spec.ids.has_root() {
            check_int(libc::setgroups(0, std::ptr::null()), "setgroups")?;
        }
        check_int(libc::setresgid(inner, inner, inner), "setresgid")?;
        check_int(libc::setresuid(inner, inner, inner), "setresuid")?;
    }
    // The credential change cleared the parent-death signal: set it again.
    set_pdeathsig();
    // SAFETY: plain getter.
    if unsafe { libc::getppid() } != parent {
        return Err("the supervisor exited while the sandbox was starting".into());
    }
    let flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWCGROUP;
    // SAFETY: single-threaded process.
    check_int(
        unsafe { libc::unshare(flags) },
        "unshare mount/pid/uts/ipc namespaces",
    )?;
    let (root, binds) = match early {
        Some(prepared) => prepared,
        None => prepare_root(spec, None)?,
    };

    mark(
        spec.timings_from,
        "stage 1: namespaces entered and unshared",
    );
    // Set only now, inside the user namespace: the kernel counts processes per user and per
    // namespace, so the bound applies to the sandbox's processes and not to the host user's
    // (which the NAT helper forked above belongs to).
    if let Some(max) = spec.rlimit_nproc {
        set_rlimit(libc::RLIMIT_NPROC, max);
    }
    let init = fork()?;
    if init == 0 {
        drop(hold_w);
        drop(nat_fds);
        drop(ready_r);
        drop(userns);
        drop(netns);
        let code = match init_main(spec, root, binds, &program, &set) {
            Ok(code) => code,
            Err(msg) => {
                sys::write_all_fd(spec.status_fd, msg.as_bytes());
                SETUP_FAILED
            }
        };
        // SAFETY: leave the forked child.
        unsafe { libc::_exit(code) };
    }
    // The namespaces are held by the processes in them now: the holder exits (it is reaped
    // by `supervise`), one process fewer per sandbox, except for pasta, which quits when
    // the process it was started for exits. Stage 1 keeps the NAT fds (the helpers exit when
    // it does) and nothing of the program's.
    let hold_w = matches!(spec.nat, Some(Nat::Pasta(_)) if spec.network == Network::Internet)
        .then_some(hold_w);
    // SAFETY: closing fds this process no longer uses.
    unsafe {
        libc::close(spec.status_fd);
        for fd in &spec.keep_fds {
            libc::close(*fd);
        }
    }
    drop(program);
    drop(root);
    drop(binds);
    let code = supervise(&set, init);
    drop(hold_w);
    drop(nat_fds);
    Ok(code)
}

/// The template's root and the `--mount-ro` binds as detached mounts for the init to attach:
/// idmapped into `userns` where one is given and the kernel allows it.
fn prepare_root(
    spec: &ChildSpec,
    userns: Option<RawFd>,
) -> Result<(RootPlan, Vec<RoBind>), String> {
    let root = match &spec.template {
        Template::Base => {
            let (mounts, links, idmapped) = prepare_base_mounts(userns)?;
            if !idmapped && userns.is_some() {
                eprintln!(
                    "e2b-isolation: this kernel or filesystem cannot idmap the host's /usr into \
                     the sandbox; files there belong to `nobody` inside and sudo will not work"
                );
            }
            RootPlan::Base { mounts, links }
        }
        Template::Dir(dir) => {
            let (fd, idmapped) = prepare_dir_mount(dir, userns)?;
            if !idmapped && userns.is_some() {
                eprintln!(
                    "e2b-isolation: the template {} could not be idmapped; its files keep their \
                     host owners inside the sandbox",
                    dir.display()
                );
            }
            RootPlan::Dir { lower: fd }
        }
        // The supervisor unpacks archives and passes the directory.
        Template::Archive(p) | Template::OciLayout(p) => {
            return Err(format!(
                "internal error: the template {} was not unpacked",
                p.display()
            ));
        }
    };
    let binds = spec
        .ro_mounts
        .iter()
        .map(|(host, target)| prepare_ro_bind(host, target, userns))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((root, binds))
}

/// Brings the network namespace's `lo` up (a new namespace starts with it down).
fn loopback_up() -> Result<(), String> {
    // SAFETY: a datagram socket only used for the interface ioctls below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let sock = check_int(sock, "socket for the loopback interface")?;
    // SAFETY: `ifreq` is plain data; the name fits; ioctls on our own socket.
    let result = unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut ret = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req);
        if ret == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            ret = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req);
        }
        ret
    };
    let err = sys::errno_text();
    // SAFETY: closing our socket.
    unsafe { libc::close(sock) };
    if result != 0 {
        return Err(format!("bring the sandbox's loopback up: {err}"));
    }
    Ok(())
}

enum RootPlan {
    Base {
        mounts: Vec<Prepared>,
        links: Vec<(&'static str, String)>,
    },
    Dir {
        lower: OwnedFd,
    },
}

/// Where the new root is assembled, inside the sandbox's private mount namespace.
const STAGING: &str = "/tmp";

fn init_main(
    spec: &ChildSpec,
    plan: RootPlan,
    binds: Vec<RoBind>,
    program: &OwnedFd,
    set: &libc::sigset_t,
) -> Result<i32, String> {
    set_pdeathsig();
    let root = build_root(spec, plan, binds)?;
    mark(spec.timings_from, "init: root filesystem built");
    enter_root(&root)?;
    let host = sys::cstr(&spec.id)?;
    // SAFETY: valid buffer and length.
    check_int(
        unsafe { libc::sethostname(host.as_ptr(), spec.id.len()) },
        "sethostname",
    )?;

    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| sys::cstr(a))
        .collect::<Result<_, _>>()?;
    let mut env: Vec<CString> = vec![
        sys::cstr("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")?,
        sys::cstr("HOME=/root")?,
        sys::cstr(&format!("HOSTNAME={}", spec.id))?,
        sys::cstr("E2B_SANDBOX=true")?,
    ];
    for (k, v) in &spec.env {
        env.push(sys::cstr(&format!("{k}={v}"))?);
    }
    mark(spec.timings_from, "init: pivoted, forking the program");
    let child = fork()?;
    if child == 0 {
        unblock_all_signals();
        // SAFETY: plain calls in the forked child.
        unsafe {
            libc::setsid();
            libc::chdir(c"/".as_ptr());
        }
        for fd in &spec.keep_fds {
            clear_cloexec(*fd);
        }
        // Landlock first (its system calls must not be refused by the seccomp filter).
        if spec.template == Template::Base {
            match crate::fs_rules::install() {
                Ok("not enforced") => eprintln!(
                    "e2b-isolation: this kernel has no Landlock: writes are limited by the \
                     read-only mounts alone"
                ),
                Ok(_) => {}
                Err(msg) => {
                    sys::write_all_fd(spec.status_fd, msg.as_bytes());
                    // SAFETY: leave the forked child.
                    unsafe { libc::_exit(127) };
                }
            }
        }
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        if let Err(msg) = crate::seccomp::install() {
            sys::write_all_fd(spec.status_fd, msg.as_bytes());
            // SAFETY: leave the forked child.
            unsafe { libc::_exit(127) };
        }
        mark(
            spec.timings_from,
            "program: landlock and seccomp installed, exec",
        );
        let msg = sys::execveat(program.as_raw_fd(), &argv, &env);
        sys::write_all_fd(spec.status_fd, msg.as_bytes());
        // SAFETY: leave the forked child.
        unsafe { libc::_exit(127) };
    }
    // SAFETY: the init keeps none of the program's descriptors.
    unsafe {
        libc::close(spec.status_fd);
        for fd in &spec.keep_fds {
            libc::close(*fd);
        }
    }
    let code = supervise(set, child);
    // Returning exits the init; the kernel then kills every process left in the sandbox.
    Ok(code)
}

fn build_root(spec: &ChildSpec, plan: RootPlan, binds: Vec<RoBind>) -> Result<String, String> {
    sys::mount(None, "/", None, libc::MS_REC | libc::MS_SLAVE, None)?;
    let size = format!("mode=0755,size={}m", spec.writable_mb.max(16));
    sys::mount(
        Some("tmpfs"),
        STAGING,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&size),
    )?;
    let (root, base) = match plan {
        RootPlan::Base { mounts, links } => {
            let r = STAGING.to_string();
            for (rel, target) in &links {
                sys::symlink(target, &format!("{r}/{rel}"))?;
            }
            for m in &mounts {
                let dst = format!("{r}/{}", m.rel);
                sys::mkdir(&dst, 0o755)?;
                sys::move_mount(m.fd.as_raw_fd(), &dst)?;
            }
            (r, true)
        }
        RootPlan::Dir { lower } => {
            for d in ["lower", "upper", "work", "root"] {
                sys::mkdir(&format!("{STAGING}/{d}"), 0o755)?;
            }
            sys::move_mount(lower.as_raw_fd(), &format!("{STAGING}/lower"))?;
            let opts = format!(
                "lowerdir={STAGING}/lower,upperdir={STAGING}/upper,workdir={STAGING}/work,userxattr"
            );
            sys::mount(
                Some("overlay"),
                &format!("{STAGING}/root"),
                Some("overlay"),
                0,
                Some(&opts),
            )?;
            (format!("{STAGING}/root"), false)
        }
    };
    let r = root.as_str();
    for (dir, mode) in [
        ("home", 0o755),
        ("tmp", 0o1777),
        ("root", 0o700),
        ("run", 0o755),
        ("var", 0o755),
        ("var/tmp", 0o1777),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("mnt", 0o755),
        ("opt", 0o755),
    ] {
        let p = format!("{r}/{dir}");
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {}
            // A template's symlink or file here (`tmp -> /host/dir`) would redirect the
            // mounts and directories below, which are made before `pivot_root`: it is
            // replaced (in the sandbox's own overlay layer) by a directory. Parents come
            // first in this list, so no symlink is followed on the way.
            Ok(_) if !base => {
                std::fs::remove_file(&p).map_err(|e| format!("replace {p}: {e}"))?;
                sys::mkdir(&p, mode)?;
            }
            Ok(_) => {}
            Err(_) => sys::mkdir(&p, mode)?,
        }
    }
    let home = format!("{r}/home/user");
    if !base && std::fs::symlink_metadata(&home).is_ok_and(|m| !m.is_dir()) {
        std::fs::remove_file(&home).map_err(|e| format!("replace {home}: {e}"))?;
    }
    if std::fs::symlink_metadata(&home).is_err() {
        sys::mkdir(&home, 0o755)?;
        sys::chown(&home, SANDBOX_USER_ID, SANDBOX_USER_ID)?;
    }
    if base {
        write_etc(spec, r)?;
    } else {
        // A template's own /etc is writable through the overlay. Paths resolve inside the
        // template's tree (its symlinks cannot point these writes at the host).
        let _ = sys::write_in_root(r, "etc/hostname", format!("{}\n", spec.id).as_bytes());
        let _ = sys::write_in_root(r, "etc/hosts", hosts(&spec.id).as_bytes());
        let _ = sys::write_in_root(r, "etc/resolv.conf", resolv_conf(spec).as_bytes());
    }
    for bind in &binds {
        attach_ro_bind(r, bind)?;
    }
    drop(binds);
    // /proc of the sandbox's pid namespace (this process is its PID 1).
    sys::mount(
        Some("proc"),
        &format!("{r}/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    if spec.network != Network::Host {
        // sysfs shows the sandbox's own network devices; not fatal where a host forbids it.
        let _ = sys::mount(
            Some("sysfs"),
            &format!("{r}/sys"),
            Some("sysfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        );
    }
    build_dev(r, spec.writable_mb)?;
    Ok(root)
}

fn hosts(id: &str) -> String {
    format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{id}\n")
}

fn resolv_conf(spec: &ChildSpec) -> String {
    match (&spec.network, &spec.nat) {
        (Network::None, _) => "# no network in this sandbox (--network none)\n".into(),
        // slirp4netns's built-in DNS.
        (_, Some(Nat::Slirp4netns(_))) => "nameserver 10.0.2.3\n".into(),
        // pasta's --dns-forward address.
        (_, Some(Nat::Pasta(_))) => "nameserver 169.254.1.1\n".into(),
        _ => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    }
}

/// The sandbox's own account files over the host's read-only /etc: the host's system
/// accounts (ids below 1000), `user` (1000, home /home/user) with passwordless sudo, no
/// password hashes of the host.
fn write_etc(spec: &ChildSpec, r: &str) -> Result<(), String> {
    let dir = format!("{r}/run/e2b-etc");
    sys::mkdir(&dir, 0o755)?;
    let passwd_in = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let mut passwd = String::new();
    let mut shadow = String::new();
    let mut names = Vec::new();
    for line in passwd_in.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 7 || f[0] == "user" {
            continue;
        }
        let Ok(uid) = f[2].parse::<u32>() else {
            continue;
        };
        if uid < 1000 || uid == 65534 {
            passwd.push_str(line);
            passwd.push('\n');
            shadow.push_str(&format!("{}:*:19000:0:99999:7:::\n", f[0]));
            names.push(f[0].to_string());
        }
    }
    passwd.push_str("user:x:1000:1000::/home/user:/bin/bash\n");
    shadow.push_str("user:*:19000:0:99999:7:::\n");
    let group_in = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let mut group = String::new();
    let mut gshadow = String::new();
    let mut shadow_gid = 0;
    for line in group_in.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 4 || f[0] == "user" {
            continue;
        }
        let Ok(gid) = f[2].parse::<u32>() else {
            continue;
        };
        if gid < 1000 || gid == 65534 {
            if f[0] == "shadow" {
                shadow_gid = gid;
            }
            let members: Vec<&str> = f[3]
                .split(',')
                .filter(|m| names.iter().any(|n| n == m))
                .collect();
            group.push_str(&format!("{}:x:{}:{}\n", f[0], gid, members.join(",")));
            gshadow.push_str(&format!("{}:*::{}\n", f[0], members.join(",")));
        }
    }
    group.push_str("user:x:1000:\n");
    gshadow.push_str("user:*::\n");
    let sudoers = "Defaults env_reset\n\
        Defaults secure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\n\
        root ALL=(ALL:ALL) ALL\n\
        user ALL=(ALL:ALL) NOPASSWD: ALL\n";
    // sudo refuses a sudo.conf that does not belong to root: the host's, owned by root inside.
    let sudo_conf = std::fs::read_to_string("/etc/sudo.conf").unwrap_or_default();
    let files: [(&str, String, u32, u32); 9] = [
        ("sudo.conf", sudo_conf, 0o644, 0),
        ("passwd", passwd, 0o644, 0),
        ("group", group, 0o644, 0),
        ("shadow", shadow, 0o640, shadow_gid),
        ("gshadow", gshadow, 0o640, shadow_gid),
        ("sudoers", sudoers.into(), 0o440, 0),
        ("hosts", hosts(&spec.id), 0o644, 0),
        ("hostname", format!("{}\n", spec.id), 0o644, 0),
        ("resolv.conf", resolv_conf(spec), 0o644, 0),
    ];
    for (name, content, mode, gid) in files {
        // Without a root in the sandbox (an unprivileged supervisor) there is no sudo to
        // configure, and the files belong to `user`, the one id there is.
        if !spec.ids.has_root() && name.starts_with("sudo") {
            continue;
        }
        let target = format!("{r}/etc/{name}");
        // Only over regular files that exist on the host (a read-only /etc cannot get new
        // entries, and a symlink target could point outside the sandbox's /etc).
        match std::fs::symlink_metadata(format!("/etc/{name}")) {
            Ok(m) if m.file_type().is_file() => {}
            _ => continue,
        }
        if name == "resolv.conf" && spec.network == Network::Host {
            continue;
        }
        let src = format!("{dir}/{name}");
        sys::write_file(&src, content.as_bytes())?;
        if spec.ids.has_root() {
            sys::chown(&src, 0, gid)?;
        }
        sys::chmod(&src, mode)?;
        sys::mount(Some(&src), &target, None, libc::MS_BIND, None)?;
    }
    Ok(())
}

fn build_dev(r: &str, writable_mb: u64) -> Result<(), String> {
    let dev = format!("{r}/dev");
    sys::mount(
        Some("tmpfs"),
        &dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let dst = format!("{dev}/{node}");
        sys::touch(&dst)?;
        sys::mount(
            Some(&format!("/dev/{node}")),
            &dst,
            None,
            libc::MS_BIND,
            None,
        )?;
    }
    sys::mkdir(&format!("{dev}/pts"), 0o755)?;
    sys::mount(
        Some("devpts"),
        &format!("{dev}/pts"),
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620,gid=5"),
    )
    .or_else(|_| {
        sys::mount(
            Some("devpts"),
            &format!("{dev}/pts"),
            Some("devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=0620"),
        )
    })?;
    sys::symlink("pts/ptmx", &format!("{dev}/ptmx"))?;
    sys::symlink("/proc/self/fd", &format!("{dev}/fd"))?;
    sys::symlink("/proc/self/fd/0", &format!("{dev}/stdin"))?;
    sys::symlink("/proc/self/fd/1", &format!("{dev}/stdout"))?;
    sys::symlink("/proc/self/fd/2", &format!("{dev}/stderr"))?;
    sys::mkdir(&format!("{dev}/shm"), 0o1777)?;
    sys::mount(
        Some("tmpfs"),
        &format!("{dev}/shm"),
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("mode=1777,size={}m", writable_mb.max(16))),
    )?;
    Ok(())
}

fn enter_root(root: &str) -> Result<(), String> {
    let c = sys::cstr(root)?;
    // SAFETY: valid path.
    check_int(unsafe { libc::chdir(c.as_ptr()) }, "chdir to the new root")?;
    sys::pivot_root_dot()?;
    // SAFETY: constant path.
    check_int(
        unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) },
        "detach the host's root",
    )?;
    // SAFETY: constant path.
    check_int(unsafe { libc::chdir(c"/".as_ptr()) }, "chdir /")?;
    Ok(())
}
