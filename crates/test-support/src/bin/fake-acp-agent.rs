//! A scriptable fake ACP agent for tests and benchmarks (not a real agent).
//!
//! It answers `initialize` (echoing the client capabilities it received in `_meta`),
//! `session/new` and `session/prompt` (one `session/update` per text block, then `end_turn`).
//! Tests drive it with actions, given at startup (`--actions JSON`), in a `_fake/do` request
//! (`{"actions": [...]}`), or in a prompt whose text starts with `do:` followed by the actions.
//! `_fake/received` returns every line it read on stdin.
//!
//! Actions (objects with one key): `emit` (raw text to stdout), `emit_hex_parts` + `delay_ms`
//! (raw bytes in separate flushed writes), `request` / `notify` (a JSON-RPC message),
//! `big_line` (a JSON line of N bytes) with optional `newline: false`, `stderr` (N bytes),
//! `flood` (`{"count","size"}` notifications, progress on stderr as `flooded N`), `exit` (code),
//! `sleep_ms`, `spam_ms` (a notification every N ms from a thread, forever), `ignore_stdin`
//! (stop reading stdin), `blank_lines`.
//!
//! Flags: `--ignore-eof` (keep running after stdin EOF), `--eof-exit N` (exit code at EOF),
//! `--actions JSON`.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

type Out = Arc<Mutex<std::io::Stdout>>;

fn write_raw(out: &Out, bytes: &[u8]) {
    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
    let _ = o.write_all(bytes);
    let _ = o.flush();
}

