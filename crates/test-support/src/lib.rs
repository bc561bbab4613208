//! Test helpers shared by the workspace (not published).
//!
//! Start the real envd daemon in-process on an ephemeral loopback port:
//!
//! ```no_run
//! # async fn demo() {
//! let envd = e2b_test_support::spawn_envd().await;
//! let url = envd.url(); // http://127.0.0.1:<port>
//! let token = envd.access_token(); // Some("test-token-…")
//! // ... drive it with a client; the daemon stops (and kills its processes) on drop.
//! # }
//! ```

use std::path::Path;

pub use e2b_envd::{EnvdConfig, EnvdHandle};

/// A daemon started for a test, with its own temporary working directory. Dropping it stops
/// the daemon, kills every process it started and removes the directory.
#[derive(Debug)]
pub struct TestEnvd {
    handle: Option<EnvdHandle>,
    workdir: tempfile::TempDir,
}

impl TestEnvd {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        self.handle.as_ref().map(|h| h.url()).unwrap_or_default()
    }

    /// The bound address.
    pub fn addr(&self) -> std::net::SocketAddr {
        match self.handle.as_ref() {
            Some(h) => h.local_addr(),
            None => std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// The access token to send in `X-Access-Token` (`None` if the daemon is open).
    pub fn access_token(&self) -> Option<String> {
        self.handle.as_ref().and_then(|h| h.access_token())
    }

    /// The daemon's default working directory (a fresh temporary directory).
    pub fn workdir(&self) -> &Path {
        self.workdir.path()
    }

    /// The underlying handle.
    pub fn handle(&self) -> Option<&EnvdHandle> {
        self.handle.as_ref()
    }

    /// Graceful shutdown (waits until every process is reaped).
    pub async fn shutdown(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
    }
}

/// Starts a daemon on `127.0.0.1:0` with a random access token and a temporary default
/// working directory. Panics if it cannot start (this is a test helper).
pub async fn spawn_envd() -> TestEnvd {
    spawn_envd_with(|c| c).await
}

/// Like [`spawn_envd`], with the configuration adjusted by `configure` (the bind address,
/// token and workdir are preset; override them if you need to).
#[allow(clippy::expect_used)]
pub async fn spawn_envd_with(configure: impl FnOnce(EnvdConfig) -> EnvdConfig) -> TestEnvd {
    let workdir = tempfile::tempdir().expect("create a temporary workdir");
    let token = format!(
        "test-token-{}-{}",
        std::process::id(),
        workdir.path().display().to_string().len()
    );
    let mut config = EnvdConfig::ephemeral();
    config.access_token = Some(token);
    config.default_workdir = Some(workdir.path().to_path_buf());
    let handle = e2b_envd::Envd::start(configure(config))
        .await
        .expect("start envd");
    TestEnvd {
        handle: Some(handle),
        workdir,
    }
}

/// Starts a daemon with no access token (open, as envd before `/init`).
pub async fn spawn_envd_open() -> TestEnvd {
    spawn_envd_with(|mut c| {
        c.access_token = None;
        c
    })
    .await
}

/// Makes sure the local account `name` exists (with a home under `/home`), creating it with
/// `useradd` when the tests run as root, and returns its home directory. Tests that run
/// commands as another user call this in their setup, as the E2B SDK suites do, instead of
/// needing the account made by hand.
///
/// # Panics
///
/// When the account is missing and cannot be created (not root, or no `useradd`): the test
/// fails with a message saying what is missing, rather than passing without running.
pub fn ensure_user_account(name: &str) -> std::path::PathBuf {
    let home = |name: &str| -> Option<std::path::PathBuf> {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name) && f.len() > 5).then(|| std::path::PathBuf::from(f[5]))
        })
    };
    if let Some(h) = home(name) {
        return h;
    }
    let status = std::process::Command::new("useradd")
        .args(["--create-home", "--shell", "/bin/bash", name])
        .status();
    // Another test may have created it meanwhile: look again before failing.
    match (home(name), status) {
        (Some(h), _) => h,
        (None, Ok(s)) => panic!(
            "missing: the local account '{name}', and `useradd {name}` failed ({s}); this test needs root to create it"
        ),
        (None, Err(e)) => panic!(
            "missing: the local account '{name}', and `useradd` could not run ({e}); this test needs root and useradd"
        ),
    }
}

