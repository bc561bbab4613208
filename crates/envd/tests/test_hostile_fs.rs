//! Hostile callers against the Filesystem RPCs (issue 12): FIFOs and devices answer at once,
//! ListDir depth and size are bounded, watchers are capped and abandoned ones expire, a
//! recursive watch of a big tree is bounded. Limits are lowered through their environment
//! variables, set before the daemon starts (each test runs in its own process under nextest).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_envd_proto::filesystem::filesystem_client::FilesystemClient;
use e2b_envd_proto::filesystem::{
    CreateWatcherRequest, GetWatcherEventsRequest, RemoveWatcherRequest, WatchDirRequest,
};
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Sets limits for the daemon this test starts. Called before any other thread exists.
fn set_env(vars: &[(&str, &str)]) {
    for (k, v) in vars {
        // SAFETY: called first in the test's main thread, before the runtime (or any other
        // thread) is started; nextest runs each test in its own process.
        unsafe { std::env::set_var(k, v) };
    }
}

async fn fs_client(envd: &TestEnvd) -> FilesystemClient<tonic::transport::Channel> {
    let ch = tonic::transport::Endpoint::from_shared(envd.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    FilesystemClient::new(ch)
}

/// A few hundred file RPCs on a FIFO (and a device) get a typed answer at once and do not use
/// up the blocking pool: a normal Stat afterwards still answers promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_and_device_requests_answer_at_once() {
    let envd = spawn_envd().await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let normal = dir.path().join("normal.txt");
    std::fs::write(&normal, "x").unwrap();
    let cc = std::sync::Arc::new(ConnectClient::new(&envd));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let cc = cc.clone();
        let target = if i % 10 == 9 {
            "/dev/zero".to_string()
        } else {
            fifo.display().to_string()
        };
        tasks.push(tokio::spawn(async move {
            let (method, body) = match i % 5 {
                0 => ("Stat", json!({"path": target})),
                1 => ("ListDir", json!({"path": target, "depth": 3})),
                2 => ("MakeDir", json!({"path": target})),
                3 => ("CreateWatcher", json!({"path": target})),
                _ => ("ListDir", json!({"path": format!("{target}/sub")})),
            };
            let (status, v) = cc
                .unary(&format!("/filesystem.Filesystem/{method}"), body)
                .await;
            (method, status, v)
        }));
    }
    let results = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(tasks))
        .await
        .expect("requests on a FIFO hung");
    for r in results {
        let (method, status, v) = r.unwrap();
        match method {
            "Stat" => assert_eq!(status, 200, "{method}: {v}"),
            _ => {
                assert!(status >= 400, "{method} on a FIFO/device succeeded: {v}");
                assert!(v["code"].is_string(), "{method}: untyped error {v}");
            }
        }
    }
    let (status, v) = tokio::time::timeout(
        Duration::from_secs(10),
        cc.unary("/filesystem.Filesystem/Stat", json!({"path": normal})),
    )
    .await
    .expect("a normal Stat stalled after the FIFO requests");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["entry"]["type"], "FILE_TYPE_FILE");
}

