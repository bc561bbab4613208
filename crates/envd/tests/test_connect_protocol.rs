//! The Connect protocol (JSON and proto) over HTTP/1.1: framing, errors, status codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use prost::Message as _;
use serde_json::json;

fn start_body(cmd: &str) -> Vec<u8> {
    envelope(0, serde_json::to_string(&bash(cmd)).unwrap().as_bytes())
}

#[tokio::test]
async fn start_streams_start_data_end_then_end_stream() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let (status, env) = c
        .stream(
            "/process.Process/Start",
            &start_body("echo hi; echo err >&2; exit 3"),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    assert!(env[0].1["event"]["start"]["pid"].as_u64().unwrap() > 0);
    let (last_flags, last) = env.last().unwrap();
    assert_eq!(*last_flags, 2);
    assert_eq!(last, &json!({}));
    let end = &env[env.len() - 2].1["event"]["end"];
    assert_eq!(
        end,
        &json!({"exitCode": 3, "exited": true, "status": "exit status 3", "error": "exit status 3"})
    );
    let mut out = String::new();
    for (flags, m) in &env[1..env.len() - 2] {
        assert_eq!(*flags, 0);
        if let Some(s) = m["event"]["data"]["stdout"].as_str() {
            out.push_str(s);
        }
    }
    assert_eq!(out, "aGkK");
}

#[tokio::test]
async fn exit_zero_end_event_omits_defaults() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let (_, env) = c
        .stream("/process.Process/Start", &start_body("true"), &[])
        .await;
    assert_eq!(
        env[env.len() - 2].1,
        json!({"event": {"end": {"exited": true, "status": "exit status 0"}}})
    );
}

#[tokio::test]
async fn stream_errors_are_http_200_end_stream() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let mut r = bash("pwd");
    r.process.as_mut().unwrap().cwd = Some("/no/such/dir".into());
    let body = envelope(0, serde_json::to_string(&r).unwrap().as_bytes());
    let (status, env) = c.stream("/process.Process/Start", &body, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].0, 2);
    assert_eq!(env[0].1["error"]["code"], "invalid_argument");
    assert_eq!(
        env[0].1["error"]["message"],
        "cwd '/no/such/dir' does not exist"
    );

    let (status, env) = c
        .stream(
            "/process.Process/Connect",
            &envelope(0, br#"{"process":{"pid":4000000}}"#),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        env[0].1["error"],
        json!({"code": "not_found", "message": "process with pid 4000000 not found"})
    );
}

#[tokio::test]
async fn unary_errors_use_connect_status_table() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let (s, b) = c
        .unary(
            "/process.Process/SendSignal",
            json!({"process": {"pid": 4000000}, "signal": "SIGNAL_SIGKILL"}),
        )
        .await;
    assert_eq!((s, b["code"].as_str()), (404, Some("not_found")));
    let (s, b) = c
        .unary(
            "/process.Process/SendSignal",
            json!({"process": {"pid": 1}, "signal": "SIGNAL_UNSPECIFIED"}),
        )
        .await;
    assert_eq!((s, b["code"].as_str()), (501, Some("unimplemented")));
    let (s, b) = c
        .unary("/process.Process/List", json!({"unknownField": 1}))
        .await;
    assert_eq!((s, b), (200, json!({})));
    let r = c
        .post("/process.Process/List", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.headers()["content-type"], "application/json");
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["code"], "invalid_argument");
    let (s, b) = c.unary("/process.Process/NoSuchMethod", json!({})).await;
    assert_eq!((s, b["code"].as_str()), (404, Some("unimplemented")));
}

#[tokio::test]
async fn unsupported_content_types_get_415() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    for (path, ct) in [
        ("/process.Process/List", "text/plain"),
        ("/process.Process/List", "application/connect+json"),
        ("/process.Process/Start", "application/json"),
        ("/process.Process/Start", "application/xml"),
    ] {
        let r = c.post(path, ct).body("{}").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 415, "{path} {ct}");
    }
    let r = c
        .http
        .get(format!("{}/process.Process/List", c.url))
        .header(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            c.token.clone().unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
}

#[tokio::test]
async fn compression_is_refused() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let r = c
        .post("/process.Process/List", "application/json")
        .header("content-encoding", "gzip")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 501);
    let r = c
        .post("/process.Process/List", "application/json")
        .header("content-encoding", "identity")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (s, env) = c
        .stream("/process.Process/Start", &envelope(1, b"xx"), &[])
        .await;
    assert_eq!(s, 200);
    assert_eq!(env[0].1["error"]["code"], "internal");
}

