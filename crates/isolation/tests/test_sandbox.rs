//! The library API on a real sandbox: pause/resume of a busy sandbox, kill of every process
//! (setsid ones too), stats, setup errors. Needs root and user namespaces; fails saying so.
//! Own `main` (no libtest): the test binary is re-executed to build each sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use e2b_isolation::{IsolatedSandbox, IsolationError, Network, RoMount, SandboxSpec};

fn main() {
    e2b_isolation::run_if_child();
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The re-executed test binary as an unprivileged supervisor (see `unprivileged`).
    if args.first().map(String::as_str) == Some(UNPRIVILEGED_ARG) {
        std::process::exit(run_unprivileged_supervisor(&args[1..]));
    }
    let tests: [(&str, fn()); 15] = [
        (
            "unprivileged_sandbox_is_isolated_with_one_user",
            unprivileged_sandbox_is_isolated_with_one_user,
        ),
        (
            "unprivileged_internet_works_with_an_accessible_tun",
            unprivileged_internet_works_with_an_accessible_tun,
        ),
        (
            "unprivileged_internet_without_tun_access_is_named",
            unprivileged_internet_without_tun_access_is_named,
        ),
        (
            "weaker_limits_are_told_to_the_program",
            weaker_limits_are_told_to_the_program,
        ),
        (
            "pasta_gives_a_tap_device_and_dns_and_no_host_loopback",
            pasta_gives_a_tap_device_and_dns_and_no_host_loopback,
        ),
        (
            "cgroup_v2_freezes_counts_and_kills",
            cgroup_v2_freezes_counts_and_kills,
        ),
        (
            "landlock_refuses_writes_outside_the_writable_paths",
            landlock_refuses_writes_outside_the_writable_paths,
        ),
        (
            "ro_mounts_show_host_paths_read_only",
            ro_mounts_show_host_paths_read_only,
        ),
        (
            "bad_ro_mounts_are_spec_errors",
            bad_ro_mounts_are_spec_errors,
        ),
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
    SandboxSpec::new(format!("t-{name}-{}", std::process::id())).network(Network::None)
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
        &spec("freeze").cpu_count(Some(0.5)),
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

/// A host directory of its own for a test, removed on drop.
struct HostDir(std::path::PathBuf);

impl HostDir {
    fn new(name: &str) -> Self {
        let p = std::path::PathBuf::from(format!("/var/tmp/e2b-iso-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ro_mounts_show_host_paths_read_only() {
    let dir = HostDir::new("ro");
    let d = dir.0.display().to_string();
    std::fs::write(dir.0.join("f"), "hello").unwrap();
    std::fs::create_dir_all(dir.0.join("pkg/bin")).unwrap();
    std::fs::write(dir.0.join("pkg/bin/tool"), "#!/bin/sh\necho tool-ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.0.join("pkg/bin/tool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let spec = spec("ro")
        .ro_mount(RoMount::same_path(&dir.0))
        .ro_mount(RoMount::new(dir.0.join("pkg"), "/root/agent"))
        .ro_mount(RoMount::new(dir.0.join("f"), "/home/user/notes.txt"));
    // As the sandbox's root: the files are there, writes fail (read-only, even for root), a
    // program in a bound directory runs, /root lets `user` through to the bind below it.
    let script = format!(
        "set -e; test \"$(cat {d}/f)\" = hello; \
         if echo x > {d}/f 2>/dev/null; then echo wrote-over; exit 1; fi; \
         if touch {d}/new 2>/dev/null; then echo created; exit 1; fi; \
         test \"$(/root/agent/bin/tool)\" = tool-ran; \
         test \"$(cat /home/user/notes.txt)\" = hello; \
         test \"$(stat -c %a /root)\" = 711; \
         test \"$(setpriv --reuid 1000 --regid 1000 --clear-groups /root/agent/bin/tool)\" = tool-ran"
    );
    let mut s = IsolatedSandbox::spawn(&spec, Path::new("/bin/sh"), &sh(&script), &[]).unwrap();
    let status = s.wait().unwrap();
    assert_eq!(
        IsolatedSandbox::exit_code(status),
        0,
        "a --mount-ro path was missing, writable, or unreachable inside the sandbox"
    );
    assert_eq!(std::fs::read_to_string(dir.0.join("f")).unwrap(), "hello");
    assert!(!dir.0.join("new").exists(), "a write reached the host");
}

fn bad_ro_mounts_are_spec_errors() {
    let dir = HostDir::new("badro");
    for (mount, want) in [
        (RoMount::new("/definitely/not/here", "/x"), "not/here"),
        (RoMount::new(&dir.0, "relative"), "absolute"),
        (RoMount::new(&dir.0, "/"), "root"),
        (RoMount::new(&dir.0, "/proc/x"), "/proc"),
        (RoMount::new(&dir.0, "/a/../b"), ".."),
    ] {
        let err = IsolatedSandbox::spawn(
            &spec("badro").ro_mount(mount.clone()),
            Path::new("/bin/true"),
            &["true".into()],
            &[],
        )
        .unwrap_err();
        assert!(
            matches!(err, IsolationError::Spec(_)) && err.to_string().contains(want),
            "{mount:?}: {err}"
        );
    }
    // A target inside a read-only template directory that does not exist there.
    let err = IsolatedSandbox::spawn(
        &spec("badro2").ro_mount(RoMount::new(&dir.0, "/usr/e2b-no-such-dir")),
        Path::new("/bin/true"),
        &["true".into()],
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(err, IsolationError::Setup(_)) && err.to_string().contains("read-only"),
        "{err}"
    );
}

fn landlock_refuses_writes_outside_the_writable_paths() {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): the kernel's ABI.
    // SAFETY: a query with no pointers.
    let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    assert!(
        abi >= 1,
        "this kernel has no Landlock (landlock_create_ruleset: {}): it needs CONFIG_SECURITY_LANDLOCK \
         and `landlock` in the lsm= boot parameter",
        std::io::Error::last_os_error()
    );
    // As the sandbox's root, on the sandbox's root tmpfs, which is mounted read-write: only
    // Landlock refuses there (EACCES, "Permission denied"). Remounting the read-only /usr is
    // refused too (a Landlock-restricted process cannot change its mounts).
    let script = "awk '$2==\"/\" {print $4}' /proc/mounts | grep -q '^rw' || { echo root-not-rw; exit 2; }; \
        if mkdir /opt/landlock-probe 2>/tmp/err; then echo made-a-dir; exit 1; fi; \
        grep -q 'Permission denied' /tmp/err || { cat /tmp/err; exit 3; }; \
        if echo x > /etc-probe 2>/dev/null; then echo wrote-at-root; exit 1; fi; \
        if mount -o remount,rw /usr 2>/dev/null; then echo remounted-usr; exit 4; fi; \
        echo ok > /home/user/f && echo ok > /tmp/f && echo ok > /root/f && echo ok > /var/tmp/f";
    let mut s =
        IsolatedSandbox::spawn(&spec("landlock"), Path::new("/bin/sh"), &sh(script), &[]).unwrap();
    let status = s.wait().unwrap();
    assert_eq!(
        IsolatedSandbox::exit_code(status),
        0,
        "Landlock did not refuse a write on a read-write mount outside the writable paths, or \
         refused one inside them"
    );
}

/// The cgroup v2 code path (`cgroup.freeze`, `cgroup.kill`, `cpu.stat`, and `memory.max` /
/// `pids.max` where the v2 hierarchy has those controllers), forced onto the host's v2
/// hierarchy: `/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a hybrid one.
fn cgroup_v2_freezes_counts_and_kills() {
    let root = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .find(|r| Path::new(r).join("cgroup.controllers").exists())
        .expect(
            "no cgroup v2 hierarchy is mounted (neither /sys/fs/cgroup nor /sys/fs/cgroup/unified)",
        );
    let controllers = std::fs::read_to_string(Path::new(root).join("cgroup.controllers")).unwrap();
    // SAFETY: this test binary runs its tests one after another on the main thread; the
    // spawner thread reads the environment only while spawn() waits for it.
    unsafe { std::env::set_var("E2B_ISOLATION_CGROUP_V2_ROOT", root) };
    let marker = format!("e2b-iso-v2-{}", std::process::id());
    let started = IsolatedSandbox::spawn(
        &spec("v2").memory_mb(256).pids_max(64),
        Path::new("/bin/bash"),
        &[
            "bash".into(),
            "-c".into(),
            format!("setsid bash -c '(exec -a {marker} sleep 1000) &'; while :; do :; done"),
        ],
        &[],
    );
    // SAFETY: as above.
    unsafe { std::env::remove_var("E2B_ISOLATION_CGROUP_V2_ROOT") };
    let mut s = started.unwrap();
    assert_eq!(s.limits().cgroup, "v2", "{:?}", s.limits());
    for c in ["memory", "pids"] {
        let available = controllers.split_whitespace().any(|x| x == c);
        assert_eq!(
            s.limits().enforced.contains(&c),
            available,
            "{c}: available on {root} = {available}, limits {:?}",
            s.limits()
        );
        if !available {
            println!(
                "  ({c} is not a v2 controller on this host: {root} has `{}`)",
                controllers.trim()
            );
        }
    }
    let cpu = |s: &IsolatedSandbox| s.stats().cpu_ns.expect("usage_usec from the v2 cpu.stat");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (cpu(&s) == 0 || host_pids_with(&marker) == 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(cpu(&s) > 0, "the busy loop used no CPU");
    assert!(
        host_pids_with(&marker) > 0,
        "the setsid child did not start"
    );
    s.freeze().unwrap();
    let a = cpu(&s);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        a,
        cpu(&s),
        "a sandbox frozen through cgroup.freeze used CPU"
    );
    s.thaw().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(cpu(&s) > a, "a thawed sandbox did not run again");
    s.kill().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_pids_with(&marker) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        host_pids_with(&marker),
        0,
        "cgroup.kill left the setsid child running"
    );
    let leftover = std::fs::read_dir(root).unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with(&format!("e2b-t-v2-{}", std::process::id()))
    });
    assert!(!leftover, "the sandbox's v2 cgroup was not removed");
}

/// Host processes running `pasta`.
fn pasta_processes() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            // argv[0] (the binary is `passt`, `pasta` a link to it).
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    c.split(|b| *b == 0)
                        .next()
                        .is_some_and(|a| a.ends_with(b"pasta"))
                })
                .unwrap_or(false)
        })
        .count()
}

