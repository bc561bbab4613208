//! The transport against our scriptable fake agent as a local child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use e2b_acp::{AcpError, AcpOptions, Direction};
use serde_json::{Value, json};

#[tokio::test]
async fn initialize_capabilities_reach_the_agent_as_false() {
    let t = start(&[], AcpOptions::new());
    let (r, _) = request(
        &t,
        1,
        "initialize",
        json!({"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true,"auth":{"terminal":true}}}),
    )
    .await;
    assert_eq!(
        r["result"]["_meta"]["receivedClientCapabilities"],
        json!({"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false,"auth":{"terminal":true}})
    );
    // a batch with an initialize inside is rewritten too
    let lines = received(&t, 2).await;
    assert!(lines[0].contains(r#""terminal":false"#), "{lines:?}");
}

#[tokio::test]
async fn fs_and_terminal_requests_are_answered_in_the_transport() {
    let t = start(&[], AcpOptions::new());
    let before = do_actions(
        &t,
        1,
        json!([
            {"request": {"id": 77, "method": "fs/read_text_file", "params": {"path": "/etc/passwd"}}},
            {"request": {"id": "t", "method": "terminal/create", "params": {"command": "rm"}}},
            {"notify": {"method": "terminal/output", "params": {}}},
            {"request": {"id": 78, "method": "_fs/x", "params": {}}},
            {"notify": {"method": "terminals/x", "params": {}}},
        ]),
    )
    .await;
    let methods: Vec<&str> = before.iter().filter_map(|v| v["method"].as_str()).collect();
    assert_eq!(methods, ["_fs/x", "terminals/x"]);
    let lines = received(&t, 2).await;
    let replies: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("error").is_some())
        .collect();
    assert_eq!(replies.len(), 2, "{lines:?}");
    assert_eq!(replies[0]["id"], json!(77));
    assert_eq!(replies[0]["error"]["code"], json!(-32601));
    assert_eq!(replies[1]["id"], json!("t"));
}

#[tokio::test]
async fn reply_to_a_request_sent_before_initialize_is_one_whole_line() {
    let t = start(
        &[
            "--actions",
            r#"[{"request":{"id":5,"method":"fs/write_text_file","params":{}}}]"#,
        ],
        AcpOptions::new(),
    );
    let (r, before) = request(&t, 1, "initialize", json!({"protocolVersion":1})).await;
    assert!(before.is_empty());
    assert!(r.get("result").is_some());
    let lines = received(&t, 2).await;
    // every line the agent read is valid JSON: nothing interleaved
    for l in &lines {
        serde_json::from_str::<Value>(l).unwrap_or_else(|_| panic!("broken line {l:?}"));
    }
    assert!(
        lines.iter().any(|l| l.contains(r#""id":5,"error""#)),
        "{lines:?}"
    );
}

#[tokio::test]
async fn blank_lines_skipped_and_junk_gets_a_parse_error_reply() {
    let t = start(&[], AcpOptions::new());
    let before = do_actions(
        &t,
        1,
        json!([{"blank_lines": 3}, {"emit": "this is not json\n"}, {"emit_hex_parts": ["fffe0a"]}, {"notify": {"method": "_after"}}]),
    )
    .await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["method"], json!("_after"));
    let lines = received(&t, 2).await;
    let parse_errors = lines.iter().filter(|l| l.contains("-32700")).count();
    assert_eq!(
        parse_errors, 2,
        "junk and invalid UTF-8 answered once each: {lines:?}"
    );
}

#[tokio::test]
async fn utf8_split_across_writes_arrives_whole() {
    let t = start(&[], AcpOptions::new());
    // {"jsonrpc":"2.0","method":"_u","params":{"t":"€😀"}}\n split inside both characters
    let msg = "{\"jsonrpc\":\"2.0\",\"method\":\"_u\",\"params\":{\"t\":\"€😀\"}}\n";
    let bytes = msg.as_bytes();
    let euro = msg.find('€').unwrap() + 1;
    let emoji = msg.find('😀').unwrap() + 2;
    let to_hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let parts = [
        to_hex(&bytes[..euro]),
        to_hex(&bytes[euro..emoji]),
        to_hex(&bytes[emoji..]),
    ];
    let before = do_actions(&t, 1, json!([{"emit_hex_parts": parts, "delay_ms": 50}])).await;
    assert_eq!(before[0]["params"]["t"], json!("€😀"));
}

#[tokio::test]
async fn final_unterminated_line_is_delivered_at_eof() {
    let t = start(
        &[
            "--actions",
            r#"[{"emit":"{\"jsonrpc\":\"2.0\",\"method\":\"_last\"}"},{"exit":0}]"#,
        ],
        AcpOptions::new(),
    );
    let v = recv_json(&t).await;
    assert_eq!(v["method"], json!("_last"));
    assert!(t.recv().await.is_none());
    assert!(t.wait().await.unwrap().success());
}

#[tokio::test]
async fn oversized_line_gives_a_typed_error_after_earlier_lines_and_kills_the_agent() {
    let t = start(&[], AcpOptions::new().max_message_bytes(4096));
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[
        {"notify":{"method":"_first"}}, {"big_line": 4097}, {"notify":{"method":"_never"}}, {"sleep_ms": 30000}
    ]}}))
    .await
    .unwrap();
    let first = recv_json(&t).await;
    assert_eq!(first["method"], json!("_first"));
    let err = tokio::time::timeout(Duration::from_secs(5), t.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            AcpError::MessageTooLarge {
                direction: Direction::FromAgent,
                limit: 4096,
                ..
            }
        ),
        "{err}"
    );
    assert!(t.recv().await.is_none());
    let w = tokio::time::timeout(Duration::from_secs(5), t.wait())
        .await
        .unwrap();
    assert!(matches!(w, Err(AcpError::MessageTooLarge { .. })), "{w:?}");
    eventually_dead(t.pid()).await;
}

#[tokio::test]
async fn exactly_the_limit_passes() {
    let t = start(&[], AcpOptions::new().max_message_bytes(4096));
    let before = do_actions(&t, 1, json!([{"big_line": 4096}])).await;
    assert_eq!(before.len(), 1);
}

#[tokio::test]
async fn a_line_that_never_ends_fails_without_a_newline() {
    let t = start(&[], AcpOptions::new().max_message_bytes(100_000));
    t.send_json(
        &json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[
            {"big_line": 300_000, "newline": false}, {"sleep_ms": 30000}
        ]}}),
    )
    .await
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), t.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(err.is_message_too_large());
}

