//! `e2b sandbox ...`, `e2b run --sandbox-id` and `e2b files ...` as a user runs them: the real
//! `e2b` binary against a real `e2b serve` on ephemeral loopback ports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_e2b");
const KEY: &str = "e2b_0123456789abcdef0123";

struct Serve {
    child: Child,
    state: PathBuf,
    api_url: String,
    edge_url: String,
    /// The API key it printed (`export E2B_API_KEY=…`).
    api_key: String,
    /// What it printed before its URLs (the banner).
    banner: String,
    /// What it printed on stderr so far.
    stderr: Arc<Mutex<String>>,
}

impl Serve {
    fn start(name: &str) -> Serve {
        Self::start_with(name, &[])
    }

    fn start_with(name: &str, extra: &[&str]) -> Serve {
        Self::start_program(Path::new(BIN), name, extra)
    }

    /// `program serve …` (`program` an `e2b` binary) on ephemeral ports.
    fn start_program(program: &Path, name: &str, extra: &[&str]) -> Serve {
        let state = state_dir(name);
        let mut cmd = serve_command(program, &["--api-key", KEY], &state);
        cmd.args(extra);
        Self::start_command(cmd, state)
    }

    /// `cmd` (an `e2b serve` command line keeping its sandboxes in `state`), until it has
    /// printed its URLs and key.
    fn start_command(mut cmd: Command, state: PathBuf) -> Serve {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn e2b serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let errors = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in errors.map_while(Result::ok) {
                eprintln!("{line}");
                let mut sink = sink.lock().unwrap();
                sink.push_str(&line);
                sink.push('\n');
            }
        });
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut api_url, mut edge_url, mut api_key, mut banner) =
            (None, None, None, String::new());
        while api_url.is_none() || edge_url.is_none() || api_key.is_none() {
            let line = lines.next().expect("e2b serve printed its URLs").unwrap();
            if let Some(u) = line.strip_prefix("export E2B_API_URL=") {
                api_url = Some(u.to_owned());
            } else if let Some(u) = line.strip_prefix("export E2B_SANDBOX_URL=") {
                edge_url = Some(u.to_owned());
            } else if let Some(k) = line.strip_prefix("export E2B_API_KEY=") {
                api_key = Some(k.to_owned());
            } else {
                banner.push_str(&line);
                banner.push('\n');
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Serve {
            child,
            state,
            api_url: api_url.unwrap(),
            edge_url: edge_url.unwrap(),
            api_key: api_key.unwrap(),
            banner,
            stderr,
        }
    }

    /// What it printed on stderr once `done` holds of it (the reader thread may lag behind
    /// the banner), or after 10 s.
    fn stderr_when(&self, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.stderr.lock().unwrap().clone();
            if done(&text) || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn e2b(&self, args: &[&str]) -> Output {
        self.e2b_with_key(KEY, args)
    }

    /// `e2b sandbox create --json`; the new sandbox's id.
    fn create(&self) -> String {
        let created: Value =
            serde_json::from_str(&ok(&self.e2b(&["sandbox", "create", "--json"]))).unwrap();
        created["sandboxID"].as_str().unwrap().to_owned()
    }

    fn e2b_with_key(&self, key: &str, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("E2B_API_URL", &self.api_url)
            .env("E2B_SANDBOX_URL", &self.edge_url)
            .env("E2B_API_KEY", key)
            .env_remove("E2B_DEBUG")
            .env_remove("E2B_ACCESS_TOKEN")
            .stdin(Stdio::null())
            .output()
            .expect("run e2b")
    }
}

/// A fresh directory for one test's `e2b serve` state.
fn state_dir(name: &str) -> PathBuf {
    let state =
        std::env::temp_dir().join(format!("e2b-cli-test-serve-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&state).unwrap();
    state
}

/// `program serve` on ephemeral ports with `extra` flags and state in `state`, and no
/// `E2B_API_KEY` from the test's environment.
fn serve_command(program: &Path, extra: &[&str], state: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(["serve", "--api-port", "0", "--edge-port", "0"])
        .args(extra)
        .arg("--state-dir")
        .arg(state)
        .env_remove("E2B_API_KEY");
    cmd
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signalling our own child process.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for _ in 0..50 {
            if std::fs::remove_dir_all(&self.state).is_ok() || !self.state.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn sandbox_commands_run_and_files_against_e2b_serve() {
    let serve = Serve::start("lifecycle");
    let tag = format!("cli{}", std::process::id());
    let meta = format!("t={tag}");

    let created: Value = serde_json::from_str(&ok(
        &serve.e2b(&["sandbox", "create", "--json", "-m", &meta])
    ))
    .unwrap();
    let id = created["sandboxID"].as_str().unwrap().to_owned();

    let listed: Value =
        serde_json::from_str(&ok(&serve.e2b(&["sbx", "ls", "-m", &meta, "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let table = ok(&serve.e2b(&["sandbox", "list", "-m", &meta]));
    assert!(table.starts_with("Sandbox ID"), "{table}");
    assert!(table.contains(&id) && table.contains("Running"), "{table}");
    let info = ok(&serve.e2b(&["sandbox", "info", &id]));
    assert!(info.contains("State") && info.contains("Running"), "{info}");

    // Work in the existing sandbox; it keeps running afterwards.
    let out = ok(&serve.e2b(&["run", "--sandbox-id", &id, "--", "echo in the sandbox"]));
    assert_eq!(out, "in the sandbox\n");
    assert!(ok(&serve.e2b(&["sandbox", "info", &id])).contains("Running"));

    // Files: put, ls, get round trip, with plain progress lines (no terminal here).
    let dir = serve.state.join("cli-files");
    std::fs::create_dir_all(&dir).unwrap();
    let local = dir.join("up.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = format!("/tmp/e2b-cli-test-{tag}.bin");
    let put = serve.e2b(&[
        "files",
        "--sandbox-id",
        &id,
        "put",
        local.to_str().unwrap(),
        &remote,
    ]);
    ok(&put);
    assert!(stderr(&put).contains("300000 bytes in"), "{}", stderr(&put));
    // `--sandbox-id` after the subcommand too.
    let ls = ok(&serve.e2b(&["files", "ls", "--sandbox-id", &id, "/tmp"]));
    assert!(ls.contains(&format!("e2b-cli-test-{tag}.bin")), "{ls}");
    let back = dir.join("down.bin");
    let get = serve.e2b(&[
        "files",
        "get",
        "--sandbox-id",
        &id,
        &remote,
        back.to_str().unwrap(),
    ]);
    ok(&get);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    let _ = std::fs::remove_file(&remote);

    ok(&serve.e2b(&["sandbox", "timeout", &id, "200"]));
    assert!(ok(&serve.e2b(&["sandbox", "pause", &id])).contains("has been paused"));
    assert!(ok(&serve.e2b(&["sandbox", "pause", &id])).contains("is already paused"));
    assert!(ok(&serve.e2b(&["sandbox", "info", &id])).contains("Paused"));
    assert!(ok(&serve.e2b(&["sandbox", "resume", &id])).contains("has been resumed"));
    let conn = ok(&serve.e2b(&["sandbox", "connect", &id]));
    assert!(conn.contains(&format!("E2B_SANDBOX_ID={id}")), "{conn}");
    assert!(ok(&serve.e2b(&["sandbox", "kill", &id])).contains("has been killed"));

    let gone = serve.e2b(&["sandbox", "info", &id]);
    assert!(!gone.status.success());
    assert!(stderr(&gone).contains("wasn't found"), "{}", stderr(&gone));
    let none = ok(&serve.e2b(&["sandbox", "list", "-m", &meta]));
    assert!(none.contains("No sandboxes found"), "{none}");
}

/// `e2b acp --sandbox-id ID`: the agent runs in that existing sandbox of `e2b serve` (it sees
/// the sandbox's own `E2B_SANDBOX_ID`), its failure is explained with its exit code, and the
/// sandbox keeps running afterwards.
#[test]
fn acp_runs_its_agent_in_an_existing_sandbox() {
    let serve = Serve::start("acp");
    let id = serve.create();
    let out = serve.e2b(&[
        "acp",
        "--sandbox-id",
        &id,
        "--",
        "sh",
        "-c",
        "echo agent-in-$E2B_SANDBOX_ID >&2; exit 3",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&format!("agent-in-{id}")), "{err}");
    assert!(err.contains("exited with code 3"), "{err}");
    let info: Value =
        serde_json::from_str(&ok(&serve.e2b(&["sandbox", "info", &id, "--json"]))).unwrap();
    assert_eq!(info["state"], "running", "{info}");
}

/// `--json` (or `-f json`) on every `e2b sandbox` command that changes a sandbox, for scripts.
#[test]
fn lifecycle_commands_print_json() {
    let serve = Serve::start("json");
    let json = |args: &[&str]| -> Value {
        let text = ok(&serve.e2b(args));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    };
    let created = json(&["sandbox", "create", "--json"]);
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    assert_eq!(
        json(&["sandbox", "timeout", &id, "120", "--json"]),
        serde_json::json!({"sandboxID": id, "timeout": 120})
    );
    assert_eq!(
        json(&["sandbox", "pause", &id, "-f", "json"]),
        serde_json::json!({"sandboxID": id, "paused": true})
    );
    assert_eq!(
        json(&["sandbox", "pause", &id, "--json"]),
        serde_json::json!({"sandboxID": id, "paused": false})
    );
    let resumed = json(&["sandbox", "resume", &id, "--json"]);
    assert_eq!(resumed["sandboxID"], id.as_str(), "{resumed}");
    assert_eq!(resumed["resumed"], true, "{resumed}");
    assert!(resumed["envdVersion"].is_string(), "{resumed}");
    assert_eq!(
        json(&["sandbox", "resume", &id, "--json"])["resumed"],
        false
    );
    assert_eq!(
        json(&["sandbox", "kill", &id, "--json"]),
        serde_json::json!([{"sandboxID": id, "killed": true}])
    );
    // An unknown id: still JSON on stdout, and exit code 1.
    let out = serve.e2b(&["sandbox", "kill", &id, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!([{"sandboxID": id, "killed": false}]));
}

/// On a terminal, `e2b files put` and `get` draw an indicatif bar on stderr (bytes, rate, ETA),
/// cleared at the end, then the summary line; `script` (util-linux) gives them the terminal.
#[test]
fn files_draw_a_progress_bar_on_a_terminal() {
    let serve = Serve::start("tty");
    let id = serve.create();
    let local = serve.state.join("tty.bin");
    let size = 96u64 << 20;
    std::fs::write(&local, vec![7u8; size as usize]).unwrap();
    let back = serve.state.join("tty-back.bin");
    let remote = format!("/tmp/e2b-cli-tty-{}.bin", std::process::id());
    for (verb, from, to) in [
        ("put", local.to_str().unwrap(), remote.as_str()),
        ("get", remote.as_str(), back.to_str().unwrap()),
    ] {
        let line = format!("{BIN} files --sandbox-id {id} {verb} {from} {to}");
        let out = Command::new("script")
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .env("E2B_API_URL", &serve.api_url)
            .env("E2B_SANDBOX_URL", &serve.edge_url)
            .env("E2B_API_KEY", KEY)
            .env("COLUMNS", "120")
            .env_remove("E2B_DEBUG")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("missing: `script` (util-linux), which gives the command a terminal: {e}")
            });
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{verb}: {:?}\n{text}", out.status);
        assert!(
            text.contains("ETA") && text.contains("MiB/s") && text.contains("[="),
            "{verb}: no progress bar on the terminal:\n{text}"
        );
        assert!(
            text.contains(&format!("{size} bytes in")),
            "{verb}: no summary line:\n{text}"
        );
    }
    assert_eq!(std::fs::metadata(&back).unwrap().len(), size);
}

/// `E2B_DEBUG=true`, as in the SDKs: `e2b run --sandbox-id ID` makes no API call (no key) and
/// reaches the sandbox at the envd URL, here `e2b serve`'s edge, which routes by the sandbox id.
#[test]
fn debug_mode_reaches_a_sandbox_by_id_without_the_api() {
    let serve = Serve::start("debug");
    let created: Value = serde_json::from_str(&ok(&serve.e2b(&[
        "sandbox",
        "create",
        "--insecure",
        "--json",
    ])))
    .unwrap();
    let id = created["sandboxID"].as_str().unwrap();
    let out = Command::new(BIN)
        .args(["run", "--sandbox-id", id, "--", "echo $E2B_SANDBOX_ID"])
        .env("E2B_DEBUG", "true")
        .env("E2B_SANDBOX_URL", &serve.edge_url)
        .env("E2B_API_URL", "http://127.0.0.1:9")
        .env_remove("E2B_API_KEY")
        .env_remove("E2B_ACCESS_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(ok(&out), format!("{id}\n"));
}

/// Without `--api-key` or `E2B_API_KEY`, `e2b serve` generates a key, prints it, keeps it
/// owner-only under `$XDG_CONFIG_HOME/e2b` and takes it again at the next start; `E2B_API_KEY` in
/// its environment is the key instead; a stored key other accounts could read is refused.
#[test]
fn serve_generates_stores_and_reuses_its_key_or_takes_e2b_api_key() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    let config = state_dir("key-config");
    let path = config.join("e2b").join("serve-api-key");
    let start = |name: &str, env_key: Option<&str>| {
        let state = state_dir(name);
        let mut cmd = serve_command(Path::new(BIN), &[], &state);
        cmd.env("XDG_CONFIG_HOME", &config);
        if let Some(k) = env_key {
            cmd.env("E2B_API_KEY", k);
        }
        Serve::start_command(cmd, state)
    };

    let first = start("key-1", None);
    let key = first.api_key.clone();
    assert!(
        first.banner.contains(&format!(
            "API key generated, stored in {} (mode 0600)",
            path.display()
        )),
        "{}",
        first.banner
    );
    assert!(key.starts_with("e2b_") && key.len() == 44, "{key}");
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), key);
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
        0o700
    );
    ok(&first.e2b_with_key(&key, &["sandbox", "list"]));
    let out = first.e2b(&["sandbox", "list"]);
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));
    drop(first);

    let second = start("key-2", None);
    assert_eq!(second.api_key, key, "the stored key is used again");
    assert!(
        second.banner.contains("API key read from"),
        "{}",
        second.banner
    );
    ok(&second.e2b_with_key(&key, &["sandbox", "list"]));
    drop(second);

    let from_env = start("key-3", Some(KEY));
    assert_eq!(from_env.api_key, KEY);
    assert!(
        from_env
            .banner
            .contains("API key from --api-key / E2B_API_KEY"),
        "{}",
        from_env.banner
    );
    ok(&from_env.e2b(&["sandbox", "list"]));
    let out = from_env.e2b_with_key(&key, &["sandbox", "list"]);
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));
    drop(from_env);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let state = state_dir("key-4");
    let out = serve_command(Path::new(BIN), &[], &state)
        .env("XDG_CONFIG_HOME", &config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("mode 0644"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().trim(),
        key,
        "not replaced"
    );
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_dir_all(&config);
}

#[test]
fn a_wrong_key_and_bad_arguments_fail_with_advice() {
    let serve = Serve::start("errors");
    let out = serve.e2b_with_key("e2b_ffff", &["sandbox", "list"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("401") && err.contains("E2B_API_KEY"), "{err}");
    let out = serve.e2b_with_key("not-a-key", &["sandbox", "list"]);
    assert!(
        stderr(&out).contains("does not look like an E2B key"),
        "{}",
        stderr(&out)
    );
    let out = serve.e2b(&["sandbox", "list", "-s", "sleeping"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("running, paused"), "{}", stderr(&out));
    let out = serve.e2b(&["sandbox", "kill"]);
    assert!(stderr(&out).contains("--all"), "{}", stderr(&out));
}

/// `e2b exec-server --sandbox-id ID`: the MCP tools run in that existing sandbox of
/// `e2b serve` (connected through the API, resumed when paused), not in a local one: a file
/// written into the sandbox's working directory by `e2b run --sandbox-id` is read by
/// exec_command, which also sees the sandbox's own `E2B_SANDBOX_ID`.
#[test]
fn exec_server_works_in_an_existing_sandbox() {
    use std::io::Write as _;

    let serve = Serve::start("exec-server");
    let id = serve.create();
    ok(&serve.e2b(&[
        "run",
        "--sandbox-id",
        &id,
        "--",
        "echo written-through-envd > marker.txt",
    ]));
    assert!(ok(&serve.e2b(&["sandbox", "pause", &id])).contains("has been paused"));

    let mut child = Command::new(BIN)
        .args(["exec-server", "--stdio", "--sandbox-id", &id])
        .env("E2B_API_URL", &serve.api_url)
        .env("E2B_SANDBOX_URL", &serve.edge_url)
        .env("E2B_API_KEY", KEY)
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_ACCESS_TOKEN")
        .env_remove("SANDBOX_ID")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn e2b exec-server");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    let answer = |want: i64| loop {
        let msg = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the exec server answers (hang guard)");
        if msg["id"] == want {
            break msg;
        }
    };
    send(
        serde_json::json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cli-test","version":"0"}}}),
    );
    let init = answer(1);
    assert_eq!(
        init["result"]["serverInfo"]["sandbox_id"],
        id.as_str(),
        "{init}"
    );
    send(serde_json::json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"exec_command","arguments":{"cmd":"cat marker.txt; echo \"sandbox=$E2B_SANDBOX_ID\""}}}),
    );
    let result = answer(2)["result"].clone();
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("written-through-envd"), "{result}");
    assert!(text.contains(&format!("sandbox={id}")), "{result}");
    assert_eq!(result["_meta"]["exit_code"], 0, "{result}");
    drop(stdin);
    let _ = child.wait();
    // Connecting resumed the paused sandbox, and the exec server leaves it running.
    assert!(ok(&serve.e2b(&["sandbox", "info", &id])).contains("Running"));

    // An unknown id fails with a message naming it.
    let out = Command::new(BIN)
        .args(["exec-server", "--stdio", "--sandbox-id", "nosuchsandbox"])
        .env("E2B_API_URL", &serve.api_url)
        .env("E2B_SANDBOX_URL", &serve.edge_url)
        .env("E2B_API_KEY", KEY)
        .env_remove("E2B_DEBUG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nosuchsandbox"), "{}", stderr(&out));
}

