//! The seccomp deny-list every process of a sandbox runs under: system calls a sandbox never
//! needs and that widen the kernel surface (kernel modules, kexec, keyrings, BPF, perf,
//! `open_by_handle_at`, clock changes, io_uring, …) fail with `EPERM`. Installed by the
//! sandbox's init in the program's process while it is root of the user namespace (so without
//! `no_new_privs`: setuid `sudo` keeps working), before `execveat`; inherited and irreversible.

use crate::sys::check_int;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 system calls on x86_64 have this bit set; they are refused (no bypass of the list).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;

fn denied() -> Vec<i64> {
    #[allow(unused_mut)]
    let mut v = vec![
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_userfaultfd,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_syslog,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_quotactl,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_fanotify_init,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_lookup_dcookie]);
    v
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Installs the filter on the calling thread (and everything it will exec or fork).
pub(crate) fn install() -> Result<(), String> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    // struct seccomp_data { int nr; __u32 arch; … }
    let mut prog = vec![
        stmt(LD_W_ABS, 4),
        // Another architecture (32-bit compat): its numbers differ from the list; refuse.
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_ERRNO_EPERM),
        stmt(LD_W_ABS, 0),
        jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(RET_K, RET_ERRNO_EPERM),
    ];
    for nr in denied() {
        prog.push(jump(JEQ_K, nr as u32, 0, 1));
        prog.push(stmt(RET_K, RET_ERRNO_EPERM));
    }
    prog.push(stmt(RET_K, RET_ALLOW));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at a valid filter that outlives the call.
    let ret = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const libc::sock_fprog as libc::c_ulong,
            0,
            0,
        )
    };
    check_int(
        ret,
        "install the seccomp filter (the kernel needs CONFIG_SECCOMP_FILTER)",
    )
    .map(|_| ())
}
