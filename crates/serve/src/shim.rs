//! `sandbox-init`: the small program each plain sandbox runs between `e2b serve` and its envd.
//!
//! It makes the "no stray process" promise hold even when `e2b serve` is killed with SIGKILL:
//!
//! - the shim dies with `e2b serve` (`PR_SET_PDEATHSIG`, set by the runtime before exec);
//! - it starts envd in a new PID namespace (when permitted: root, or `CAP_SYS_ADMIN`), where envd
//!   is PID 1: orphans of the sandbox are re-parented to envd, which reaps them, and envd needs no
//!   sentinel process of its own;
//! - envd dies with the shim (`PR_SET_PDEATHSIG` again), and when the PID 1 of a namespace dies
//!   the kernel kills every process left in it: every command the sandbox ran, including
//!   daemonised grandchildren.
//!
//! Without permission for a PID namespace the shim runs envd as its plain child: envd still dies
//! with `e2b serve`, and `e2b serve` kills the sandbox's whole process tree on every orderly stop,
//! but after a SIGKILL of `e2b serve` a command that detached from envd could survive.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt as _;

use nix::sched::{CloneFlags, unshare};
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, getppid};

fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// Waits for `child` (reaping any other child on the way) and returns its exit code.
fn wait_for(child: Pid) -> i32 {
    loop {
        match waitpid(None, None) {
            Ok(status) if status.pid() == Some(child) => {
                if let Some(code) = exit_code(status) {
                    return code;
                }
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return 1,
        }
    }
}

/// `execvp` on a pointer array built before the fork: nothing is allocated in the child, which
/// matters when the caller (the `e2b` binary) already runs threads.
fn exec(argv: &[*const libc::c_char]) -> ! {
    if let Some(program) = argv.first() {
        // SAFETY: `argv` is a NULL-terminated array of pointers into CStrings that outlive
        // this call (the process image is replaced or `_exit`s).
        unsafe {
            libc::execvp(*program, argv.as_ptr());
        }
    }
    // SAFETY: _exit is async-signal-safe and ends this (forked) process.
    unsafe { libc::_exit(127) }
}

/// When this process was started as the shim (`<program> <prefix…> sandbox-init -- COMMAND…`,
/// as [`EnvdCommand`](crate::EnvdCommand) runs it), runs [`sandbox_init`] and exits with its
/// code; returns otherwise. Call it first thing in `main`: the shim then parses no command line
/// and sets nothing up, so each sandbox's shim costs little memory.
pub fn run_sandbox_init_if_asked(prefix: &[&str]) {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let n = prefix.len();
    let is_shim = args.len() > n + 1
        && args.iter().zip(prefix).all(|(a, p)| a.as_os_str() == *p)
        && args[n] == "sandbox-init"
        && args[n + 1] == "--";
    if is_shim {
        let code = sandbox_init(&args[n + 2..]);
        std::process::exit(code.clamp(0, 255));
    }
}

/// Runs `command` (envd) as described in the module docs and returns the exit code to exit
/// with. Call it from a binary's `main` for the hidden `sandbox-init` subcommand.
pub fn sandbox_init(command: &[OsString]) -> i32 {
    let argv: Vec<CString> = match command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
    {
        Ok(v) => v,
        Err(_) => {
            eprintln!("e2b sandbox-init: an argument holds a NUL byte");
            return 2;
        }
    };
    if argv.is_empty() {
        eprintln!("e2b sandbox-init: no command given (usage: sandbox-init -- PROGRAM ARGS...)");
        return 2;
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let own_pid_ns = unshare(CloneFlags::CLONE_NEWPID).is_ok();
    // SAFETY: the child only calls async-signal-safe functions (getppid, prctl, execvp, _exit)
    // on data prepared before the fork, and allocates nothing.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let parent = getppid();
            let _ = set_pdeathsig(Signal::SIGKILL);
            if parent.as_raw() == 1 && !own_pid_ns {
                // SAFETY: see above.
                unsafe { libc::_exit(1) }
            }
            // Without a PID namespace a plain child; with one, PID 1 of it, which reaps the
            // namespace's orphans (envd does) and whose exit kills everything left in it.
            exec(&ptrs)
        }
        Ok(ForkResult::Parent { child }) => wait_for(child),
        Err(e) => {
            eprintln!("e2b sandbox-init: fork failed: {e}");
            1
        }
    }
}
