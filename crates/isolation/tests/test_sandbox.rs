//! The library API on a real sandbox: pause/resume of a busy sandbox, kill of every process
//! (setsid ones too), stats, setup errors. Needs root and user namespaces; fails saying so.
//! Own `main` (no libtest): the test binary is re-executed to build each sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use e2b_isolation::{IsolatedSandbox, IsolationError, Network, SandboxSpec};

fn main() {
    e2b_isolation::run_if_child();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: [(&str, fn()); 6] = [
        ("seccomp_refuses_keyctl", seccomp_refuses_keyctl),
        (
            "host_descriptors_do_not_leak_in",
            host_descriptors_do_not_leak_in,
        ),
        (
            "freeze_and_thaw_a_busy_sandbox",
            freeze_and_thaw_a_busy_sandbox,
        ),
        (
            "kill_takes_setsid_processes_along",
            kill_takes_setsid_processes_along,
        ),
        ("exit_code_is_the_programs", exit_code_is_the_programs),
        (
            "bad_spec_and_missing_program_are_errors",
            bad_spec_and_missing_program_are_errors,
        ),
    ];
    // The listing protocol of libtest, which cargo-nextest uses.
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            for (name, _) in tests {
                println!("{name}: test");
            }
        }
        return;
    }
    let probe = e2b_isolation::probe();
    assert!(
        probe.root,
        "these tests need root (ranges of host ids are mapped into sandboxes)"
    );
    assert!(
        probe.user_namespaces,
        "the kernel has user namespaces disabled"
    );
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        println!("test {name} ...");
        test();
        println!("test {name} ... ok");
    }
}

fn spec(name: &str) -> SandboxSpec {
    SandboxSpec::new(format!("t-{name}-{}", std::process::id())).with_network(Network::None)
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

fn host_pids_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .count()
}

fn freeze_and_thaw_a_busy_sandbox() {
    let mut s = IsolatedSandbox::spawn(
        &spec("freeze").with_cpu_count(Some(0.5)),
        Path::new("/bin/sh"),
        &sh("while :; do :; done"),
        &[],
    )
    .unwrap();
    let cpu = |s: &IsolatedSandbox| s.stats().cpu_ns.expect("cpu usage from the cgroup");
    std::thread::sleep(Duration::from_millis(300));
    assert!(cpu(&s) > 0, "the busy loop used no CPU");
    s.freeze().unwrap();
    let a = cpu(&s);
    std::thread::sleep(Duration::from_millis(400));
    let b = cpu(&s);
    assert_eq!(a, b, "a frozen sandbox used CPU");
    s.thaw().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(cpu(&s) > b, "a thawed sandbox did not run again");
    s.kill().unwrap();
}

fn kill_takes_setsid_processes_along() {
    let marker = format!("e2b-iso-lib-{}", std::process::id());
    let mut s = IsolatedSandbox::spawn(
        &spec("kill"),
        Path::new("/bin/bash"),
        &[
            "bash".into(),
            "-c".into(),
            format!("setsid bash -c '(exec -a {marker} sleep 1000) &'; sleep 1000"),
        ],
        &[],
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_pids_with(&marker) == 0 {
        assert!(Instant::now() < deadline, "the setsid child never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.kill().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_pids_with(&marker) > 0 {
        assert!(Instant::now() < deadline, "a setsid child survived kill()");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_code_is_the_programs() {
    let mut s =
        IsolatedSandbox::spawn(&spec("exit"), Path::new("/bin/sh"), &sh("exit 7"), &[]).unwrap();
    let status = s.wait().unwrap();
    assert_eq!(IsolatedSandbox::exit_code(status), 7);
}

fn bad_spec_and_missing_program_are_errors() {
    let err = IsolatedSandbox::spawn(
        &SandboxSpec::new("bad id/with slash"),
        Path::new("/bin/true"),
        &["true".into()],
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, IsolationError::Spec(_)), "{err}");
    let err = IsolatedSandbox::spawn(
        &spec("missing"),
        Path::new("/nonexistent/program"),
        &["x".into()],
        &[],
    )
    .unwrap_err();
    assert!(err.to_string().contains("program"), "{err}");
}

fn host_descriptors_do_not_leak_in() {
    use std::os::fd::AsRawFd as _;
    // A descriptor the supervisor holds without close-on-exec (as one inherited from its own
    // parent would be) must not reach the sandbox; a kept one must.
    let leaked = std::fs::File::open("/etc/hostname").unwrap();
    let kept = std::fs::File::open("/etc/hostname").unwrap();
    for f in [&leaked, &kept] {
        // SAFETY: plain fcntl on our own descriptors.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, 0) };
    }
    let script = format!(
        "test ! -e /proc/self/fd/{} && test -e /proc/self/fd/{}",
        leaked.as_raw_fd(),
        kept.as_raw_fd()
    );
    let mut s = IsolatedSandbox::spawn(
        &spec("fds"),
        Path::new("/bin/sh"),
        &sh(&script),
        &[kept.as_raw_fd()],
    )
    .unwrap();
    let status = s.wait().unwrap();
    assert_eq!(
        IsolatedSandbox::exit_code(status),
        0,
        "a host descriptor leaked into the sandbox, or a kept one is missing"
    );
}

fn seccomp_refuses_keyctl() {
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0): works without the filter.
    let py = format!(
        "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); \
         r = libc.syscall({}, 0, -3, 0); \
         sys.exit(0 if r == -1 and ctypes.get_errno() == 1 else 1)",
        libc::SYS_keyctl
    );
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test needs /usr/bin/python3"
    );
    let mut s = IsolatedSandbox::spawn(
        &spec("seccomp"),
        Path::new("/usr/bin/python3"),
        &["python3".into(), "-c".into(), py],
        &[],
    )
    .unwrap();
    let status = s.wait().unwrap();
    assert_eq!(
        IsolatedSandbox::exit_code(status),
        0,
        "keyctl was not refused with EPERM inside the sandbox"
    );
}