#[tokio::test]
async fn proto_codec_unary_and_stream() {
    use e2b_envd_proto::process::{ListResponse, StartResponse, process_event::Event};
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let r = c
        .post("/process.Process/List", "application/proto")
        .body(Vec::new())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/proto");
    ListResponse::decode(r.bytes().await.unwrap()).unwrap();

    let body = envelope(0, &bash("printf abc").encode_to_vec());
    let r = c
        .post("/process.Process/Start", "application/connect+proto")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/connect+proto");
    let mut b = r.bytes().await.unwrap();
    let mut events = Vec::new();
    let mut end_stream = None;
    while b.len() >= 5 {
        let flags = b[0];
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        let msg = b.slice(5..5 + len);
        b = b.slice(5 + len..);
        if flags & 2 != 0 {
            end_stream = Some(msg);
        } else {
            events.push(
                StartResponse::decode(msg)
                    .unwrap()
                    .event
                    .unwrap()
                    .event
                    .unwrap(),
            );
        }
    }
    assert_eq!(&end_stream.unwrap()[..], b"{}");
    assert!(matches!(events[0], Event::Start(_)));
    assert!(matches!(events.last().unwrap(), Event::End(_)));
}

#[tokio::test]
async fn bad_envelopes_are_rejected_and_daemon_keeps_serving() {
    let envd = spawn_envd_with(|mut c| {
        c.max_message_bytes = 1024;
        c
    })
    .await;
    let c = ConnectClient::new(&envd);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0, 0, 0], "invalid_argument"),
        (vec![0, 0, 0, 0, 10, b'{'], "invalid_argument"),
        (envelope(0, b"{]"), "invalid_argument"),
        (envelope(0, &vec![b' '; 2000]), "resource_exhausted"),
        (
            [envelope(0, b"{}"), envelope(0, b"{}")].concat(),
            "invalid_argument",
        ),
        (vec![0, 0xff, 0xff, 0xff, 0xff], "resource_exhausted"),
    ];
    for (body, code) in cases {
        let (s, env) = c.stream("/process.Process/Start", &body, &[]).await;
        assert_eq!(s, 200);
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].1["error"]["code"], code, "{body:?}");
    }
    let r = c
        .post("/process.Process/List", "application/json")
        .body(vec![b' '; 5000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let (s, _) = c.unary("/process.Process/List", json!({})).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn connect_timeout_ms_bounds_unary_header_validation() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let r = c
        .post("/process.Process/List", "application/json")
        .header(e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS, "abc")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = c
        .post("/process.Process/List", "application/json")
        .header(e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS, "5000")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn start_timeout_kills_and_ends_with_deadline_exceeded() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    // The command would run 30 s; the stream must end through the 700 ms timeout long before
    // (the guard is a generous hang guard, the end event's code is the behaviour).
    let (s, env) = tokio::time::timeout(
        std::time::Duration::from_secs(25),
        c.stream(
            "/process.Process/Start",
            &start_body("echo started; sleep 30"),
            &[(e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS, "700")],
        ),
    )
    .await
    .expect("the stream outlived its connect-timeout-ms: the timeout did not end it");
    assert_eq!(s, 200);
    let (flags, last) = env.last().unwrap();
    assert_eq!(*flags, 2);
    assert_eq!(last["error"]["code"], "deadline_exceeded");
    // Start event first, then the output, then the deadline: the command ran until the timeout.
    let pid = env[0].1["event"]["start"]["pid"].as_i64().unwrap();
    assert!(
        env.iter()
            .any(|(_, m)| m["event"]["data"]["stdout"].is_string()),
        "the command's output came before the timeout: {env:?}"
    );
    assert!(
        gone_within(pid as i32, std::time::Duration::from_secs(10)).await,
        "process survived its timeout"
    );
}

#[tokio::test]
async fn client_streaming_stream_input() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let mut start = bash("cat");
    start.stdin = Some(true);
    let c2 = ConnectClient::new(&envd);
    let body = envelope(0, serde_json::to_string(&start).unwrap().as_bytes());
    let task = tokio::spawn(async move { c2.stream("/process.Process/Start", &body, &[]).await });
    // Find the pid through List.
    let pid = loop {
        let (_, b) = c.unary("/process.Process/List", json!({})).await;
        if let Some(p) = b["processes"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["config"]["args"][2] == "cat"))
        {
            break p["pid"].as_u64().unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let msgs = [
        json!({"start": {"process": {"pid": pid}}}),
        json!({"data": {"input": {"stdin": "aGVs"}}}),
        json!({"keepalive": {}}),
        json!({"data": {"input": {"stdin": "bG8K"}}}),
    ];
    let body: Vec<u8> = msgs
        .iter()
        .flat_map(|m| envelope(0, m.to_string().as_bytes()))
        .collect();
    let (s, env) = c.stream("/process.Process/StreamInput", &body, &[]).await;
    assert_eq!(s, 200);
    assert_eq!(env, vec![(0, json!({})), (2, json!({}))]);
    let (s, _) = c
        .unary(
            "/process.Process/CloseStdin",
            json!({"process": {"pid": pid}}),
        )
        .await;
    assert_eq!(s, 200);
    let (_, env) = task.await.unwrap();
    let out: String = env
        .iter()
        .filter_map(|(_, m)| m["event"]["data"]["stdout"].as_str())
        .collect();
    assert_eq!(out, "aGVsbG8K");
}