fn write_json(out: &Out, v: &Value) {
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    write_raw(out, &line);
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn run_actions(out: &Out, actions: &Value) {
    let Some(list) = actions.as_array() else {
        return;
    };
    for a in list {
        if let Some(t) = a.get("emit").and_then(Value::as_str) {
            write_raw(out, t.as_bytes());
        }
        if let Some(parts) = a.get("emit_hex_parts").and_then(Value::as_array) {
            let delay = a.get("delay_ms").and_then(Value::as_u64).unwrap_or(30);
            for p in parts {
                write_raw(out, &hex(p.as_str().unwrap_or("")));
                std::thread::sleep(Duration::from_millis(delay));
            }
        }
        if let Some(r) = a.get("request") {
            let mut m = json!({"jsonrpc":"2.0"});
            if let (Some(m), Some(r)) = (m.as_object_mut(), r.as_object()) {
                m.extend(r.clone());
            }
            write_json(out, &m);
        }
        if let Some(r) = a.get("notify") {
            let mut m = json!({"jsonrpc":"2.0"});
            if let (Some(m), Some(r)) = (m.as_object_mut(), r.as_object()) {
                m.extend(r.clone());
            }
            write_json(out, &m);
        }
        if let Some(n) = a.get("big_line").and_then(Value::as_u64) {
            let n = n as usize;
            let pad =
                n.saturating_sub(r#"{"jsonrpc":"2.0","method":"_big","params":{"x":""}}"#.len());
            let mut line = format!(
                r#"{{"jsonrpc":"2.0","method":"_big","params":{{"x":"{}"}}}}"#,
                "a".repeat(pad)
            )
            .into_bytes();
            if a.get("newline").and_then(Value::as_bool) != Some(false) {
                line.push(b'\n');
            }
            write_raw(out, &line);
        }
        if let Some(n) = a.get("stderr").and_then(Value::as_u64) {
            let chunk = vec![b'e'; 65536];
            let mut left = n as usize;
            let mut err = std::io::stderr();
            while left > 0 {
                let k = left.min(chunk.len());
                let _ = err.write_all(&chunk[..k]);
                left -= k;
            }
            let _ = err.write_all(b"\nstderr done\n");
        }
        if let Some(f) = a.get("flood") {
            let count = f.get("count").and_then(Value::as_u64).unwrap_or(1000);
            let size = f.get("size").and_then(Value::as_u64).unwrap_or(1000) as usize;
            let text = "f".repeat(size);
            for i in 0..count {
                write_json(
                    out,
                    &json!({"jsonrpc":"2.0","method":"_flood","params":{"i": i, "text": text}}),
                );
                eprintln!("flooded {}", i + 1);
            }
        }
        if let Some(ms) = a.get("sleep_ms").and_then(Value::as_u64) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if let Some(ms) = a.get("spam_ms").and_then(Value::as_u64) {
            let out = out.clone();
            std::thread::spawn(move || {
                let mut i = 0u64;
                loop {
                    write_json(
                        &out,
                        &json!({"jsonrpc":"2.0","id": 100000 + i,"method":"fs/write_text_file","params":{"path":"/tmp/x","content":"x"}}),
                    );
                    write_json(
                        &out,
                        &json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"fake-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":format!("spam {i}")}}}}),
                    );
                    i += 1;
                    std::thread::sleep(Duration::from_millis(ms));
                }
            });
        }
        if let Some(n) = a.get("blank_lines").and_then(Value::as_u64) {
            for _ in 0..n {
                write_raw(out, b"\n  \r\n\t\n");
            }
        }
        if a.get("ignore_stdin").and_then(Value::as_bool) == Some(true) {
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        if let Some(code) = a.get("exit").and_then(Value::as_i64) {
            let _ = std::io::stderr().flush();
            std::process::exit(code as i32);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut ignore_eof = false;
    let mut eof_exit = 0;
    let out: Out = Arc::new(Mutex::new(std::io::stdout()));
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--ignore-eof" => ignore_eof = true,
            "--eof-exit" => {
                i += 1;
                eof_exit = args.get(i).and_then(|s| s.parse().ok()).unwrap_or(0);
            }
            "--actions" => {
                i += 1;
                if let Some(Ok(v)) = args.get(i).map(|s| serde_json::from_str::<Value>(s)) {
                    run_actions(&out, &v);
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut received: Vec<String> = Vec::new();
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\n', '\r'])
            .to_owned();
        received.push(line.clone());
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let id = msg.get("id").cloned();
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let (Some(method), Some(id)) = (method, id) else {
            continue;
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match method.as_str() {
            "initialize" => Some(json!({
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": false},
                "authMethods": [],
                "agentInfo": {"name": "fake-acp-agent", "version": "0.1.0"},
                "_meta": {"receivedClientCapabilities": params.get("clientCapabilities").cloned().unwrap_or(Value::Null)}
            })),
            "session/new" => Some(json!({"sessionId": "fake-1"})),
            "session/prompt" => {
                let blocks = params
                    .get("prompt")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for b in &blocks {
                    let text = b.get("text").and_then(Value::as_str).unwrap_or("");
                    if let Some(script) = text.strip_prefix("do:") {
                        if let Ok(actions) = serde_json::from_str::<Value>(script) {
                            run_actions(&out, &actions);
                        }
                        continue;
                    }
                    write_json(
                        &out,
                        &json!({"jsonrpc":"2.0","method":"session/update","params":{
                        "sessionId": params.get("sessionId").cloned().unwrap_or(Value::Null),
                        "update": {"sessionUpdate":"agent_message_chunk","content":{"type":"text","text": text}}}}),
                    );
                }
                Some(json!({"stopReason": "end_turn"}))
            }
            "_fake/do" => {
                run_actions(&out, params.get("actions").unwrap_or(&Value::Null));
                Some(json!({}))
            }
            "_fake/received" => Some(json!({"lines": received})),
            "_fake/echo" => {
                // `delay_ms` answers later from a thread, so responses can come out of order.
                if let Some(ms) = params.get("delay_ms").and_then(Value::as_u64) {
                    let out = out.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(ms));
                        write_json(&out, &json!({"jsonrpc":"2.0","id": id, "result": params}));
                    });
                    continue;
                }
                Some(params)
            }
            _ => None,
        };
        match result {
            Some(r) => write_json(&out, &json!({"jsonrpc":"2.0","id": id, "result": r})),
            None => write_json(
                &out,
                &json!({"jsonrpc":"2.0","id": id, "error": {"code": -32601, "message": "Method not found"}}),
            ),
        }
    }
    if ignore_eof {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    std::process::exit(eof_exit);
}
