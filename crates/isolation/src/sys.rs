//! Thin wrappers over the system calls the sandbox setup needs (some have no libc wrapper).
//!
//! Everything here runs in the single-threaded re-executed child (see `child.rs`), where
//! allocating is allowed; errors are plain strings that end up in the setup error the parent
//! reports.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

/// `Err("<what>: <errno text>")` when `ret` is -1.
pub(crate) fn check(ret: libc::c_long, what: &str) -> Result<libc::c_long, String> {
    if ret == -1 {
        Err(format!("{what}: {}", std::io::Error::last_os_error()))
    } else {
        Ok(ret)
    }
}

/// Same as [`check`] for `c_int` results.
pub(crate) fn check_int(ret: libc::c_int, what: &str) -> Result<libc::c_int, String> {
    check(libc::c_long::from(ret), what).map(|_| ret)
}

pub(crate) fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("path {s:?} contains a NUL byte"))
}

pub(crate) fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let src_c = src.map(cstr).transpose()?;
    let target_c = cstr(target)?;
    let fstype_c = fstype.map(cstr).transpose()?;
    let data_c = data.map(cstr).transpose()?;
    // SAFETY: every pointer is either null or a valid NUL-terminated string that outlives the
    // call.
    let ret = unsafe {
        libc::mount(
            src_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            target_c.as_ptr(),
            fstype_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            flags,
            data_c
                .as_ref()
                .map_or(std::ptr::null(), |c| c.as_ptr().cast::<libc::c_void>()),
        )
    };
    check_int(
        ret,
        &format!(
            "mount {} on {target} (type {})",
            src.unwrap_or("none"),
            fstype.unwrap_or("none")
        ),
    )
    .map(|_| ())
}

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC [| AT_RECURSIVE])`: a detached
/// copy of the mount at `path`.
pub(crate) fn open_tree_clone(path: &str, recursive: bool) -> Result<OwnedFd, String> {
    let c = cstr(path)?;
    let mut flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: valid path pointer; the kernel returns a new fd or -1.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    let fd = check(ret, &format!("open_tree {path}"))?;
    // SAFETY: the fd is new and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The kernel's `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
pub(crate) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], attr_set, userns_fd)`.
pub(crate) fn mount_setattr(
    fd: RawFd,
    set: u64,
    userns_fd: Option<RawFd>,
    recursive: bool,
    what: &str,
) -> Result<(), String> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns_fd.map_or(0, |fd| fd as u64),
    };
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `attr` is a valid `struct mount_attr` of the size passed; "" is a valid path.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret, &format!("mount_setattr {what}")).map(|_| ())
}

/// `move_mount(fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)`: attaches a detached mount.
pub(crate) fn move_mount(fd: RawFd, target: &str) -> Result<(), String> {
    let c = cstr(target)?;
    // SAFETY: valid pointers; the kernel validates the fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(ret, &format!("move_mount onto {target}")).map(|_| ())
}

pub(crate) fn pivot_root_dot() -> Result<(), String> {
    // SAFETY: constant paths.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
    check(ret, "pivot_root").map(|_| ())
}

pub(crate) fn open(path: &str, flags: libc::c_int) -> Result<OwnedFd, String> {
    let c = cstr(path)?;
    // SAFETY: valid path; mode is only read with O_CREAT.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as libc::c_uint) };
    let fd = check_int(fd, &format!("open {path}"))?;
    // SAFETY: new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn write_file(path: &str, data: &[u8]) -> Result<(), String> {
    std::fs::write(path, data).map_err(|e| format!("write {path}: {e}"))
}

/// Writes `rel` (a path relative to the directory `root`) resolving it as if `root` were `/`
/// (`openat2` with `RESOLVE_IN_ROOT`): a symlink in a template's tree (`etc -> /tmp/x`) is
/// followed inside that tree, never into the host's.
pub(crate) fn write_in_root(root: &str, rel: &str, data: &[u8]) -> Result<(), String> {
    let dir = open(root, libc::O_PATH | libc::O_DIRECTORY)?;
    let c = cstr(rel)?;
    // SAFETY: zeroed open_how is valid (all fields are integers).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC) as u64;
    how.mode = 0o644;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid fd, path and struct of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    let fd = check(ret, &format!("open {root}/{rel}"))?;
    // SAFETY: new fd.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
    use std::io::Write as _;
    (&file)
        .write_all(data)
        .map_err(|e| format!("write {root}/{rel}: {e}"))
}

pub(crate) fn mkdir(path: &str, mode: u32) -> Result<(), String> {
    let c = cstr(path)?;
    // SAFETY: valid path.
    let ret = unsafe { libc::mkdir(c.as_ptr(), mode as libc::mode_t) };
    if ret == -1 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) {
            return Ok(());
        }
        return Err(format!("mkdir {path}: {e}"));
    }
    // mkdir's mode is filtered by the umask; set it exactly.
    chmod(path, mode)
}

pub(crate) fn chmod(path: &str, mode: u32) -> Result<(), String> {
    let c = cstr(path)?;
    // SAFETY: valid path.
    let ret = unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) };
    check_int(ret, &format!("chmod {path}")).map(|_| ())
}

pub(crate) fn chown(path: &str, uid: u32, gid: u32) -> Result<(), String> {
    let c = cstr(path)?;
    // SAFETY: valid path.
    let ret = unsafe { libc::lchown(c.as_ptr(), uid, gid) };
    check_int(ret, &format!("chown {path}")).map(|_| ())
}

pub(crate) fn symlink(target: &str, link: &str) -> Result<(), String> {
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("symlink {link}: {e}"))
}

pub(crate) fn touch(path: &str) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map(|_| ())
        .map_err(|e| format!("create {path}: {e}"))
}

pub(crate) fn errno_text() -> String {
    std::io::Error::last_os_error().to_string()
}

/// Writes all of `buf` to `fd`, ignoring errors (used for the status pipe).
pub(crate) fn write_all_fd(fd: RawFd, buf: &[u8]) {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: pointer and length come from a live slice.
        let n = unsafe { libc::write(fd, buf[off..].as_ptr().cast(), buf.len() - off) };
        if n <= 0 {
            if n == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        off += n as usize;
    }
}

/// `execveat(fd, "", argv, envp, AT_EMPTY_PATH)`; returns only on failure.
pub(crate) fn execveat(fd: RawFd, argv: &[CString], envp: &[CString]) -> String {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: NULL-terminated arrays of valid strings that outlive the call.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd,
            c"".as_ptr(),
            a.as_ptr(),
            e.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    format!("exec the sandbox's program: {}", errno_text())
}
