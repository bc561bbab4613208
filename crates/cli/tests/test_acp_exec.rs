//! `e2b acp` and `e2b exec-server --stdio` end to end, over this binary's stdin/stdout, with the
//! agent or the commands running in the embedded local sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// Reads JSON lines from a child's stdout on a thread, so a test can wait with a timeout.
fn lines(stdout: std::process::ChildStdout) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    rx
}

const ECHO_AGENT: &str = r#"printf '%s\n' '{"jsonrpc":"2.0","id":"a1","method":"fs/read_text_file","params":{"path":"/etc/passwd"}}'
while IFS= read -r l; do printf '{"jsonrpc":"2.0","method":"echo","params":%s}\n' "$l"; done"#;

#[test]
fn acp_bridge_rewrites_capabilities_and_keeps_fs_inside() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b"))
        // exec form (`sh -c`): no login shell, whose profile may be slow on a machine's own setup
        .args(["acp", "--", "sh", "-c", ECHO_AGENT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":1,
        "clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true,"_meta":{"keep":1}}}});
    writeln!(stdin, "{init}").unwrap();
    stdin.flush().unwrap();

    let mut saw_init = false;
    let mut saw_refusal = false;
    while !(saw_init && saw_refusal) {
        let msg = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the bridge answers within 30 s");
        assert_ne!(
            msg["method"], "fs/read_text_file",
            "agent fs requests never reach the client"
        );
        assert_eq!(msg["method"], "echo", "{msg}");
        let echoed = &msg["params"];
        if echoed["method"] == "initialize" {
            let caps = &echoed["params"]["clientCapabilities"];
            assert_eq!(caps["fs"]["readTextFile"], false);
            assert_eq!(caps["fs"]["writeTextFile"], false);
            assert_eq!(caps["terminal"], false);
            assert_eq!(caps["_meta"]["keep"], 1, "other keys are kept");
            assert_eq!(echoed["id"], 0);
            saw_init = true;
        } else {
            assert_eq!(echoed["id"], "a1", "{echoed}");
            assert_eq!(echoed["error"]["code"], -32601, "{echoed}");
            saw_refusal = true;
        }
    }
    // EOF from the editor stops the agent and the bridge exits.
    drop(stdin);
    let (tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = done
        .recv_timeout(Duration::from_secs(30))
        .expect("bridge exits after EOF")
        .unwrap();
    // the agent's read loop ends at EOF and it exits 0: so does the bridge
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn exec_server_stdio_runs_commands_in_the_sandbox() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(["exec-server", "--stdio", "--sandbox-id", "cli-test"])
        .env_remove("E2B_SANDBOX_URL")
        // with E2B's API configured, `--sandbox-id` on the command line would name an API sandbox
        .env_remove("E2B_API_KEY")
        .env_remove("E2B_DEBUG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let send = |stdin: &mut std::process::ChildStdin, v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cli-test","version":"0"}}}),
    );
    let init = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("initialize answered");
    assert_eq!(init["id"], 1, "{init}");
    assert_eq!(
        init["result"]["serverInfo"]["sandbox_id"], "cli-test",
        "{init}"
    );
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"exec_command","arguments":{"cmd":"printf hello; exit 42"}}}),
    );
    let result = loop {
        let msg = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("tools/call answered");
        if msg["id"] == 2 {
            break msg["result"].clone();
        }
    };
    assert_eq!(result["content"][0]["text"], "hello", "{result}");
    assert_eq!(result["_meta"]["exit_code"], 42, "{result}");
    assert_eq!(result["_meta"]["sandbox_id"], "cli-test", "{result}");
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn acp_bridge_exits_with_the_agent_failure_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_e2b"))
        .args(["acp", "--", "sh", "-c", "echo broken >&2; exit 3"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
