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

async fn pair(args: ExecServerArgs) -> Client {
    pair_with(args, ()).await
}

async fn pair_with<H: rmcp::ClientHandler>(
    mut args: ExecServerArgs,
    handler: H,
) -> RunningService<RoleClient, H> {
    args.sandbox_id = Some("test-sbx".into());
    let backend = EnvdBackend::local(e2b::LocalOptions::unisolated())
        .await
        .expect("embedded local sandbox");
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
    handler.serve((r, w)).await.expect("client handshake")
}

/// Counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct ListChanges(Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for ListChanges {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ListChanges {
    async fn wait_for(&self, n: usize) {
        for _ in 0..500 {
            if self.0.load(std::sync::atomic::Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!(
            "expected {n} list_changed notifications, got {}",
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        );
    }
}

async fn in_flight(c: &rmcp::Peer<RoleClient>, name: &str) -> Value {
    let r = call(c, "inspect", json!({"sections": ["mounts"], "name": name})).await;
    let doc: Value = serde_json::from_str(&text(&r)).unwrap();
    doc["mounts"]["entries"][0]["in_flight"].clone()
}

#[tokio::test]
async fn mount_call_and_unmount_after_quiescence() {
    let changes = ListChanges::default();
    let c = pair_with(
        ExecServerArgs {
            allow_mount: true,
            ..Default::default()
        },
        changes.clone(),
    )
    .await;
    let caps = c
        .peer_info()
        .and_then(|i| i.capabilities.tools.clone())
        .unwrap();
    assert_eq!(caps.list_changed, Some(true));
    let r = call(
        &c,
        "mount",
        json!({
            "name": "args_echo",
            "description": "echoes",
            "input_schema": {"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},
            "command": "printf '{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],\"meta\":{\"stdin\":%s,\"env\":%s}}' \"$(cat)\" \"$TOOL_ARGS\"",
        }),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(meta(&r, "mount_id"), json!("dyn-1"));
    changes.wait_for(1).await;
    let tools = c.list_all_tools().await.unwrap();
    let t = tools.iter().find(|t| t.name == "args_echo").unwrap();
    assert_eq!(
        t.meta.as_ref().and_then(|m| m.0.get("e2b/mount_id")),
        Some(&json!("dyn-1"))
    );
    let r = call(&c, "args_echo", json!({"x": 3})).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(
        r.meta.clone().map(|m| Value::Object(m.0)),
        Some(json!({"stdin": {"x": 3}, "env": {"x": 3}}))
    );
    let r = call(&c, "args_echo", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("\"x\" is a required property"),
        "{}",
        text(&r)
    );

    let r = call(
        &c,
        "mount",
        json!({"name": "hang", "description": "hangs", "input_schema": {"type":"object"}, "command": "sleep 30"}),
    )
    .await;
    assert_eq!(meta(&r, "mount_id"), json!("dyn-2"));
    let peer = c.peer().clone();
    let slow = tokio::spawn(async move { call(&peer, "hang", json!({})).await });
    for _ in 0..500 {
        if in_flight(&c, "hang").await == json!(1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let r = call(&c, "unmount", json!({"id": "dyn-2", "grace_seconds": 0.2})).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(
        (meta(&r, "finished"), meta(&r, "killed")),
        (json!(0), json!(1))
    );
    // Quiescence: the killed call had ended when unmount returned (its answer is in transit).
    let hung = tokio::time::timeout(std::time::Duration::from_secs(2), slow)
        .await
        .expect("the killed call was answered")
        .unwrap();
    assert_eq!(hung.is_error, Some(true));
    assert_eq!(meta(&hung, "killed_by_unmount"), json!(true));
    changes.wait_for(3).await;
    let tools = c.list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name == "hang"));
    let r = call(&c, "unmount", json!({"id": "dyn-2"})).await;
    assert!(text(&r).contains("dyn-1 (args_echo)"), "{}", text(&r));
}

#[tokio::test]
async fn mount_is_off_by_default() {
    let c = pair(ExecServerArgs::default()).await;
    let caps = c
        .peer_info()
        .and_then(|i| i.capabilities.tools.clone())
        .unwrap();
    assert_ne!(caps.list_changed, Some(true));
    let tools = c.list_all_tools().await.unwrap();
    assert!(
        !tools
            .iter()
            .any(|t| t.name == "mount" || t.name == "unmount")
    );
    let r = call(&c, "mount", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("--allow-mount"), "{}", text(&r));
    let r = call(&c, "inspect", json!({"sections": ["sandbox", "mounts"]})).await;
    let doc: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(doc["mounts"]["enabled"], json!(false));
    assert_eq!(doc["sandbox"]["isolation"], json!("off"), "{doc}");
    assert!(
        doc["sandbox"]["isolation_detail"]
            .as_str()
            .unwrap()
            .contains("Sandbox::local")
    );
}

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

async fn call(c: &rmcp::Peer<RoleClient>, tool: &str, args: Value) -> CallToolResult {
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

async fn exec(c: &rmcp::Peer<RoleClient>, cmd: &str) -> CallToolResult {
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
    assert_eq!(
        meta(&r, "sha256"),
        json!(crate::files::sha256_hex(&[0, 1, 2]))
    );
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "AwQF", "append": true}),
    )
    .await;
    assert_eq!(meta(&r, "size"), json!(6));
    assert_eq!(std::fs::read(&p).unwrap(), [0, 1, 2, 3, 4, 5]);
    // A chunked replacement: staged, the destination untouched until the last chunk.
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "CQkJ", "offset": 0, "total_size": 6}),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(meta(&r, "complete"), json!(false));
    assert_eq!(std::fs::read(&p).unwrap(), [0, 1, 2, 3, 4, 5]);
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "AwT/", "offset": 3, "total_size": 6}),
    )
    .await;
    assert_eq!(meta(&r, "complete"), json!(true), "{}", text(&r));
    assert_eq!(meta(&r, "size"), json!(6));
    assert_eq!(
        meta(&r, "sha256"),
        json!(crate::files::sha256_hex(&[9, 9, 9, 3, 4, 255]))
    );
    assert_eq!(std::fs::read(&p).unwrap(), [9, 9, 9, 3, 4, 255]);
    // No part files are left next to it.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    // A chunk at an offset without total_size teaches the chunked form.
    let r = call(
        &c,
        "upload_file",
        json!({"path": p, "content_base64": "/w==", "offset": 5}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("total_size"), "{}", text(&r));
    // A single download of a file larger than one chunk is an error naming the chunked form,
    // never a silently short success.
    let r = call(&c, "download_file", json!({"path": p})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("offset") && text(&r).contains("length"),
        "{}",
        text(&r)
    );
    let r = call(
        &c,
        "download_file",
        json!({"path": p, "offset": 0, "length": 4}),
    )
    .await;
    assert_eq!(text(&r), "CQkJAw==");
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
async fn argument_errors_are_tool_results() {
    let c = pair(ExecServerArgs::default()).await;
    for (tool, args, needle) in [
        ("exec_command", json!({}), "cmd"),
        (
            "exec_command",
            json!({"cmd": "true", "timeout": "soon"}),
            "timeout",
        ),
        ("exec_command", json!({"cmd": "true", "bogus": 1}), "bogus"),
        ("download_file", json!({"path": 7}), "path"),
        (
            "edit",
            json!({"path": "/tmp/x", "old_string": "a"}),
            "new_string",
        ),
    ] {
        let r = call(&c, tool, args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{tool} {args}");
        let t = text(&r);
        assert!(t.contains(needle), "{tool} {args}: {t}");
        assert!(t.contains("inputSchema"), "{t}");
        assert_eq!(meta(&r, "error"), json!("invalid_arguments"));
    }
    // Only an unknown tool is a JSON-RPC error.
    let e = c
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown tool"), "{e}");
    // The server keeps serving.
    assert_eq!(meta(&exec(&c, "true").await, "exit_code"), json!(0));
}

#[tokio::test]
async fn huge_timeout_is_capped_not_a_panic() {
    let c = pair(ExecServerArgs::default()).await;
    for t in [1e300, f64::MAX, 1.8e19] {
        let r = call(&c, "exec_command", json!({"cmd": "echo ok", "timeout": t})).await;
        assert_eq!(text(&r), "ok\n");
        assert_eq!(meta(&r, "exit_code"), json!(0));
    }
    let r = call(&c, "exec_command", json!({"cmd": "true", "timeout": -1})).await;
    assert_eq!(r.is_error, Some(true));
}

#[tokio::test]
async fn cancel_stops_the_command() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let c = pair(ExecServerArgs::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("alive");
    let cmd = format!("sleep 2; touch {}", marker.to_string_lossy());
    let req = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("exec_command").with_arguments(obj(json!({"cmd": cmd}))),
    ));
    let handle = c
        .peer()
        .send_cancellable_request(req, PeerRequestOptions::no_options())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    handle.cancel(Some("test".into())).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert!(
        !marker.exists(),
        "the command survived notifications/cancelled"
    );
    assert_eq!(meta(&exec(&c, "true").await, "exit_code"), json!(0));
}

