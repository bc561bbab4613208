//! `e2b-envd --isolate`: the daemon runs inside its own sandbox; each test is an escape attempt
//! from inside and asserts that the host is untouched. Needs root and user namespaces (CI runs
//! as root); a test that lacks them fails saying what is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2b_envd_proto::filesystem::ListDirRequest;
use e2b_envd_proto::filesystem::filesystem_client::FilesystemClient;
use e2b_envd_proto::process::process_client::ProcessClient;

/// Fails (with the reason) when this machine cannot run isolated sandboxes.
fn require_isolation() {
    // SAFETY: plain getter.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "isolation tests need root (the supervisor maps a range of host ids into the sandbox)"
    );
    let n: u64 = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .expect("/proc/sys/user/max_user_namespaces is missing: this kernel has no user namespaces")
        .trim()
        .parse()
        .unwrap();
    assert!(
        n > 0,
        "user namespaces are disabled (sysctl user.max_user_namespaces=0)"
    );
}

/// An isolated daemon started as a separate process (`e2b-envd --isolate`).
struct Sandbox {
    child: Child,
    url: String,
    id: String,
}

impl Sandbox {
    fn start(extra: &[&str]) -> Sandbox {
        require_isolation();
        let id = format!("iso-{}-{}", std::process::id(), unique());
        let mut child = Command::new(env!("CARGO_BIN_EXE_e2b-envd"))
            .args(["--isolate", "--port", "0", "--sandbox-id", &id])
            .args(if extra.contains(&"--network") {
                &[][..]
            } else {
                &["--network", "none"][..]
            })
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start e2b-envd --isolate");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the isolated daemon printed no URL within 30 s");
        let url = line.trim().to_string();
        if !url.starts_with("http://") {
            let status = child.wait();
            panic!(
                "the isolated daemon failed to start (see its stderr above): {status:?}; \
                 stdout: {url:?}"
            );
        }
        Sandbox { child, url, id }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    async fn process(&self) -> ProcessClient<tonic::transport::Channel> {
        ProcessClient::new(self.channel().await)
    }

    async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// Runs `bash -l -c cmd` as `user` (the default) or another user; returns stdout, stderr
    /// and the exit code.
    async fn run_as(&self, user: &str, cmd: &str) -> (String, String, i32) {
        tokio::time::timeout(Duration::from_secs(90), self.run_as_inner(user, cmd))
            .await
            .unwrap_or_else(|_| panic!("`{cmd}` in the sandbox did not finish within 90 s"))
    }

    async fn run_as_inner(&self, user: &str, cmd: &str) -> (String, String, i32) {
        let mut c = self.process().await;
        let mut req = tonic::Request::new(common::bash(cmd));
        req.metadata_mut()
            .insert("authorization", common::basic_auth(user).parse().unwrap());
        let stream = c.start(req).await.expect("start").into_inner();
        let out = common::collect(stream, |m| m.event).await;
        let end = out.end.expect("the process ended without an end event");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            end.exit_code,
        )
    }

    /// Like [`run_as`](Self::run_as), `None` when the daemon could not start the command
    /// (for example because the sandbox is at its pids limit) or it did not end in 30 s.
    async fn try_run_as(&self, user: &str, cmd: &str) -> Option<(String, String, i32)> {
        let mut c = self.process().await;
        let mut req = tonic::Request::new(common::bash(cmd));
        req.metadata_mut()
            .insert("authorization", common::basic_auth(user).parse().unwrap());
        let fut = async {
            let stream = c.start(req).await.ok()?.into_inner();
            let out = common::collect(stream, |m| m.event).await;
            let end = out.end?;
            Some((
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
                end.exit_code,
            ))
        };
        tokio::time::timeout(Duration::from_secs(30), fut)
            .await
            .ok()
            .flatten()
    }

    async fn run(&self, cmd: &str) -> (String, String, i32) {
        self.run_as("user", cmd).await
    }

    /// SIGTERM, then waits (SIGKILL after 10 s).
    fn stop(&mut self) {
        // SAFETY: plain kill of our child.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

fn unique() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
}