/// Every process's pid and command line.
fn process_argvs() -> Vec<(i32, Vec<String>)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, split_argv(&cmdline)))
        })
        .collect()
}

fn split_argv(cmdline: &[u8]) -> Vec<String> {
    cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The processes whose command line names sandbox `id`'s home (its envd).
fn envd_processes(id: &str) -> Vec<i32> {
    let marker = format!("/{id}/home");
    process_argvs()
        .into_iter()
        .filter(|(_, argv)| argv.iter().any(|a| a.contains(&marker)))
        .map(|(pid, _)| pid)
        .collect()
}

fn argv(pid: i32) -> Vec<String> {
    split_argv(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap())
}

/// Creates a sandbox on `serve`, runs `echo` in it and returns its id.
fn create_and_echo(serve: &Serve) -> String {
    let id = serve.create();
    let out = ok(&serve.e2b(&["run", "--sandbox-id", &id, "--", "echo works"]));
    assert_eq!(out, "works\n");
    id
}

/// `e2b serve --isolation plain` with the `e2b` binary: each sandbox is one envd process, the
/// small `e2b-serve-envd` beside `e2b`, on a one-thread runtime, PID 1 of its own PID namespace
/// as root, and works.
#[test]
fn a_plain_sandbox_is_one_single_threaded_envd() {
    let serve = Serve::start_with("plain", &["--isolation", "plain"]);
    let sibling = Path::new(BIN).with_file_name("e2b-serve-envd");
    assert!(
        serve
            .banner
            .contains(&format!("each sandbox's envd: {}", sibling.display())),
        "the banner names the envd sandboxes run: {}",
        serve.banner
    );
    let id = create_and_echo(&serve);
    let procs = envd_processes(&id);
    assert_eq!(procs.len(), 1, "one envd process per sandbox: {procs:?}");
    let args = argv(procs[0]);
    assert_eq!(
        Path::new(&args[0]),
        sibling,
        "the sandbox runs e2b-serve-envd: {args:?}"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", procs[0])).unwrap();
    // The runtime's one thread, plus envd's command spawner once a command ran (a
    // multi-threaded runtime would add a worker per core).
    let threads: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(
        threads <= 2,
        "a sandbox's envd should run on one runtime thread, it has {threads} threads"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
        assert!(
            nspid.ends_with("\t1"),
            "envd is not PID 1 of its namespace: {nspid}"
        );
    }
    assert!(ok(&serve.e2b(&["sandbox", "kill", &id])).contains("has been killed"));
}

/// An `e2b` binary in `dir` (a hard link to the one under test where the filesystem allows it),
/// with `sibling` written beside it as `e2b-serve-envd` when given.
fn e2b_in(dir: &Path, sibling: Option<&str>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("e2b");
    if std::fs::hard_link(BIN, &exe).is_err() {
        std::fs::copy(BIN, &exe).unwrap();
    }
    if let Some(script) = sibling {
        let path = dir.join("e2b-serve-envd");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    exe
}

/// Without a working `e2b-serve-envd` beside it (absent, another version, or one that never
/// answers `--version`), `e2b serve` says so and its sandboxes run `e2b serve envd`.
#[test]
fn without_its_sandbox_envd_beside_it_e2b_serve_runs_itself() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-envd-fallback-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let cases = [
        ("absent", None, None),
        (
            "stale",
            Some("#!/bin/sh\necho e2b-serve-envd 0.0.1\n"),
            Some("answered \"e2b-serve-envd 0.0.1\""),
        ),
        (
            "hung",
            Some("#!/bin/sh\nexec sleep 600\n"),
            Some("did not answer within 10 s"),
        ),
    ];
    // The three at once: the hung case waits out the version check's 10 s.
    std::thread::scope(|scope| {
        for (name, script, warning) in cases {
            let root = &root;
            scope.spawn(move || {
                let exe = e2b_in(&root.join(name), script);
                let serve = Serve::start_program(
                    &exe,
                    &format!("fallback-{name}"),
                    &["--isolation", "plain"],
                );
                let own = format!("each sandbox's envd: {} serve envd", exe.display());
                assert!(serve.banner.contains(&own), "{name}: {}", serve.banner);
                if let Some(warning) = warning {
                    let stderr =
                        serve.stderr_when(|s| s.contains("not using") && s.contains(warning));
                    assert!(
                        stderr.contains("not using") && stderr.contains(warning),
                        "{name}: e2b serve says why it does not use its e2b-serve-envd: {stderr}"
                    );
                }
                let id = create_and_echo(&serve);
                let procs = envd_processes(&id);
                assert_eq!(procs.len(), 1, "{name}: {procs:?}");
                let args = argv(procs[0]);
                assert_eq!(Path::new(&args[0]), exe, "{name}: {args:?}");
                assert_eq!(&args[1..3], ["serve", "envd"], "{name}: {args:?}");
            });
        }
    });
    let _ = std::fs::remove_dir_all(&root);
}

/// `e2b serve <extra>`, which must refuse to start: its stderr.
fn serve_refused(extra: &[&str]) -> String {
    let state = std::env::temp_dir().join(format!("e2b-cli-test-refused-{}", std::process::id()));
    let mut child = serve_command(Path::new(BIN), &["--api-key", KEY], &state)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn e2b serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("e2b serve {extra:?} started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_dir_all(&state);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "e2b serve {extra:?} exited 0: {err}");
    err
}

/// `--memory-mb` and `--cpu-count` size each isolated sandbox: the banner says the size, each
/// sandbox's envd gets it, and `e2b sandbox info` reports it (not the machine's size). Sizes a
/// runtime cannot hold (plain sandboxes) and sizes out of range are refused with the fix.
#[test]
fn serve_sizes_isolated_sandboxes_and_refuses_sizes_it_cannot_hold() {
    let refusals: [(&[&str], &str); 3] = [
        (
            &["--isolation", "plain", "--memory-mb", "300"],
            "--memory-mb and --cpu-count size isolated sandboxes",
        ),
        (&["--memory-mb", "8"], "a sandbox needs between 64 and"),
        (&["--cpu-count", "0"], "give a positive number of CPUs"),
    ];
    for (extra, want) in refusals {
        let err = serve_refused(extra);
        assert!(err.contains(want), "e2b serve {extra:?}: {err}");
    }

    let serve = Serve::start_with(
        "sized",
        &[
            "--isolation",
            "isolated",
            "--memory-mb",
            "300",
            "--cpu-count",
            "1",
        ],
    );
    assert!(
        serve
            .banner
            .contains("each sandbox: 300 MiB of memory and of disk, 1 CPU"),
        "{}",
        serve.banner
    );
    let edge_port = serve.edge_url.rsplit(':').next().unwrap();
    assert!(
        serve
            .banner
            .contains(&format!("P-<sandbox id>.localhost:{edge_port} (get_host)")),
        "the banner names the sandboxes' host names: {}",
        serve.banner
    );
    let id = create_and_echo(&serve);
    let envd: Vec<Vec<String>> = process_argvs()
        .into_iter()
        .map(|(_, argv)| argv)
        .filter(|argv| {
            argv.windows(2)
                .any(|w| w[0] == "--sandbox-id" && w[1] == id)
        })
        .collect();
    assert!(!envd.is_empty(), "no envd names sandbox {id}");
    for argv in &envd {
        let has = |flag: &str, value: &str| argv.windows(2).any(|w| w[0] == flag && w[1] == value);
        assert!(
            has("--memory-mb", "300") && has("--cpu-count", "1"),
            "the sandbox's envd runs without its size: {argv:?}"
        );
    }
    let info: Value =
        serde_json::from_str(&ok(&serve.e2b(&["sandbox", "info", &id, "--json"]))).unwrap();
    assert_eq!(
        (&info["memoryMB"], &info["cpuCount"], &info["diskSizeMB"]),
        (&Value::from(300), &Value::from(1), &Value::from(300)),
        "{info}"
    );
    let table = ok(&serve.e2b(&["sandbox", "info", &id]));
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l[name.len()..].trim().to_owned())
    };
    assert_eq!(row("RAM MiB").as_deref(), Some("300"), "{table}");
    assert_eq!(row("vCPUs").as_deref(), Some("1"), "{table}");
    assert!(ok(&serve.e2b(&["sandbox", "kill", &id])).contains("has been killed"));
}

/// `e2b sandbox create --private-ports --auto-pause --auto-resume`: the answer carries the
/// traffic access token (table and JSON), and a command sent to the paused sandbox resumes it.
#[test]
fn create_with_private_ports_and_auto_resume() {
    let serve = Serve::start_with("private", &["--isolation", "plain"]);
    let out = serve.e2b(&["sandbox", "create", "--auto-resume"]);
    assert!(!out.status.success(), "--auto-resume without --auto-pause");
    assert!(stderr(&out).contains("--auto-pause"), "{}", stderr(&out));

    let table = ok(&serve.e2b(&["sandbox", "create", "--private-ports"]));
    let token = table
        .lines()
        .find_map(|l| l.strip_prefix("Traffic access token"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no traffic access token: {table}"));
    assert_eq!(token.len(), 64, "{table}");

    let created: Value = serde_json::from_str(&ok(&serve.e2b(&[
        "sandbox",
        "create",
        "--private-ports",
        "--auto-pause",
        "--auto-resume",
        "--json",
    ])))
    .unwrap();
    assert_eq!(
        created["trafficAccessToken"].as_str().map(str::len),
        Some(64),
        "{created}"
    );
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    ok(&serve.e2b(&["sandbox", "pause", &id]));
    let info: Value =
        serde_json::from_str(&ok(&serve.e2b(&["sandbox", "info", &id, "--json"]))).unwrap();
    assert_eq!(info["state"], "paused", "{info}");
    assert_eq!(
        ok(&serve.e2b(&["run", "--sandbox-id", &id, "--", "echo awake"])),
        "awake\n"
    );
    let info: Value =
        serde_json::from_str(&ok(&serve.e2b(&["sandbox", "info", &id, "--json"]))).unwrap();
    assert_eq!(info["state"], "running", "traffic resumed it: {info}");
    assert_eq!(info["lifecycle"]["autoResume"], true, "{info}");
}