#[tokio::test]
async fn outgoing_message_over_the_limit_is_refused_locally() {
    let t = start(&[], AcpOptions::new().max_message_bytes(1000));
    let big = json!({"jsonrpc":"2.0","id":1,"method":"_fake/echo","params":{"x":"a".repeat(2000)}});
    let err = t.send_json(&big).await.unwrap_err();
    assert!(
        matches!(
            err,
            AcpError::MessageTooLarge {
                direction: Direction::ToAgent,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        t.send("{\"a\":1}\n{\"b\":2}").await,
        Err(AcpError::InvalidMessage { .. })
    ));
    let (r, _) = request(&t, 2, "_fake/echo", json!({"ok": true})).await;
    assert_eq!(r["result"], json!({"ok": true}));
    let lines = received(&t, 3).await;
    assert!(!lines.iter().any(|l| l.contains("aaaa")));
}

#[tokio::test]
async fn stderr_flood_is_drained_and_the_tail_is_bounded() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let opts = AcpOptions::new().on_stderr(move |chunk| {
        s2.fetch_add(chunk.len(), Ordering::Relaxed);
        Err("callback failure".into())
    });
    let t = start(&["--actions", r#"[{"stderr": 10485760}]"#], opts);
    let (r, _) = request(&t, 1, "initialize", json!({"protocolVersion":1})).await;
    assert!(r.get("result").is_some());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let tail = t.stderr_tail();
    assert!(tail.len() <= 64 * 1024);
    assert!(
        tail.ends_with("stderr done\n"),
        "{}",
        &tail[tail.len().saturating_sub(40)..]
    );
    assert!(seen.load(Ordering::Relaxed) >= 10 * 1024 * 1024);
}

#[tokio::test]
async fn panicking_stderr_callback_does_not_break_the_transport() {
    let opts = AcpOptions::new().on_stderr(|_| panic!("boom"));
    let t = start(&["--actions", r#"[{"stderr": 1000}]"#], opts);
    let (r, _) = request(&t, 1, "_fake/echo", json!({"x":1})).await;
    assert_eq!(r["result"], json!({"x":1}));
}

fn flooded(t: &e2b_acp::AcpTransport) -> usize {
    t.stderr_tail()
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("flooded ").and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

#[tokio::test]
async fn slow_client_pauses_the_agent_and_nothing_is_lost() {
    let t = start(&[], AcpOptions::new().read_queue_depth(8));
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[{"flood":{"count":3000,"size":2000}}]}}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let written = flooded(&t);
    // queue (8) + splitter/pipe buffers (64 KiB pipe ≈ 32 messages, 64 KiB read chunk) ≪ 3000
    assert!(written < 200, "agent was not paused: wrote {written}");
    // cancelled receives never lose a message
    let mut got = 0u64;
    while got < 3000 {
        match tokio::time::timeout(Duration::from_micros(50), t.recv_json()).await {
            Err(_) => continue,
            Ok(Some(Ok(v))) => {
                if v["method"] == json!("_flood") {
                    assert_eq!(v["params"]["i"], json!(got));
                    got += 1;
                }
            }
            Ok(other) => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn stop_closes_stdin_and_the_agent_exits() {
    let t = start(&[], AcpOptions::new());
    request(&t, 1, "_fake/echo", json!({})).await;
    // An hour's grace: only the agent's own exit after EOF can end this stop within the guard.
    tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_secs(3600)))
        .await
        .expect("stop waited for its grace period instead of returning at the agent's exit")
        .unwrap();
    let exit = t.wait().await.unwrap();
    assert!(exit.success() && !exit.killed, "{exit:?}");
    assert!(matches!(t.send("{}").await, Err(AcpError::Closed { .. })));
    // idempotent and safe after exit
    t.stop(Duration::from_secs(1)).await.unwrap();
    t.kill().await.unwrap();
}

#[tokio::test]
async fn stop_reports_a_failed_exit_after_eof() {
    let t = start(&["--eof-exit", "4"], AcpOptions::new());
    t.stop(Duration::from_secs(5)).await.unwrap();
    assert!(matches!(
        t.wait().await,
        Err(AcpError::AgentFailed { code: Some(4), .. })
    ));
}

#[tokio::test]
async fn stop_kills_an_agent_that_ignores_eof_within_the_timeout() {
    let t = start(&["--ignore-eof"], AcpOptions::new());
    request(&t, 1, "_fake/echo", json!({})).await;
    // `Ok` (not `StopTimeout`) means the exit was seen within the stop's own 800 ms deadline.
    tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_millis(800)))
        .await
        .expect("stop hung on an agent that ignores EOF")
        .unwrap();
    assert!(t.wait().await.unwrap().killed);
    eventually_dead(t.pid()).await;
}

#[tokio::test]
async fn stop_with_a_full_write_queue_and_an_agent_not_reading_ends_in_a_kill() {
    let t = Arc::new(start(&[], AcpOptions::new().write_queue_depth(4)));
    do_actions(&t, 1, json!([])).await;
    t.send_json(&json!({"jsonrpc":"2.0","id":2,"method":"_fake/do","params":{"actions":[{"ignore_stdin":true}]}}))
        .await
        .unwrap();
    let t2 = t.clone();
    let writer = tokio::spawn(async move {
        let big = json!({"jsonrpc":"2.0","method":"_x","params":{"x":"a".repeat(100_000)}});
        let mut n = 0;
        while t2.send_json(&big).await.is_ok() {
            n += 1;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "the writer should be blocked by back-pressure"
    );
    // `Ok` (not `StopTimeout`) means the exit was seen within the stop's own 1 s deadline,
    // blocked writes notwithstanding.
    tokio::time::timeout(HANG_GUARD, t.stop(Duration::from_secs(1)))
        .await
        .expect("stop hung behind a full write queue")
        .unwrap();
    let sent = tokio::time::timeout(HANG_GUARD, writer)
        .await
        .expect("a sender blocked by back-pressure was not released by stop")
        .unwrap();
    assert!(sent < 100);
    assert!(t.wait().await.unwrap().killed);
}

#[tokio::test]
async fn kill_racing_stop_is_fine() {
    let t = Arc::new(start(&["--ignore-eof"], AcpOptions::new()));
    let a = {
        let t = t.clone();
        tokio::spawn(async move { t.stop(Duration::from_secs(2)).await })
    };
    let b = {
        let t = t.clone();
        tokio::spawn(async move { t.kill().await })
    };
    b.await.unwrap().unwrap();
    a.await.unwrap().unwrap();
    let w1 = t.wait().await.unwrap();
    let w2 = t.wait().await.unwrap();
    assert_eq!(w1, w2);
}

#[tokio::test]
async fn failed_exit_is_reported_by_wait_with_the_stderr_tail() {
    let t = start(&[], AcpOptions::new());
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[{"stderr": 10}, {"exit": 3}]}}))
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), t.wait())
        .await
        .unwrap()
        .unwrap_err();
    match err {
        AcpError::AgentFailed {
            code, stderr_tail, ..
        } => {
            assert_eq!(code, Some(3));
            assert!(stderr_tail.contains("stderr done"));
        }
        other => panic!("{other}"),
    }
    // writing to a dead agent is an error, not a panic or a hang
    let r = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            if t.send("{\"jsonrpc\":\"2.0\",\"method\":\"x\"}")
                .await
                .is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok());
    assert!(t.recv().await.is_none());
}