/// Host pids whose command line contains `marker`.
fn host_pids_with(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
        {
            pids.push(pid);
        }
    }
    pids
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn commands_run_as_user_in_their_own_view() {
    let sbx = Sandbox::start(&[]);
    let (out, err, code) = sbx
        .run("id; hostname; pwd; echo HOME=$HOME; ls /proc | grep -c '^[0-9]'")
        .await;
    assert_eq!(code, 0, "stderr: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("uid=1000(user) gid=1000(user)"),
        "{out}"
    );
    assert_eq!(lines[1], sbx.id, "hostname is the sandbox id");
    assert_eq!(lines[2], "/home/user");
    assert_eq!(lines[3], "HOME=/home/user");
    let procs: usize = lines[4].parse().unwrap();
    assert!(
        procs < 20,
        "the sandbox sees {procs} processes: host processes leak into its /proc"
    );
    // Passwordless sudo makes the sandbox's root, which is not the host's root.
    let (out, err, code) = sbx
        .run("sudo -n id -u && sudo -n cat /proc/self/uid_map")
        .await;
    assert_eq!(
        code, 0,
        "sudo failed inside the sandbox (the host needs the `sudo` package): {err}"
    );
    let mut l = out.lines();
    assert_eq!(l.next(), Some("0"));
    let map: Vec<u64> = l
        .next()
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(map[0], 0);
    assert!(
        map[1] >= 1 << 30,
        "sandbox root must map to a high host uid: {map:?}"
    );
}

#[tokio::test]
async fn cannot_read_a_file_in_the_host_users_home() {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let secret = format!("{home}/.e2b-isolation-secret-{}", unique());
    std::fs::write(&secret, "host secret").unwrap();
    let sbx = Sandbox::start(&[]);
    let cmd = format!("cat {secret}; sudo -n cat {secret}; ls -a {home}; sudo -n ls -a {home}");
    let (out, _err, _code) = sbx.run(&cmd).await;
    let _ = std::fs::remove_file(&secret);
    assert!(!out.contains("host secret"), "read the host's file: {out}");
    assert!(
        !out.contains(".e2b-isolation-secret"),
        "listed the host's home: {out}"
    );
}

#[tokio::test]
async fn writes_outside_home_and_tmp_fail_and_never_reach_the_host() {
    let sbx = Sandbox::start(&[]);
    let tag = format!("e2b-iso-write-{}", unique());
    let host_dir = tempfile::tempdir().unwrap();
    let host_path = host_dir.path().display().to_string();
    let targets = [
        format!("/etc/{tag}"),
        format!("/usr/{tag}"),
        format!("/usr/bin/{tag}"),
        format!("{host_path}/{tag}"),
    ];
    for t in &targets {
        for sudo in ["", "sudo -n "] {
            let (_, _, code) = sbx.run(&format!("{sudo}sh -c 'echo x > {t}'")).await;
            assert_ne!(code, 0, "{sudo}writing {t} succeeded inside the sandbox");
        }
    }
    // The sandbox's own writable places work, and stay in the sandbox.
    let (_, err, code) = sbx
        .run(&format!("echo x > /home/user/{tag} && echo x > /tmp/{tag}"))
        .await;
    assert_eq!(code, 0, "{err}");
    for t in targets
        .iter()
        .cloned()
        .chain([format!("/tmp/{tag}"), format!("/home/user/{tag}")])
    {
        assert!(
            !std::path::Path::new(&t).exists(),
            "{t} appeared on the host"
        );
    }
}

