//! Pins the proto3 JSON of envd messages against the examples envd and the E2B SDKs exchange.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use e2b_envd_proto::filesystem::{EntryInfo, FileType, StatResponse};
use e2b_envd_proto::pbjson_types::Timestamp;
use e2b_envd_proto::process::{
    self, ProcessConfig, ProcessEvent, ProcessSelector, SendSignalRequest, Signal, StartRequest,
    StartResponse, process_event, process_selector,
};
use serde_json::{Value, json};

fn event(e: process_event::Event) -> StartResponse {
    StartResponse {
        event: Some(ProcessEvent { event: Some(e) }),
    }
}

#[test]
fn start_request_matches_sdk_json() {
    let req = StartRequest {
        process: Some(ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec!["-l".into(), "-c".into(), "echo hi".into()],
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        json!({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false})
    );
}

#[test]
fn start_stream_events_match_envd_json() {
    let start = event(process_event::Event::Start(process_event::StartEvent {
        pid: 4242,
    }));
    assert_eq!(
        serde_json::to_value(&start).unwrap(),
        json!({"event":{"start":{"pid":4242}}})
    );

    let data = event(process_event::Event::Data(process_event::DataEvent {
        output: Some(process_event::data_event::Output::Stdout(
            prost::bytes::Bytes::from_static(b"hi\n"),
        )),
    }));
    assert_eq!(
        serde_json::to_value(&data).unwrap(),
        json!({"event":{"data":{"stdout":"aGkK"}}})
    );

    let end = event(process_event::Event::End(process_event::EndEvent {
        exit_code: 0,
        exited: true,
        status: "exit status 0".into(),
        error: None,
    }));
    assert_eq!(
        serde_json::to_value(&end).unwrap(),
        json!({"event":{"end":{"exited":true,"status":"exit status 0"}}})
    );

    let killed = event(process_event::Event::End(process_event::EndEvent {
        exit_code: -1,
        exited: false,
        status: "signal: killed".into(),
        error: Some("signal: killed".into()),
    }));
    assert_eq!(
        serde_json::to_value(&killed).unwrap(),
        json!({"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}})
    );

    let keepalive = event(process_event::Event::Keepalive(process_event::KeepAlive {}));
    assert_eq!(
        serde_json::to_value(&keepalive).unwrap(),
        json!({"event":{"keepalive":{}}})
    );
}

#[test]
fn stat_response_matches_envd_json() {
    let resp = StatResponse {
        entry: Some(EntryInfo {
            name: "a.txt".into(),
            r#type: FileType::File as i32,
            path: "/home/u/a.txt".into(),
            size: 4,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "u".into(),
            group: "u".into(),
            modified_time: Some(Timestamp {
                seconds: 1_785_578_400,
                nanos: 123_456_789,
            }),
            symlink_target: None,
            metadata: Default::default(),
        }),
    };
    let v = serde_json::to_value(&resp).unwrap();
    let entry = &v["entry"];
    assert_eq!(entry["name"], "a.txt");
    assert_eq!(entry["type"], "FILE_TYPE_FILE");
    assert_eq!(entry["size"], "4", "int64 is a string in proto3 JSON");
    assert_eq!(entry["mode"], 420);
    assert_eq!(entry["permissions"], "-rw-r--r--");
    assert!(entry.get("symlinkTarget").is_none());
    assert!(entry.get("metadata").is_none(), "empty maps are omitted");
    let ts = entry["modifiedTime"].as_str().unwrap();
    assert!(ts.starts_with("2026-08-01T10:00:00.123456789"), "{ts}");
    // Round trip, including a `Z` timestamp as Go's protojson writes it.
    let mut z = v.clone();
    z["entry"]["modifiedTime"] = Value::from("2026-08-01T10:00:00.123456789Z");
    let back: StatResponse = serde_json::from_value(z).unwrap();
    assert_eq!(back, resp);
}

#[test]
fn input_accepts_both_name_styles_enum_numbers_and_unknown_fields() {
    let camel: process::ProcessEvent =
        serde_json::from_value(json!({"end":{"exitCode":3,"exited":true,"futureField":1}}))
            .unwrap();
    let snake: process::ProcessEvent =
        serde_json::from_value(json!({"end":{"exit_code":3,"exited":true}})).unwrap();
    assert_eq!(camel, snake);

    let by_name: SendSignalRequest =
        serde_json::from_value(json!({"process":{"pid":7},"signal":"SIGNAL_SIGKILL"})).unwrap();
    let by_number: SendSignalRequest =
        serde_json::from_value(json!({"process":{"pid":7},"signal":9})).unwrap();
    assert_eq!(by_name, by_number);
    assert_eq!(by_name.signal(), Signal::Sigkill);
    assert_eq!(
        by_name.process,
        Some(ProcessSelector {
            selector: Some(process_selector::Selector::Pid(7))
        })
    );
}

#[test]
fn optional_presence_is_kept() {
    let absent: StartRequest = serde_json::from_value(json!({"process":{"cmd":"x"}})).unwrap();
    let explicit: StartRequest =
        serde_json::from_value(json!({"process":{"cmd":"x","cwd":""},"stdin":false})).unwrap();
    assert_eq!(absent.stdin, None);
    assert_eq!(explicit.stdin, Some(false));
    assert_eq!(absent.process.as_ref().unwrap().cwd, None);
    assert_eq!(explicit.process.as_ref().unwrap().cwd.as_deref(), Some(""));
}

#[test]
fn exit_code_defaults_to_zero_when_absent() {
    let end: process_event::EndEvent =
        serde_json::from_value(json!({"exited":true,"status":"exit status 0"})).unwrap();
    assert_eq!(end.exit_code, 0);
}