#[tokio::test]
async fn drop_kills_the_whole_process_group() {
    let fake = fake();
    let cmd = format!("sleep 1000 & echo \"child $!\" >&2; exec {fake}");
    let p = e2b_acp::LocalProcess::spawn_shell(&cmd).unwrap();
    let t = e2b_acp::AcpTransport::start(p, &AcpOptions::new()).unwrap();
    request(&t, 1, "_fake/echo", json!({})).await;
    let pid = t.pid();
    let child: u32 = t
        .stderr_tail()
        .lines()
        .find_map(|l| l.strip_prefix("child ").and_then(|n| n.trim().parse().ok()))
        .expect("child pid");
    assert!(alive(child));
    drop(t);
    eventually_dead(pid).await;
    eventually_dead(child).await;
}

#[tokio::test]
async fn invalid_options_are_rejected() {
    let p = e2b_acp::LocalProcess::spawn(fake(), Vec::<String>::new()).unwrap();
    let err = e2b_acp::AcpTransport::start(p, &AcpOptions::new().max_message_bytes(0)).unwrap_err();
    assert!(matches!(err, AcpError::InvalidOptions { .. }));
}

#[tokio::test]
async fn stop_keeps_queued_messages_readable_and_drops_later_ones() {
    let t = start(&["--ignore-eof"], AcpOptions::new().read_queue_depth(16));
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":[{"flood":{"count":100,"size":10}}]}}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    t.stop(Duration::from_millis(500)).await.unwrap();
    let mut n = 0;
    while let Some(m) = tokio::time::timeout(Duration::from_secs(2), t.recv())
        .await
        .unwrap()
    {
        let v: Value = serde_json::from_slice(&m.unwrap()).unwrap();
        assert_eq!(v["params"]["i"], json!(n));
        n += 1;
    }
    assert_eq!(n, 16, "the queued messages, in order, and nothing after");
}