/// `program` run as `nobody` (uid and gid 65534, no supplementary groups) through util-linux
/// `setpriv`, in `/`. `wrap` goes before it: a command that ends by running its arguments, for
/// example `["unshare", "-m", "sh", "-c", "…; exec \"$@\"", "sh"]`, or nothing.
pub fn as_nobody<S: AsRef<std::ffi::OsStr>>(
    wrap: &[S],
    program: impl AsRef<std::ffi::OsStr>,
) -> std::process::Command {
    const SETPRIV: [&str; 5] = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ];
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut cmd = std::process::Command::new(first);
            cmd.args(rest).args(SETPRIV);
            cmd
        }
        None => {
            let mut cmd = std::process::Command::new(SETPRIV[0]);
            cmd.args(&SETPRIV[1..]);
            cmd
        }
    };
    cmd.arg(program).current_dir("/");
    cmd
}

/// Readings from `/proc` for the benchmarks (Linux).
pub mod procfs {
    /// A `kB` field of `/proc/<pid>/status` (`pid` may be `self`), e.g. `VmHWM:` (peak RSS) or
    /// `VmRSS:`; 0 when unreadable.
    pub fn status_kib(pid: &str, key: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0)
    }

    /// The numeric fields of `/proc/<pid>/stat` after `(comm)`, indexed 1-based as in proc(5)
    /// (so `stat_field(&f, 14)` is utime); 0 for anything unreadable.
    fn stat_fields(pid: &str) -> Vec<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        rest.split_whitespace()
            .map(|v| v.parse().unwrap_or(0.0))
            .collect()
    }

    fn stat_field(f: &[f64], n: usize) -> f64 {
        f.get(n - 3).copied().unwrap_or(0.0)
    }

    /// CPU seconds (user + system) from `/proc/<pid>/stat`: the process's own, and the total of
    /// its waited-for children.
    pub fn cpu_seconds(pid: &str) -> (f64, f64) {
        const USER_HZ: f64 = 100.0;
        let f = stat_fields(pid);
        (
            (stat_field(&f, 14) + stat_field(&f, 15)) / USER_HZ,
            (stat_field(&f, 16) + stat_field(&f, 17)) / USER_HZ,
        )
    }

    /// Minor page faults of the process so far (`minflt`, field 10 of `/proc/<pid>/stat`).
    pub fn minor_faults(pid: &str) -> u64 {
        stat_field(&stat_fields(pid), 10) as u64
    }
}

/// Starts `cmd` (a daemon that prints its URL as its first stdout line, as `e2b-envd --port 0`
/// does) with stdout piped, and returns it with that URL.
///
/// # Panics
///
/// When it cannot start or prints no `http://` URL first.
#[allow(clippy::expect_used, clippy::panic)]
pub fn spawn_daemon_printing_url(mut cmd: std::process::Command) -> (std::process::Child, String) {
    use std::io::BufRead as _;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", cmd.get_program()));
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    let url = line.trim().to_owned();
    assert!(
        url.starts_with("http://"),
        "{:?} printed no URL first: {line:?}",
        cmd.get_program()
    );
    (child, url)
}

/// Floors for the streaming benchmarks: what moving a process's output costs without any
/// daemon, so a benchmark can report its own rate as a ratio measured in the same run.
pub mod floor {
    use std::io::{Read as _, Write as _};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// `head -c N /dev/zero | cat > /dev/null` through bash: the bare pipe. Returns the time.
    ///
    /// # Panics
    ///
    /// When bash cannot run or the pipeline fails.
    #[allow(clippy::expect_used, clippy::panic)]
    pub fn raw_pipe(bytes: u64) -> Duration {
        let t = Instant::now();
        let st = Command::new("bash")
            .arg("-c")
            .arg(format!("head -c {bytes} /dev/zero | cat > /dev/null"))
            .status()
            .expect("bash runs");
        assert!(st.success(), "the raw pipe failed: {st}");
        t.elapsed()
    }