/// `--network internet` through pasta (forced with `E2B_ISOLATION_NAT=pasta`; slirp4netns is
/// preferred when both are installed): the sandbox gets its interface, a default route and
/// pasta's DNS address; the host's loopback stays unreachable; pasta ends with the sandbox. No
/// traffic leaves the machine (only the sandbox's own loopback is dialled).
fn pasta_gives_a_tap_device_and_dns_and_no_host_loopback() {
    assert!(
        Path::new("/usr/bin/pasta").exists(),
        "this test needs pasta (Debian package `passt`, installed by .ci/run)"
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let before = pasta_processes();
    // The sandbox waits for the test (EOF on a kept pipe) before it exits, so pasta is
    // counted while its sandbox runs.
    let (hold_r, hold_w) = std::io::pipe().unwrap();
    use std::os::fd::AsRawFd as _;
    let fd = hold_r.as_raw_fd();
    let script = format!(
        "ip -o link | grep -v ' lo:' | grep -q 'UP' || {{ echo no-interface; exit 2; }}; \
         ip route show default | grep -q '^default via' || {{ echo no-route; exit 3; }}; \
         grep -qx 'nameserver 169.254.1.1' /etc/resolv.conf || {{ echo no-dns; exit 4; }}; \
         if timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo reached; exit 5; fi; \
         read -r _ <&{fd}; exit 0"
    );
    // SAFETY: tests run one after another on the main thread (see cgroup_v2_…).
    unsafe { std::env::set_var("E2B_ISOLATION_NAT", "pasta") };
    let started = IsolatedSandbox::spawn(
        &spec("pasta").network(Network::Internet),
        Path::new("/bin/bash"),
        &["bash".into(), "-c".into(), script],
        &[fd],
    );
    drop(hold_r);
    // SAFETY: as above.
    unsafe { std::env::remove_var("E2B_ISOLATION_NAT") };
    let mut s = started.unwrap();
    assert_eq!(
        pasta_processes(),
        before + 1,
        "pasta is not running for the sandbox"
    );
    drop(hold_w);
    let status = s.wait().unwrap();
    assert_eq!(
        IsolatedSandbox::exit_code(status),
        0,
        "pasta did not configure the sandbox (interface, route, DNS) or the host loopback was reached"
    );
    assert!(
        listener.accept().is_err(),
        "the host's loopback listener got a connection from the sandbox"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while pasta_processes() > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(pasta_processes(), before, "pasta outlived its sandbox");
}

/// When a sandbox gets weaker limits than asked, its program finds the note in
/// `E2B_SANDBOX_LIMITS_NOTE` (for envd to report). Made here with the cgroup v2 path on a v2
/// hierarchy without the memory and pids controllers (this hybrid host's `unified`); on a host
/// whose v2 hierarchy has them, the variable must be absent.
fn weaker_limits_are_told_to_the_program() {
    let root = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .find(|r| Path::new(r).join("cgroup.controllers").exists())
        .expect("no cgroup v2 hierarchy is mounted");
    let script = format!(
        "case \"${{{v}:-}}\" in *limits*) exit 10;; '') exit 20;; *) exit 30;; esac",
        v = e2b_isolation::LIMITS_NOTE_ENV
    );
    // SAFETY: tests run one after another on the main thread (see cgroup_v2_…).
    unsafe { std::env::set_var("E2B_ISOLATION_CGROUP_V2_ROOT", root) };
    let started = IsolatedSandbox::spawn(&spec("note"), Path::new("/bin/sh"), &sh(&script), &[]);
    // SAFETY: as above.
    unsafe { std::env::remove_var("E2B_ISOLATION_CGROUP_V2_ROOT") };
    let mut s = started.unwrap();
    let weaker = s.limits().note.is_some();
    let code = IsolatedSandbox::exit_code(s.wait().unwrap());
    if weaker {
        assert_eq!(
            code,
            10,
            "the program did not get the limits note {:?}",
            s.limits().note
        );
    } else {
        assert_eq!(code, 20, "full limits, yet the program got a note");
    }
}

/// First argument of the re-executed test binary when it acts as an unprivileged supervisor:
/// `UNPRIVILEGED_ARG NETWORK SCRIPT` starts `sh -c SCRIPT` in a sandbox and exits with its
/// code (or 125 with the error on stderr).
const UNPRIVILEGED_ARG: &str = "__unprivileged-supervisor";

fn run_unprivileged_supervisor(args: &[String]) -> i32 {
    let network: Network = args[0].parse().unwrap();
    let spec = SandboxSpec::new(format!("t-unpriv-{}", std::process::id()))
        .network(network)
        .pids_max(64);
    match IsolatedSandbox::spawn(&spec, Path::new("/bin/bash"), &sh(&args[1]), &[]) {
        Ok(mut s) => IsolatedSandbox::exit_code(s.wait().unwrap()),
        Err(e) => {
            eprintln!("{e}");
            125
        }
    }
}

/// Runs this test binary as `nobody` (uid 65534), the supervisor of one sandbox, with `wrap`
/// (for example `unshare -m sh -c '…; exec "$@"' sh`) before it; returns its output.
fn unprivileged(wrap: &[&str], network: &str, script: &str) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    for tool in ["setpriv", "unshare"] {
        assert!(
            std::process::Command::new(tool)
                .arg("--version")
                .output()
                .is_ok(),
            "this test needs `{tool}` (util-linux)"
        );
    }
    e2b_test_support::as_nobody(wrap, exe)
        .args([UNPRIVILEGED_ARG, network, script])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The escape attempts of docs/isolation.md from a sandbox whose supervisor is not root: the
/// sandbox's one account is `user` (the supervisor's own uid), and it still cannot see a
/// host file, signal or see a host process of the same host uid, write outside its writable
/// places, reach the host's loopback, become root, or leave a `setsid` child behind.
fn unprivileged_sandbox_is_isolated_with_one_user() {
    let dir = HostDir::new("unpriv");
    let secret = dir.0.join("secret");
    std::fs::write(&secret, "host secret").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A host process of the same host uid as the sandbox's processes.
    let mut host_sleeper = KillOnDrop(
        e2b_test_support::as_nobody::<&str>(&[], "sleep")
            .arg("1000")
            .spawn()
            .unwrap(),
    );
    let host_pid = host_sleeper.0.id();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let marker = format!("e2b-unpriv-orphan-{}", std::process::id());
    let script = format!(
        r#"fail() {{ echo "FAIL: $*"; exit 1; }}
        [ "$(id -u)" = 1000 ] && [ "$(id -un)" = user ] || fail "not user: $(id)"
        [ "$HOME" = /root ] || [ -n "$HOME" ] || fail "no HOME"
        cat {secret} 2>/dev/null && fail "read a host file"
        [ -e /proc/{host_pid} ] && fail "sees a host process"
        kill -0 {host_pid} 2>/dev/null && fail "signals a host process"
        touch /usr/x 2>/dev/null && fail "wrote /usr"
        touch /etc/x 2>/dev/null && fail "wrote /etc"
        touch /opt/x 2>/dev/null && fail "wrote /opt"
        touch /home/user/ok /tmp/ok || fail "cannot write its home or /tmp"
        (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && fail "reached the host loopback"
        sudo -n true 2>/dev/null && fail "became root"
        [ "$(ulimit -u)" = 64 ] || fail "pids rlimit $(ulimit -u)"
        setsid bash -c '(exec -a {marker} sleep 1000) &'
        echo ALL-OK"#,
        secret = secret.display()
    );
    let out = unprivileged(&[], "none", &script);
    assert_all_ok(&out);
    // The setsid orphan died with its sandbox; the host process of the same uid did not.
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_pids_with(&marker) > 0 {
        assert!(
            Instant::now() < deadline,
            "a setsid child outlived its sandbox"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        host_sleeper.0.try_wait().unwrap().is_none(),
        "the host process of the same uid was killed"
    );
}

/// A host process killed when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The script of [`unprivileged`] exited 0 after printing `ALL-OK` (else its `FAIL: …` line
/// and the supervisor's error are shown).
fn assert_all_ok(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ALL-OK"),
        "status {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private mount namespace for the unprivileged supervisor whose `/dev/net/tun` is a new
/// node of the same device with `mode` (this machine's own is 0600; most distributions make it
/// 0666), so the test changes nothing on the host.
fn tun_wrap(mode: &str) -> Vec<String> {
    let node = format!("/var/tmp/e2b-tun-{mode}-{}", std::process::id());
    vec![
        "unshare".into(),
        "-m".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        format!(
            "rm -f {node}; mknod -m {mode} {node} c 10 200 && mount --bind {node} /dev/net/tun \
             && rm -f {node} && exec \"$@\""
        ),
        "sh".into(),
    ]
}

fn unprivileged_internet_works_with_an_accessible_tun() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        r#"ls /sys/class/net | grep -vx lo | grep -q . || {{ echo "FAIL: no NAT interface"; exit 1; }}
        grep -q nameserver /etc/resolv.conf || {{ echo "FAIL: no DNS"; exit 1; }}
        (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && {{ echo "FAIL: host loopback"; exit 1; }}
        echo ALL-OK"#
    );
    let wrap = tun_wrap("0666");
    let wrap: Vec<&str> = wrap.iter().map(String::as_str).collect();
    let out = unprivileged(&wrap, "internet", &script);
    assert_all_ok(&out);
}

fn unprivileged_internet_without_tun_access_is_named() {
    let wrap = tun_wrap("0600");
    let wrap: Vec<&str> = wrap.iter().map(String::as_str).collect();
    let out = unprivileged(&wrap, "internet", "echo started");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(
        stderr.contains("/dev/net/tun") && stderr.contains("--network none"),
        "the error does not name /dev/net/tun and the way out: {stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("started"));
}
