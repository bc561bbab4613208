//! Tests of the server logic through rmcp's client, in process, over the embedded local sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::envd::EnvdBackend;
use crate::transport::InjectServerInfo;
use crate::{ExecServerArgs, ExecServerHandle};

type Client = RunningService<RoleClient, ()>;

async fn pair(mut args: ExecServerArgs) -> Client {
    args.sandbox_id = Some("test-sbx".into());
    let backend = EnvdBackend::local().await.expect("embedded local sandbox");
    let handle = ExecServerHandle::with_backend(args, Arc::new(backend));
    let (c, s) = tokio::io::duplex(1 << 20);
    let id = handle.sandbox_id().to_owned();
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(s);
        let t = rmcp::transport::async_rw::AsyncRwTransport::new_server(r, w);
        let t = InjectServerInfo::new(t, id);
        if let Ok(running) = handle.server.clone().serve(t).await {
            let _ = running.waiting().await;
        }
    });
    let (r, w) = tokio::io::split(c);
    ().serve((r, w)).await.expect("client handshake")
}

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(obj(args)))
        .await
        .expect("call_tool")
}

fn text(r: &CallToolResult) -> String {
    r.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("text block")
}

fn meta(r: &CallToolResult, k: &str) -> Value {
    r.meta
        .as_ref()
        .and_then(|m| m.0.get(k).cloned())
        .unwrap_or(Value::Null)
}

async fn exec(c: &Client, cmd: &str) -> CallToolResult {
    call(c, "exec_command", json!({ "cmd": cmd })).await
}

#[tokio::test]
async fn initialize_and_tools() {
    let c = pair(ExecServerArgs::default()).await;
    let info = c.peer_info().expect("peer info");
    assert_eq!(
        info.meta.as_ref().and_then(|m| m.0.get("sandbox_id")),
        Some(&json!("test-sbx"))
    );
    let tools = c.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for n in [
        "exec_command",
        "execute",
        "upload_file",
        "download_file",
        "read",
        "write",
        "edit",
        "grep",
        "glob",
        "ls",
    ] {
        assert!(names.contains(&n.to_string()), "{n} missing in {names:?}");
    }
    let exec = tools.iter().find(|t| t.name == "exec_command").unwrap();
    assert!(exec.output_schema.is_some());
}

#[tokio::test]
async fn exec_output_and_codes() {
    let c = pair(ExecServerArgs::default()).await;
    let r = exec(&c, "printf hi; sleep 0.1; printf ' err' >&2; exit 42").await;
    assert_eq!(text(&r), "hi err");
    assert_eq!(meta(&r, "exit_code"), json!(42));
    assert_eq!(meta(&r, "stdout_bytes"), json!(2));
    assert_eq!(meta(&r, "stderr_bytes"), json!(4));
    assert_eq!(meta(&r, "sandbox_id"), json!("test-sbx"));
    assert_ne!(r.is_error, Some(true));
    let sc = r.structured_content.clone().unwrap();
    assert_eq!(sc["exit_code"], json!(42));
    assert_eq!(sc["timed_out"], json!(false));

    let r = exec(&c, "true").await;
    assert_eq!(text(&r), "");
    assert_eq!(meta(&r, "exit_code"), json!(0));

    let r = exec(&c, "printf 'a\\000b\\377c'").await;
    assert_eq!(text(&r), "a\0b\u{fffd}c");

    let r = exec(&c, "kill -9 $$").await;
    assert_eq!(meta(&r, "exit_code"), json!(137));
    assert_eq!(meta(&r, "signal"), json!(9));

    let r = exec(&c, "no_such_command_xyz").await;
    assert_eq!(meta(&r, "exit_code"), json!(127));

    let r = call(&c, "execute", json!({"command": "echo alias"})).await;
    assert_eq!(text(&r), "alias\n");

    let r = call(
        &c,
        "exec_command",
        json!({"cmd": "cat; echo $FOO; pwd", "stdin": "in\n", "env": {"FOO": "bar"}, "cwd": "/tmp"}),
    )
    .await;
    assert_eq!(text(&r), "in\nbar\n/tmp\n");
}