    /// The floor for anything that forwards a pipe over loopback TCP: `head -c N /dev/zero`
    /// into a 1 MiB pipe, one blocking thread reading 1 MiB chunks and writing them to a TCP
    /// socket, one thread reading them back (no HTTP/2, no gRPC, no async runtime). Returns the
    /// time.
    ///
    /// # Panics
    ///
    /// When a socket, the thread or `head` fails, or a byte is lost.
    #[allow(clippy::expect_used, clippy::panic)]
    pub fn pipe_tcp_relay(bytes: u64) -> Duration {
        use std::os::fd::AsRawFd as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let t = Instant::now();
        let receiver = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("the relay connects");
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            loop {
                match conn.read(&mut buf).expect("read the relay") {
                    0 => break total,
                    n => total += n as u64,
                }
            }
        });
        let mut child = Command::new("/usr/bin/head")
            .args(["-c", &bytes.to_string(), "/dev/zero"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("head runs");
        let mut out = child.stdout.take().expect("head's stdout");
        // SAFETY: F_SETPIPE_SZ on a pipe we own (envd sizes its pipes the same way).
        unsafe {
            libc::fcntl(out.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
        }
        let mut sock = std::net::TcpStream::connect(addr).expect("connect the relay");
        sock.set_nodelay(true).expect("TCP_NODELAY");
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match out.read(&mut buf).expect("read head's output") {
                0 => break,
                n => sock.write_all(&buf[..n]).expect("write the relay"),
            }
        }
        drop(sock);
        assert_eq!(
            receiver.join().expect("the receiver"),
            bytes,
            "every byte relayed"
        );
        child.wait().expect("head exits");
        t.elapsed()
    }
}

/// The path of the scriptable fake ACP agent (`src/bin/fake-acp-agent.rs` of this crate), built on
/// first use.
///
/// Cargo gives a test `CARGO_BIN_EXE_<name>` only for binaries of its own package, and building
/// another package's tests does not build this package's binaries. So this looks for the binary in
/// the target directory of the running test (the parent of its `deps/` directory) and, when it is
/// missing or older than its source, runs `cargo build -p e2b-test-support --bin fake-acp-agent`
/// for the same profile and target directory (`$CARGO`, else `cargo` on `PATH`). Concurrent
/// callers are serialised by cargo's own lock; the answer is cached per process.
///
/// # Panics
///
/// When the binary cannot be built or located: the message says what failed.
#[allow(clippy::expect_used, clippy::panic)]
pub fn fake_acp_agent() -> &'static Path {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().expect("the running test's path");
        // target/<profile>/deps/<test> or target/<profile>/<example>
        let mut profile_dir = exe.parent().expect("a directory").to_path_buf();
        if profile_dir.file_name().is_some_and(|n| n == "deps" || n == "examples") {
            profile_dir.pop();
        }
        let bin = profile_dir.join("fake-acp-agent");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/fake-acp-agent.rs");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let fresh = matches!((modified(&bin), modified(&source)), (Some(b), Some(s)) if b >= s);
        if !fresh {
            let target_dir = profile_dir.parent().expect("the target directory");
            let profile = profile_dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("debug");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let mut cmd = std::process::Command::new(&cargo);
            cmd.args(["build", "-p", "e2b-test-support", "--bin", "fake-acp-agent"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .env("CARGO_TARGET_DIR", target_dir);
            match profile {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            let status = cmd.status().unwrap_or_else(|e| {
                panic!("missing: the fake ACP agent; could not run `{cargo} build` to build it: {e}")
            });
            assert!(
                status.success() && bin.exists(),
                "missing: the fake ACP agent at {}; `{cargo} build -p e2b-test-support --bin fake-acp-agent` failed ({status})",
                bin.display()
            );
        }
        bin
    })
}
