//! The agent → client filter on arbitrary lines: no panic; whatever it forwards is one JSON-RPC
//! message or an array of them, with no duplicate top-level key, no fs/terminal method; every
//! reply is valid JSON. The client → agent rewrite never panics and keeps JSON valid.
#![no_main]

use bytes::Bytes;
use e2b_acp::fuzzing::{inspect_agent_line, rewrite_client_message};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn check_message(v: &Value) {
    let obj = v.as_object().expect("a forwarded item is an object");
    if let Some(m) = obj.get("method") {
        let m = m.as_str().expect("method is a string");
        assert!(
            !m.starts_with("fs/") && !m.starts_with("terminal/"),
            "forwarded {m}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let line = Bytes::copy_from_slice(data);
    let verdict = inspect_agent_line(&line);
    if let Some(fwd) = &verdict.forward {
        // serde_json keeps the last duplicate; the filter refused duplicates, so the parsed view
        // is the one every client has.
        let v: Value = serde_json::from_slice(fwd).expect("forwarded bytes are JSON");
        match &v {
            Value::Array(items) => {
                assert!(!items.is_empty());
                items.iter().for_each(check_message);
            }
            other => check_message(other),
        }
    }
    for r in &verdict.replies {
        let _: Value = serde_json::from_slice(r).expect("a reply is JSON");
    }
    let out = rewrite_client_message(data);
    if serde_json::from_slice::<Value>(data).is_ok() {
        serde_json::from_slice::<Value>(&out).expect("the rewrite keeps JSON valid");
    }
});