#[tokio::test]
async fn cannot_see_or_kill_host_processes() {
    let marker = format!("{}", 10_000 + unique() % 50_000);
    let mut victim = Command::new("sleep").arg(&marker).spawn().unwrap();
    let pid = victim.id();
    let sbx = Sandbox::start(&[]);
    let (out, _, _) = sbx
        .run(&format!(
            "ls /proc; test -e /proc/{pid} && echo SEEN; kill -9 {pid}; sudo -n kill -9 {pid}; \
             pgrep -x sleep && echo FOUND"
        ))
        .await;
    assert!(!out.contains("SEEN"), "the sandbox sees host pid {pid}");
    assert!(!out.contains("FOUND"), "the sandbox finds the host's sleep");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the host process was killed from inside the sandbox"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

async fn start_detached(sbx: &Sandbox, marker: &str) {
    // A setsid'd, double-forked process that ignores SIGTERM and SIGHUP.
    let (_, err, code) = sbx
        .run(&format!(
            "setsid bash -c 'trap \"\" TERM HUP; (exec -a {marker} sleep 1000) & ' \
             </dev/null >/dev/null 2>&1; sleep 0.2; pgrep -f {marker} >/dev/null"
        ))
        .await;
    assert_eq!(code, 0, "the detached process did not start: {err}");
    wait_until(
        "the detached process is visible on the host",
        Duration::from_secs(5),
        || !host_pids_with(marker).is_empty(),
    );
}

#[tokio::test]
async fn detached_children_die_with_the_sandbox() {
    let marker = format!("e2b-iso-detached-{}", unique());
    let mut sbx = Sandbox::start(&[]);
    start_detached(&sbx, &marker).await;
    sbx.stop();
    wait_until(
        "the setsid child died with the sandbox",
        Duration::from_secs(10),
        || host_pids_with(&marker).is_empty(),
    );
}

#[tokio::test]
async fn detached_children_die_with_a_sigkilled_supervisor() {
    let marker = format!("e2b-iso-killed-{}", unique());
    let mut sbx = Sandbox::start(&[]);
    start_detached(&sbx, &marker).await;
    let id = sbx.id.clone();
    sbx.child.kill().unwrap(); // SIGKILL: no cleanup code runs in the supervisor
    let _ = sbx.child.wait();
    wait_until(
        "every process of the sandbox died with its SIGKILLed supervisor",
        Duration::from_secs(10),
        || host_pids_with(&marker).is_empty() && host_pids_with(&id).is_empty(),
    );
}

#[tokio::test]
async fn host_loopback_is_unreachable_with_network_none() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let sbx = Sandbox::start(&[]);
    let (out, _, code) = sbx
        .run(&format!(
            "timeout 5 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED"
        ))
        .await;
    assert_ne!(code, 0);
    assert!(!out.contains("CONNECTED"));
    assert!(
        listener.accept().is_err(),
        "the host listener got a connection from the sandbox"
    );
    // The sandbox's own loopback works (its daemon listens there, as envd in an E2B sandbox).
    let (_, err, code) = sbx
        .run(&format!(
            "timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{}'",
            e2b_envd_proto::wire::DEFAULT_PORT
        ))
        .await;
    assert_eq!(code, 0, "the sandbox's own loopback is broken: {err}");
}

#[tokio::test]
async fn file_api_sees_only_the_sandbox_root() {
    let host_shadow = std::fs::read_to_string("/etc/shadow").unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let secret = format!("e2b-isolation-listed-{}", unique());
    std::fs::write(format!("{home}/{secret}"), "x").unwrap();
    let sbx = Sandbox::start(&[]);
    let (_, err, code) = sbx
        .run(&format!(
            "ln -s /etc/shadow /home/user/shadow-link && ln -s {home} /home/user/home-link"
        ))
        .await;
    assert_eq!(code, 0, "{err}");
    // /files as the sandbox's root.
    let resp = reqwest::Client::new()
        .get(format!("{}/files", sbx.url))
        .query(&[("path", "/home/user/shadow-link"), ("username", "root")])
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert_ne!(body, host_shadow, "/files returned the host's /etc/shadow");
    for line in host_shadow.lines().filter(|l| l.contains('$')) {
        assert!(!body.contains(line), "/files leaked a host password hash");
    }
    assert!(status.is_success() || status.is_client_error(), "{status}");
    // Filesystem RPC: listing through a symlink to the host user's home.
    let mut fs = FilesystemClient::new(sbx.channel().await);
    let mut req = tonic::Request::new(ListDirRequest {
        path: "/home/user/home-link".into(),
        depth: 1,
    });
    req.metadata_mut()
        .insert("authorization", common::basic_auth("root").parse().unwrap());
    let listed = fs.list_dir(req).await;
    let _ = std::fs::remove_file(format!("{home}/{secret}"));
    if let Ok(resp) = listed {
        let names: Vec<String> = resp
            .into_inner()
            .entries
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(
            !names.iter().any(|n| n == &secret),
            "the Filesystem RPC listed the host's home: {names:?}"
        );
    }
}