#[tokio::test]
async fn exec_timeout_kills_group() {
    let c = pair(ExecServerArgs::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("alive");
    let cmd = format!("(sleep 2; touch {}) & sleep 30", marker.to_string_lossy());
    let r = call(&c, "exec_command", json!({"cmd": cmd, "timeout": 0.5})).await;
    assert_eq!(meta(&r, "exit_code"), json!(124));
    assert_eq!(meta(&r, "timed_out"), json!(true));
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert!(!marker.exists(), "a grandchild survived the timeout");
}

#[tokio::test]
async fn exec_truncates_head_and_tail() {
    let args = ExecServerArgs {
        max_output_bytes: 1000,
        ..Default::default()
    };
    let c = pair(args).await;
    let r = exec(
        &c,
        "printf HEAD; head -c 100000 /dev/zero | tr '\\0' x; printf TAIL; exit 3",
    )
    .await;
    let t = text(&r);
    assert!(t.starts_with("HEAD"), "{t}");
    assert!(t.ends_with("TAIL"), "{t}");
    assert!(t.contains("bytes omitted"));
    assert_eq!(meta(&r, "truncated"), json!(true));
    assert_eq!(meta(&r, "exit_code"), json!(3));
    assert_eq!(meta(&r, "stdout_bytes"), json!(100008));
}

#[tokio::test]
async fn legacy_text_mode() {
    let args = ExecServerArgs {
        legacy_text: true,
        ..Default::default()
    };
    let c = pair(args).await;
    let r = exec(&c, "echo out; echo err >&2; exit 2").await;
    assert_eq!(text(&r), "stdout:\nout\n\nstderr:\nerr\n\nexit_code: 2");
    assert_eq!(meta(&r, "exit_code"), json!(2));
    let r = exec(&c, "true").await;
    assert_eq!(text(&r), "(no output)");
}

#[tokio::test]
async fn upload_download_chunks_and_errors() {
    let c = pair(ExecServerArgs {
        max_chunk_bytes: 4,
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a/b/f.bin").to_string_lossy().into_owned();
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "AAEC"}),
    )
    .await;
    assert_eq!(text(&r), format!("Written 3 bytes to {p}"));
    assert_eq!(meta(&r, "exit_code"), json!(0));
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "AwQF", "append": true}),
    )
    .await;
    assert_eq!(meta(&r, "size"), json!(6));
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "/w==", "offset": 5}),
    )
    .await;
    assert_eq!(meta(&r, "size"), json!(6));
    // Chunked download: 4 + 2 bytes.
    let r = call(&c, "download_file", json!({"path": p})).await;
    assert_eq!(text(&r), "AAECAw==");
    assert_eq!(meta(&r, "eof"), json!(false));
    let r = call(&c, "download_file", json!({"path": p, "offset": 4})).await;
    assert_eq!(text(&r), "BP8=");
    assert_eq!(meta(&r, "eof"), json!(true));

    let cases = [
        (json!({"path": "rel/x"}), "invalid_path"),
        (
            json!({"path": dir.path().join("missing").to_string_lossy()}),
            "file_not_found",
        ),
        (
            json!({"path": dir.path().to_string_lossy()}),
            "is_directory",
        ),
    ];
    for (args, lit) in cases {
        let r = call(&c, "download_file", args).await;
        assert_eq!(r.is_error, Some(true));
        assert_eq!(meta(&r, "error"), json!(lit));
        assert_eq!(meta(&r, "exit_code"), json!(1));
    }
    let r = call(
        &c,
        "upload_file",
        json!({"path": "x", "content_base64": ""}),
    )
    .await;
    assert_eq!(meta(&r, "error"), json!("invalid_path"));
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "AA=\n"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let r = call(
        &c,
        "upload_file",
        json!({"path": dir.path().to_string_lossy(), "content_base64": "AA=="}),
    )
    .await;
    assert_eq!(meta(&r, "error"), json!("is_directory"));
}

#[tokio::test]
async fn compat_tools() {
    let c = pair(ExecServerArgs::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_string_lossy().into_owned();
    let f = format!("{d}/sub/x.txt");
    let r = call(&c, "write", json!({"path": f, "content": "one\ntwo two\n"})).await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    let r = call(&c, "read", json!({"path": f})).await;
    assert_eq!(text(&r), "     1\tone\n     2\ttwo two\n");
    let r = call(&c, "read", json!({"path": format!("{d}/nope")})).await;
    assert_eq!(meta(&r, "exit_code"), json!(1));
    let e = |old: &str, all: bool| json!({"path": f, "old_string": old, "new_string": "2", "replace_all": all});
    assert_eq!(
        meta(&call(&c, "edit", e("zzz", false)).await, "exit_code"),
        json!(1)
    );
    assert_eq!(
        meta(&call(&c, "edit", e("two", false)).await, "exit_code"),
        json!(2)
    );
    let r = call(&c, "edit", e("two", true)).await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    assert!(text(&r).contains("2 occurrence"));
    let r = call(
        &c,
        "edit",
        json!({"path": format!("{d}/nope"), "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert_eq!(meta(&r, "exit_code"), json!(3));

    let r = call(&c, "grep", json!({"pattern": "one", "path": d})).await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    let line: Value = serde_json::from_str(text(&r).lines().next().unwrap()).unwrap();
    assert_eq!(line["path"], json!(f));
    assert_eq!(line["line"], json!(1));
    assert_eq!(line["text"], json!("one"));
    let r = call(&c, "grep", json!({"pattern": "absent-text", "path": d})).await;
    assert_eq!(meta(&r, "exit_code"), json!(1));

    let r = call(&c, "glob", json!({"pattern": "**/*.txt", "path": d})).await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    let line: Value = serde_json::from_str(text(&r).lines().next().unwrap()).unwrap();
    assert_eq!(line["path"], json!(f));

    let r = call(&c, "ls", json!({"path": d})).await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    let line: Value = serde_json::from_str(text(&r).lines().next().unwrap()).unwrap();
    assert_eq!(line["is_dir"], json!(true));
    let r = call(&c, "ls", json!({"path": format!("{d}/nope")})).await;
    assert_eq!(meta(&r, "exit_code"), json!(1));
}