#[tokio::test]
async fn many_pipelined_requests_keep_their_order() {
    let t = Arc::new(start(&[], AcpOptions::new()));
    let t2 = t.clone();
    let sender = tokio::spawn(async move {
        for i in 0..2000u64 {
            t2.send_json(&json!({"jsonrpc":"2.0","id":i,"method":"_fake/echo","params":{"i":i}}))
                .await
                .unwrap();
        }
    });
    for i in 0..2000u64 {
        let v = recv_json(&t).await;
        assert_eq!(v["id"], json!(i));
    }
    sender.await.unwrap();
    let lines = received(&t, 99_999).await;
    assert_eq!(lines.len(), 2001);
}

// Issue 12: replies are bounded by bytes, not only by count. The agent sends fs requests with
// 64 KiB ids and never reads its stdin: without the byte bound ~19 MB of replies would queue.
#[tokio::test]
async fn queued_replies_are_bounded_by_bytes() {
    let t = start(&[], AcpOptions::new());
    let id = "i".repeat(64 * 1024);
    let mut actions: Vec<Value> = (0..300)
        .map(|n| json!({"request": {"id": format!("{id}{n}"), "method": "fs/read_text_file", "params": {}}}))
        .collect();
    actions.push(json!({"notify": {"method": "_marker", "params": {}}}));
    actions.push(json!({"ignore_stdin": true}));
    t.send_json(&json!({"jsonrpc":"2.0","id":1,"method":"_fake/do","params":{"actions":actions}}))
        .await
        .unwrap();
    let marker = recv_json(&t).await;
    assert_eq!(marker["method"], "_marker", "{marker}");
    let queued = t.queued_reply_bytes();
    assert!(
        queued <= e2b_acp::options::MAX_QUEUED_REPLY_BYTES,
        "{queued} bytes of replies queued"
    );
    assert!(
        queued > 0,
        "the agent is not reading: some replies must be waiting"
    );
    t.kill().await.unwrap();
}

