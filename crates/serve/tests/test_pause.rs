//! Pause freezes every process of a sandbox; connect resumes it and the process continues.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use e2b_commands::{CommandOptions, Transport};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_and_connect_resumes() {
    let env = start().await;
    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    let cmds = env.commands(&sbx, Transport::Grpc);
    let counter = format!("/tmp/e2b-serve-test-counter-{id}");
    let marker = format!("pausemarker{id}");
    let script = format!(
        "i=0; while true; do i=$((i+1)); echo $i > {counter}.tmp; mv {counter}.tmp {counter}; sleep 0.05; done # {marker}"
    );
    let handle = cmds
        .start(script.as_str(), CommandOptions::new().no_timeout())
        .await
        .unwrap();
    let read = || {
        std::fs::read_to_string(&counter)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    assert!(
        eventually(Duration::from_secs(10), || read().is_some_and(|n| n > 2)).await,
        "the counter never started"
    );

    let (status, body) = env
        .post(&format!("/sandboxes/{id}/pause"), json!({"memory": true}))
        .await;
    assert_eq!(status, 204, "{body}");
    let (_, info) = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(info["state"], "paused");
    // envd answers 502 through the edge while paused, as on E2B (is_running() == false).
    assert_eq!(env.health(&id).await, 502);
    // Every process of the sandbox is stopped, and the counter stands still.
    let pids = pids_with(&marker);
    assert!(!pids.is_empty());
    for pid in &pids {
        assert_eq!(proc_state(*pid), Some('T'), "process {pid} is not stopped");
    }
    let frozen = read();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read(), frozen, "the counter moved while paused");
    // Pausing again is 409.
    let (status, _) = env.post(&format!("/sandboxes/{id}/pause"), json!({})).await;
    assert_eq!(status, 409);
    // The paused sandbox cannot get a timeout that would expire it unseen.
    let (status, _) = env
        .post(&format!("/sandboxes/{id}/timeout"), json!({"timeout": 30}))
        .await;
    assert_eq!(status, 409);

    // connect resumes: 201 with the same id and token.
    let (status, body) = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 60}))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["sandboxID"], id.as_str());
    assert_eq!(body["envdAccessToken"], sbx["envdAccessToken"]);
    assert_eq!(env.health(&id).await, 204);
    let before = frozen.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || read()
            .is_some_and(|n| n > before + 2))
        .await,
        "the process did not continue after resume"
    );
    // The same process, still running and reachable.
    let listed = cmds.list().await.unwrap();
    assert!(listed.iter().any(|p| p.pid == handle.pid()));
    handle.kill().await.unwrap();
    let _ = std::fs::remove_file(&counter);
    env.serve.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_pause_on_timeout() {
    let env = start().await;
    let sbx = env.create(json!({"timeout": 1, "autoPause": true})).await;
    let id = id(&sbx);
    let mut state = String::new();
    for _ in 0..100 {
        let (_, info) = env.get(&format!("/sandboxes/{id}")).await;
        state = info["state"].as_str().unwrap_or("").to_string();
        if state == "paused" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "paused");
    let (status, _) = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 30}))
        .await;
    assert_eq!(status, 201);
    assert_eq!(env.health(&id).await, 204);
    env.serve.shutdown().await;
}

/// `autoResume: {enabled: true}`: traffic for a paused sandbox resumes it (as on E2B, where a
/// request wakes it), for its create timeout; without it the sandbox stays paused and the edge
/// answers 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_resumes_a_paused_sandbox_with_auto_resume() {
    let env = start().await;
    let woken = env
        .create(json!({"timeout": 120, "autoResume": {"enabled": true}}))
        .await;
    let asleep = env.create(json!({"timeout": 120})).await;
    let (_, info) = env.get(&format!("/sandboxes/{}", id(&woken))).await;
    assert_eq!(info["lifecycle"]["autoResume"], true, "{info}");
    for s in [&woken, &asleep] {
        let (status, body) = env
            .post(&format!("/sandboxes/{}/pause", id(s)), json!({}))
            .await;
        assert_eq!(status, 204, "{body}");
    }
    assert_eq!(env.health(&id(&woken)).await, 204, "traffic resumes it");
    let (_, info) = env.get(&format!("/sandboxes/{}", id(&woken))).await;
    assert_eq!(info["state"], "running", "{info}");
    let out = env
        .commands(&woken, e2b_commands::Transport::Grpc)
        .run("echo awake", e2b_commands::CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "awake\n");

    // A signed /files URL (no sandbox id in it, as browsers use download_url) wakes it too.
    let path = format!("/tmp/e2b-serve-awake-{}.txt", id(&woken));
    let path = path.as_str();
    let out = env
        .commands(&woken, e2b_commands::Transport::Grpc)
        .run(
            format!("echo signed > {path}"),
            e2b_commands::CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    let (status, _) = env
        .post(&format!("/sandboxes/{}/pause", id(&woken)), json!({}))
        .await;
    assert_eq!(status, 204);
    let token = woken["envdAccessToken"].as_str().unwrap();
    let signature = e2b_envd_proto::wire::file_signature(
        path,
        e2b_envd_proto::wire::FileOperation::Read,
        "",
        token,
        None,
    );
    let resp = env
        .http
        .get(format!("{}/files", env.serve.edge_url()))
        .query(&[("path", path), ("signature", signature.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "signed\n");
    // Plain sandboxes share the machine's /tmp.
    let _ = std::fs::remove_file(path);

    assert_eq!(
        env.health(&id(&asleep)).await,
        502,
        "no autoResume: it sleeps"
    );
    let (_, info) = env.get(&format!("/sandboxes/{}", id(&asleep))).await;
    assert_eq!(info["state"], "paused", "{info}");
    env.serve.shutdown().await;
}