#[tokio::test]
async fn fork_bomb_and_memory_hog_are_contained_while_another_sandbox_answers() {
    let a = Sandbox::start(&[
        "--pids-max",
        "96",
        "--memory-mb",
        "160",
        "--cpu-count",
        "0.5",
    ]);
    let b = Sandbox::start(&[]);
    let (_, err, code) = a
        .run("setsid bash -c 'f() { f | f & }; f' </dev/null >/dev/null 2>&1 & echo started")
        .await;
    assert_eq!(code, 0, "{err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (out, err, code) = b.run("echo ok").await;
    assert_eq!(
        (out.trim(), code),
        ("ok", 0),
        "the other sandbox failed: {err}"
    );
    // Stop the bomb as the sandbox's root (pkill may itself hit the limit: retry). A hang
    // guard: with half a CPU and the rest of the suite running beside it, this took over 60 s
    // once on 2 cores.
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        assert!(
            Instant::now() < deadline,
            "the fork bomb could not be stopped"
        );
        if let Some((out, _, _)) = a
            .try_run_as("root", "pkill -9 -u user; sleep 0.3; pgrep -c -u user")
            .await
            && out.trim() == "0"
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (out, err, code) = a.run("echo alive").await;
    assert_eq!((out.trim(), code), ("alive", 0), "{err}");

    // 400 MiB in a 160 MiB sandbox: the hog is killed, the daemon and the other sandbox live.
    let (out, _, code) = a
        .run("head -c 400m /dev/zero | tail > /dev/null && echo ALLOCATED")
        .await;
    assert!(!out.contains("ALLOCATED"), "the memory hog was not stopped");
    assert_ne!(code, 0);
    let (out, _, code) = a.run("echo still-here").await;
    assert_eq!((out.trim(), code), ("still-here", 0));
    let (out, _, code) = b.run("echo ok").await;
    assert_eq!((out.trim(), code), ("ok", 0));
}

/// `--network internet` (E2B's default): outbound goes through a user-mode NAT helper, the
/// host's loopback stays unreachable. No traffic leaves the machine: only the configuration
/// is checked, and connections go to the host's loopback listener (which must see nothing).
#[tokio::test]
async fn internet_is_configured_and_host_loopback_stays_unreachable() {
    let probe = e2b_isolation_probe();
    assert!(
        probe,
        "--network internet needs slirp4netns or pasta: install the `slirp4netns` or `passt` package"
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let sbx = Sandbox::start(&["--network", "internet"]);
    let (out, err, code) = sbx
        .run("ip route show default; grep -c '^nameserver' /etc/resolv.conf")
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("default via"), "no default route: {out}");
    assert_ne!(out.lines().nth(1), Some("0"), "no nameserver: {out}");
    for host in ["127.0.0.1", "10.0.2.2", "169.254.1.1"] {
        let (out, _, _) = sbx
            .run(&format!(
                "timeout 5 bash -c 'echo hi > /dev/tcp/{host}/{port}' && echo CONNECTED"
            ))
            .await;
        assert!(
            !out.contains("CONNECTED"),
            "reached the host's loopback via {host}"
        );
    }
    assert!(
        listener.accept().is_err(),
        "the host's loopback listener got a connection from the sandbox"
    );
}

fn e2b_isolation_probe() -> bool {
    ["/usr/bin/slirp4netns", "/usr/bin/pasta"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
}

/// Sends one raw HTTP/1.1 request to the sandbox's port and returns the status code.
fn raw_status(url: &str, headers: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let addr = url.trim_start_matches("http://");
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        tcp,
        "GET /health HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    let _ = tcp.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

#[tokio::test]
async fn the_isolated_daemon_keeps_the_browser_guard() {
    // The daemon inside serves the supervisor's socket through the same server as on the host:
    // a page's Origin and a rebound Host are refused there too.
    let sbx = Sandbox::start(&[]);
    let host = sbx.url.trim_start_matches("http://").to_string();
    assert_eq!(raw_status(&sbx.url, &format!("Host: {host}\r\n")), 204);
    assert_eq!(
        raw_status(
            &sbx.url,
            &format!("Host: {host}\r\nOrigin: https://evil.example\r\n")
        ),
        403
    );
    assert_eq!(
        raw_status(&sbx.url, "Host: attacker.example:49983\r\n"),
        403
    );
}
