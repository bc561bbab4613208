//! The Filesystem service over Connect JSON (what the E2B SDKs speak): exact wire shapes,
//! envd's error codes, ListDir walking rules, polled and streamed watchers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use bytes::{Buf as _, Bytes};
use e2b_test_support::{TestEnvd, spawn_envd};
use futures::StreamExt as _;
use serde_json::{Value, json};

async fn unary(envd: &TestEnvd, method: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/filesystem.Filesystem/{method}", envd.url()))
        .header(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            envd.access_token().unwrap(),
        )
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn stat_wire_shape() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.txt");
    std::fs::write(&f, "four").unwrap();
    let (s, v) = unary(&envd, "Stat", json!({"path": f})).await;
    assert_eq!(s, 200, "{v}");
    let e = &v["entry"];
    assert_eq!(e["name"], "a.txt");
    assert_eq!(e["type"], "FILE_TYPE_FILE");
    assert_eq!(e["path"], f.to_str().unwrap());
    assert_eq!(e["size"], "4");
    assert_eq!(e["mode"], 420);
    assert_eq!(e["permissions"], "-rw-r--r--");
    assert_eq!(e["owner"], "root");
    assert!(e["modifiedTime"].as_str().unwrap().starts_with("20"));
    assert!(e.get("symlinkTarget").is_none());
    let (s, v) = unary(&envd, "Stat", json!({"path": dir.path().join("none")})).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));
    assert!(v["message"].as_str().unwrap().starts_with("file not found"));
    // Dangling symlink: unspecified type (omitted), mode 0 (omitted).
    std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("dangling")).unwrap();
    let (_, v) = unary(&envd, "Stat", json!({"path": dir.path().join("dangling")})).await;
    assert!(v["entry"].get("type").is_none(), "{v}");
    assert_eq!(v["entry"]["permissions"], "Lrwxrwxrwx");
}