#[tokio::test]
async fn fifo_paths_never_hang_file_tools() {
    let c = pair(ExecServerArgs {
        file_timeout: 1.0,
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo").to_string_lossy().into_owned();
    let r = exec(&c, &format!("mkfifo {fifo}")).await;
    assert_eq!(meta(&r, "exit_code"), json!(0));
    let guard = std::time::Duration::from_secs(30);
    let r = tokio::time::timeout(guard, call(&c, "download_file", json!({"path": fifo})))
        .await
        .expect("download_file of a FIFO hung");
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("not a regular file"), "{}", text(&r));
    for tool in ["read", "edit"] {
        let r = tokio::time::timeout(
            guard,
            call(
                &c,
                tool,
                json!({"path": fifo, "old_string": "a", "new_string": "b"}),
            ),
        )
        .await;
        // `read` takes no old_string: an argument error, answered at once.
        let r = r.unwrap_or_else(|_| panic!("{tool} of a FIFO hung"));
        assert!(r.is_error == Some(true) || meta(&r, "exit_code") != json!(0));
    }
    let r = tokio::time::timeout(guard, call(&c, "read", json!({"path": fifo})))
        .await
        .expect("read of a FIFO hung");
    assert_eq!(meta(&r, "exit_code"), json!(4), "{}", text(&r));
    // envd opens only regular files for uploads, so writing into a FIFO is refused at once
    // (before envd did, the tool's timeout answered with "did not finish").
    let r = tokio::time::timeout(
        guard,
        call(
            &c,
            "upload_file",
            json!({"path": fifo, "content_base64": "AA=="}),
        ),
    )
    .await
    .expect("upload_file to a FIFO hung");
    assert_eq!(r.is_error, Some(true));
    assert!(
        meta(&r, "error") == json!("invalid_path") || text(&r).contains("regular file"),
        "{}",
        text(&r)
    );
    // Unblock a writer, if any.
    let _ = exec(&c, &format!("timeout 2 cat {fifo} >/dev/null")).await;
    assert_eq!(meta(&exec(&c, "true").await, "exit_code"), json!(0));
}

#[tokio::test]
async fn edit_keeps_bytes_and_refuses_what_it_cannot_edit() {
    let c = pair(ExecServerArgs::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bin.dat");
    let mut data = b"head \xff\xfe\x00 needle tail ".to_vec();
    data.extend(std::iter::repeat_n(0xC3u8, 100));
    std::fs::write(&f, &data).unwrap();
    let p = f.to_string_lossy().into_owned();
    let r = call(
        &c,
        "edit",
        json!({"path": p, "old_string": "needle", "new_string": "pin"}),
    )
    .await;
    assert_eq!(meta(&r, "exit_code"), json!(0), "{}", text(&r));
    let mut want = b"head \xff\xfe\x00 pin tail ".to_vec();
    want.extend(std::iter::repeat_n(0xC3u8, 100));
    assert_eq!(std::fs::read(&f).unwrap(), want);

    // Larger than edit loads whole: a teaching error, the file untouched.
    let big = dir.path().join("big.txt");
    let f2 = std::fs::File::create(&big).unwrap();
    f2.set_len(crate::compat::MAX_EDIT_BYTES + 1).unwrap();
    drop(f2);
    let r = call(
        &c,
        "edit",
        json!({"path": big.to_string_lossy(), "old_string": "x", "new_string": "y"}),
    )
    .await;
    assert_eq!(meta(&r, "exit_code"), json!(4), "{}", text(&r));
    assert!(text(&r).contains("exec_command"), "{}", text(&r));
    assert_eq!(
        std::fs::metadata(&big).unwrap().len(),
        crate::compat::MAX_EDIT_BYTES + 1
    );
}

#[tokio::test]
async fn read_and_listings_never_cut_silently() {
    let c = pair(ExecServerArgs {
        max_output_bytes: 4096,
        ..Default::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // read: past the text cap, a flag and how to continue.
    let f = dir.path().join("many.txt");
    let line = "x".repeat(1000);
    let body: String = (0..2000).map(|_| format!("{line}\n")).collect();
    std::fs::write(&f, &body).unwrap();
    let r = call(&c, "read", json!({"path": f.to_string_lossy()})).await;
    assert_eq!(meta(&r, "truncated"), json!(true));
    let t = text(&r);
    assert!(
        t.contains("call read with offset="),
        "{}",
        &t[t.len().saturating_sub(200)..]
    );
    assert!(t.len() < 2 * crate::compat::MAX_READ_TEXT);
    let small = call(&c, "read", json!({"path": f.to_string_lossy(), "limit": 2})).await;
    assert_eq!(text(&small).lines().count(), 3, "2 lines and the hint");

    // grep: output over the cap is cut at a line boundary, flagged, with a hint; every line
    // is whole JSON.
    for i in 0..200 {
        std::fs::write(dir.path().join(format!("f{i}.txt")), "match here\n").unwrap();
    }
    let r = call(
        &c,
        "grep",
        json!({"pattern": "match", "path": dir.path().to_string_lossy()}),
    )
    .await;
    assert_eq!(meta(&r, "truncated"), json!(true));
    for l in text(&r).lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(
            v.get("path").is_some() || v.get("truncated").is_some(),
            "{l}"
        );
    }
    let r = call(&c, "ls", json!({"path": dir.path().to_string_lossy()})).await;
    assert_eq!(meta(&r, "truncated"), json!(true));
    for l in text(&r).lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
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

#[test]
fn tool_definitions_come_from_the_types() {
    let tools = crate::tool_definitions();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        names,
        [
            "download_file",
            "edit",
            "exec_command",
            "execute",
            "glob",
            "grep",
            "inspect",
            "kill_process",
            "list_processes",
            "ls",
            "mount",
            "read",
            "read_output",
            "unmount",
            "upload_file",
            "write",
            "write_stdin"
        ]
    );
    for t in &tools {
        assert_eq!(
            t.input_schema.get("type"),
            Some(&json!("object")),
            "{}",
            t.name
        );
        assert_eq!(
            t.input_schema.get("additionalProperties"),
            Some(&json!(false)),
            "{}: unknown arguments must be refused",
            t.name
        );
        assert!(t.description.as_deref().is_some_and(|d| !d.is_empty()));
        assert!(t.annotations.is_some(), "{}", t.name);
    }
    let exec = tools.iter().find(|t| t.name == "exec_command").unwrap();
    let out = exec.output_schema.as_ref().unwrap();
    let props = out.get("properties").and_then(Value::as_object).unwrap();
    for k in [
        "exit_code",
        "truncated",
        "sandbox_id",
        "timed_out",
        "signal",
        "duration_ms",
    ] {
        assert!(props.contains_key(k), "{k} missing from the output schema");
    }
    let upload = tools.iter().find(|t| t.name == "upload_file").unwrap();
    let props = upload
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap();
    assert!(props.contains_key("total_size"));
}

fn staged_parts(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".e2b-upload-"))
        .count()
}

#[tokio::test]
async fn abandoned_chunked_uploads_leave_no_staged_parts() {
    let dir = tempfile::tempdir().unwrap();
    let dest = format!("{}/big.bin", dir.path().display());
    let first = json!({"path": dest, "content_base64": "aGVsbG8=", "offset": 0, "total_size": 10});

    // Restarting at offset 0 removes the parts of the upload it replaces.
    let c = pair(ExecServerArgs::default()).await;
    for _ in 0..3 {
        let r = call(&c, "upload_file", first.clone()).await;
        assert_ne!(r.is_error, Some(true), "{}", text(&r));
    }
    assert_eq!(staged_parts(dir.path()), 1);
    let r = call(
        &c,
        "upload_file",
        json!({"path": dest, "content_base64": "d29ybGQ=", "offset": 5, "total_size": 10}),
    )
    .await;
    assert_eq!(meta(&r, "complete"), json!(true), "{}", text(&r));
    assert_eq!(std::fs::read(&dest).unwrap(), b"helloworld");
    assert_eq!(staged_parts(dir.path()), 0);
    std::fs::remove_file(&dest).unwrap();
    c.cancel().await.unwrap();

    // An upload idle past --upload-idle-seconds is abandoned by the reaper, parts and all.
    let c = pair(ExecServerArgs {
        upload_idle_seconds: 0.3,
        ..Default::default()
    })
    .await;
    let r = call(&c, "upload_file", first.clone()).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert!(staged_parts(dir.path()) >= 1);
    // A hang guard, not a timing assertion: the reaper runs every idle/4.
    for _ in 0..400 {
        if staged_parts(dir.path()) == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(
        staged_parts(dir.path()),
        0,
        "the abandoned upload's parts were not removed"
    );
    let r = call(
        &c,
        "upload_file",
        json!({"path": dest, "content_base64": "d29ybGQ=", "offset": 5, "total_size": 10}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("start again at offset 0"), "{}", text(&r));
    assert!(!std::path::Path::new(&dest).exists());
}

#[tokio::test]
async fn the_default_local_sandbox_is_isolated() {
    use crate::backend::SandboxBackend as _;
    // What `e2b-exec-server` without --sandbox and --isolation opens.
    let opts = ExecServerArgs::default().local.options().unwrap();
    let backend = EnvdBackend::local(opts).await.unwrap_or_else(|e| {
        panic!(
            "the isolated local sandbox did not start (it needs root, user namespaces, pasta or \
             slirp4netns and the e2b-envd binary: `cargo build -p e2b-envd`): {}",
            e.message
        )
    });
    let iso = backend.isolation().await;
    assert_eq!(iso["isolation"], json!("on"), "{iso}");
}

#[tokio::test]
async fn isolation_is_probed_for_an_envd_url_on_this_machine() {
    use crate::backend::SandboxBackend as _;
    // The embedded sandbox: known without a probe.
    let local = EnvdBackend::local(e2b::LocalOptions::unisolated())
        .await
        .unwrap();
    let iso = local.isolation().await;
    assert_eq!(iso["isolation"], json!("off"), "{iso}");
    // The same daemon reached by URL, as `--sandbox` does: its commands run in this process's
    // namespaces, which the probe sees.
    let sandbox = e2b::Sandbox::local_unisolated().await.unwrap();
    let remote = EnvdBackend::remote(sandbox.url(), sandbox.connection().access_token())
        .await
        .unwrap();
    let iso = remote.isolation().await;
    assert_eq!(iso["isolation"], json!("off"), "{iso}");
    assert!(
        iso["detail"]
            .as_str()
            .unwrap()
            .contains("this machine's own PID and mount namespaces"),
        "{iso}"
    );
    // Another machine's envd: nothing to compare with.
    let far = EnvdBackend::remote("http://192.0.2.1:49983", None)
        .await
        .unwrap();
    assert_eq!(far.isolation().await["isolation"], json!("unknown"));
}