// Issue 15: the stderr callback may be async; it is awaited per chunk, in order.
#[tokio::test]
async fn async_stderr_callback_gets_every_byte_in_order() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let s2 = seen.clone();
    let opts = AcpOptions::new().on_stderr_async(move |chunk| {
        let s2 = s2.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            s2.lock().unwrap().extend_from_slice(&chunk);
            Ok(())
        }
    });
    let t = start(&["--actions", r#"[{"stderr": 200000}]"#], opts);
    request(&t, 1, "_fake/echo", json!({})).await;
    t.stop(Duration::from_secs(5)).await.unwrap();
    t.wait().await.unwrap();
    for _ in 0..100 {
        if seen.lock().unwrap().ends_with(b"stderr done\n") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = seen.lock().unwrap().clone();
    let mut want = vec![b'e'; 200000];
    want.extend_from_slice(b"\nstderr done\n");
    assert_eq!(got.len(), want.len());
    assert!(got == want, "bytes out of order or altered");
}

#[tokio::test]
async fn panicking_async_stderr_callback_does_not_break_the_transport() {
    let opts = AcpOptions::new().on_stderr_async(|_| async { panic!("boom") });
    let t = start(&["--actions", r#"[{"stderr": 1000}]"#], opts);
    let (r, _) = request(&t, 1, "_fake/echo", json!({"x":1})).await;
    assert_eq!(r["result"], json!({"x":1}));
    for _ in 0..100 {
        if t.stderr_tail().ends_with("stderr done\n") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("stderr stopped draining after the callback panicked");
}