#[tokio::test]
async fn list_dir_rules() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("real/inner/deep")).unwrap();
    std::fs::write(d.join("real/f"), "x").unwrap();
    std::os::unix::fs::symlink(d.join("real"), d.join("real/inner/loop")).unwrap();
    std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
    let paths = |v: &Value| {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // Depth 0 means 1.
    let (_, v) = unary(
        &envd,
        "ListDir",
        json!({"path": d.join("real"), "depth": 0}),
    )
    .await;
    assert_eq!(
        paths(&v),
        vec![
            d.join("real/f").to_str().unwrap(),
            d.join("real/inner").to_str().unwrap()
        ]
    );
    // A symlinked root lists like its target, with paths under the link; nested links are
    // listed, not followed.
    let (_, v) = unary(
        &envd,
        "ListDir",
        json!({"path": d.join("link"), "depth": 5}),
    )
    .await;
    let link = d.join("link");
    let l = link.to_str().unwrap();
    assert_eq!(
        paths(&v),
        vec![
            format!("{l}/f"),
            format!("{l}/inner"),
            format!("{l}/inner/deep"),
            format!("{l}/inner/loop")
        ]
    );
    // Cycles, files and missing paths.
    std::os::unix::fs::symlink(d.join("c1"), d.join("c2")).unwrap();
    std::os::unix::fs::symlink(d.join("c2"), d.join("c1")).unwrap();
    let (s, v) = unary(&envd, "ListDir", json!({"path": d.join("c1")})).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("failed_precondition")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("cyclic"));
    let (s, v) = unary(&envd, "ListDir", json!({"path": d.join("real/f")})).await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_argument")));
    assert!(v["message"].as_str().unwrap().contains("not a directory"));
    let (s, _) = unary(&envd, "ListDir", json!({"path": d.join("missing")})).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn make_dir_move_remove_codes() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (s, v) = unary(&envd, "MakeDir", json!({"path": d.join("a/b")})).await;
    assert_eq!(s, 200);
    assert_eq!(v["entry"]["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(v["entry"]["permissions"], "drwxr-xr-x");
    let (s, v) = unary(&envd, "MakeDir", json!({"path": d.join("a/b")})).await;
    assert_eq!((s, v["code"].as_str()), (409, Some("already_exists")));
    std::fs::write(d.join("file"), "x").unwrap();
    let (_, v) = unary(&envd, "MakeDir", json!({"path": d.join("file")})).await;
    assert_eq!(v["code"], "invalid_argument");
    let (s, v) = unary(
        &envd,
        "Move",
        json!({"source": d.join("nope"), "destination": d.join("x")}),
    )
    .await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("source file not found")
    );
    let (s, v) = unary(
        &envd,
        "Move",
        json!({"source": d.join("file"), "destination": d.join("p/q/moved")}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["entry"]["name"], "moved");
    let (s, _) = unary(&envd, "Remove", json!({"path": d.join("a")})).await;
    assert_eq!(s, 200);
    let (s, _) = unary(&envd, "Remove", json!({"path": d.join("a")})).await;
    assert_eq!(s, 200);
    assert!(!d.join("a").exists());
}

#[tokio::test]
async fn polled_watcher_lifecycle() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (s, v) = unary(
        &envd,
        "CreateWatcher",
        json!({"path": d, "recursive": true}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let id = v["watcherId"].as_str().unwrap().to_string();
    assert!(id.starts_with('w'));
    std::fs::create_dir(d.join("sub")).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::write(d.join("sub/x.txt"), "x").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, v) = unary(&envd, "GetWatcherEvents", json!({"watcherId": id})).await;
    let evs: Vec<(String, String)> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(evs[0], ("EVENT_TYPE_CREATE".into(), "sub".into()));
    assert!(
        evs.contains(&("EVENT_TYPE_CREATE".into(), "sub/x.txt".into())),
        "{evs:?}"
    );
    assert!(
        evs.contains(&("EVENT_TYPE_WRITE".into(), "sub/x.txt".into())),
        "{evs:?}"
    );
    // Drained.
    let (_, v) = unary(&envd, "GetWatcherEvents", json!({"watcherId": id})).await;
    assert!(v.get("events").is_none() || v["events"].as_array().unwrap().is_empty());

    let (s, _) = unary(&envd, "RemoveWatcher", json!({"watcherId": id})).await;
    assert_eq!(s, 200);
    let (s, v) = unary(&envd, "RemoveWatcher", json!({"watcherId": id})).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));
    let (s, _) = unary(&envd, "GetWatcherEvents", json!({"watcherId": id})).await;
    assert_eq!(s, 404);
    let (s, v) = unary(&envd, "CreateWatcher", json!({"path": d.join("sub/x.txt")})).await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_argument")));
}

fn envelope(msg: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

#[tokio::test]
async fn watch_dir_stream_over_connect() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let body = json!({"path": d, "includeEntry": true}).to_string();
    let r = reqwest::Client::new()
        .post(format!("{}/filesystem.Filesystem/WatchDir", envd.url()))
        .header(
            e2b_envd_proto::wire::headers::ACCESS_TOKEN,
            envd.access_token().unwrap(),
        )
        .header("content-type", "application/connect+json")
        .header(e2b_envd_proto::wire::headers::KEEPALIVE_PING_INTERVAL, "1")
        .body(envelope(body.as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut stream = r.bytes_stream();
    let mut buf = bytes::BytesMut::new();
    let mut frames: Vec<Value> = Vec::new();
    let mut next = async || -> Value {
        loop {
            if buf.len() >= 5 {
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if buf.len() >= 5 + len {
                    let mut f: Bytes = buf.split_to(5 + len).freeze();
                    f.advance(5);
                    return serde_json::from_slice(&f).unwrap();
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            buf.extend_from_slice(&chunk);
        }
    };
    assert_eq!(next().await, json!({"start": {}}));
    std::fs::write(d.join("n.txt"), "abc").unwrap();
    for _ in 0..3 {
        let f = next().await;
        if f.get("keepalive").is_none() {
            frames.push(f);
        }
    }
    let fsev = &frames[0]["filesystem"];
    assert_eq!(fsev["name"], "n.txt");
    assert_eq!(fsev["type"], "EVENT_TYPE_CREATE");
    assert_eq!(fsev["entry"]["name"], "n.txt");
    // Keepalives arrive when nothing happens.
    let f = next().await;
    let f = if f.get("keepalive").is_some() {
        f
    } else {
        next().await
    };
    assert_eq!(f, json!({"keepalive": {}}));
}