#[test]
fn listdir_depth_and_entries_are_bounded() {
    set_env(&[
        ("E2B_ENVD_LISTDIR_MAX_ENTRIES", "50"),
        ("E2B_ENVD_LISTDIR_MAX_DEPTH", "8"),
    ]);
    runtime().block_on(async {
        let envd = spawn_envd().await;
        let cc = ConnectClient::new(&envd);
        let dir = tempfile::tempdir().unwrap();
        for i in 0..40 {
            std::fs::write(dir.path().join(format!("f{i:02}")), "").unwrap();
        }
        let (s, v) = cc
            .unary(
                "/filesystem.Filesystem/ListDir",
                json!({"path": dir.path(), "depth": 1}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["entries"].as_array().unwrap().len(), 40);
        for i in 40..60 {
            std::fs::write(dir.path().join(format!("f{i:02}")), "").unwrap();
        }
        let (s, v) = cc
            .unary(
                "/filesystem.Filesystem/ListDir",
                json!({"path": dir.path(), "depth": 1}),
            )
            .await;
        assert_eq!(v["code"], "resource_exhausted", "{s} {v}");
        assert!(v["message"].as_str().unwrap().contains("50 entries"), "{v}");
        for depth in [9u64, u32::MAX as u64] {
            let (s, v) = cc
                .unary(
                    "/filesystem.Filesystem/ListDir",
                    json!({"path": dir.path(), "depth": depth}),
                )
                .await;
            assert_eq!(v["code"], "invalid_argument", "depth {depth}: {s} {v}");
        }
    });
}

#[test]
fn watchers_are_capped_and_abandoned_ones_expire() {
    set_env(&[
        ("E2B_ENVD_MAX_WATCHERS", "3"),
        ("E2B_ENVD_WATCHER_IDLE_MS", "1500"),
    ]);
    runtime().block_on(async {
        let envd = spawn_envd().await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().display().to_string();
        let mut c = fs_client(&envd).await;
        let create = |c: &mut FilesystemClient<_>| {
            let r = req(
                &envd,
                CreateWatcherRequest {
                    path: path.clone(),
                    ..Default::default()
                },
            );
            let mut c = c.clone();
            async move { c.create_watcher(r).await }
        };
        let w1 = create(&mut c).await.unwrap().into_inner().watcher_id;
        let _w2 = create(&mut c).await.unwrap().into_inner().watcher_id;
        // A WatchDir stream takes the third slot.
        let stream = c
            .watch_dir(req(
                &envd,
                WatchDirRequest {
                    path: path.clone(),
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let err = create(&mut c)
            .await
            .expect_err("a fourth watcher was accepted");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(err.message().contains("3 directory watchers"), "{err:?}");
        // Closing the stream frees its slot.
        drop(stream);
        let mut w3 = None;
        for _ in 0..100 {
            match create(&mut c).await {
                Ok(r) => {
                    w3 = Some(r.into_inner().watcher_id);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        let w3 = w3.expect("the dropped WatchDir stream's slot was never freed");
        c.remove_watcher(req(&envd, RemoveWatcherRequest { watcher_id: w3 }))
            .await
            .unwrap();
        // w1 is kept alive by polling; w2 is abandoned and expires.
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            c.get_watcher_events(req(
                &envd,
                GetWatcherEventsRequest {
                    watcher_id: w1.clone(),
                },
            ))
            .await
            .expect("a polled watcher expired");
        }
        let err = c
            .get_watcher_events(req(
                &envd,
                GetWatcherEventsRequest {
                    watcher_id: _w2.clone(),
                },
            ))
            .await
            .expect_err("an abandoned watcher did not expire");
        assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
        // Its slot is free again: two more fit (w1 + 2 = 3).
        create(&mut c).await.unwrap();
        create(&mut c).await.unwrap();
    });
}

#[test]
fn recursive_watch_of_a_big_tree_is_bounded() {
    set_env(&[("E2B_ENVD_WATCH_MAX_DIRS", "20")]);
    runtime().block_on(async {
        let envd = spawn_envd().await;
        let dir = tempfile::tempdir().unwrap();
        for i in 0..30 {
            std::fs::create_dir(dir.path().join(format!("d{i}"))).unwrap();
        }
        let mut c = fs_client(&envd).await;
        let r = |recursive| {
            req(
                &envd,
                CreateWatcherRequest {
                    path: dir.path().display().to_string(),
                    recursive,
                    ..Default::default()
                },
            )
        };
        let err = c
            .create_watcher(r(true))
            .await
            .expect_err("a recursive watch over the bound was accepted");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(
            err.message().contains("more than 20 directories"),
            "{err:?}"
        );
        // A non-recursive watch of the same directory is one directory.
        c.create_watcher(r(false)).await.unwrap();
        // The WatchDir stream form is refused the same way.
        let err = c
            .watch_dir(req(
                &envd,
                WatchDirRequest {
                    path: dir.path().display().to_string(),
                    recursive: true,
                    ..Default::default()
                },
            ))
            .await
            .expect_err("WatchDir over the bound was accepted");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    });
}
