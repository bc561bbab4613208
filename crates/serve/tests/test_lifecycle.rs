//! Create → info → timeout → connect → metrics → logs → kill; commands through the edge, one
//! test case per transport (h2c gRPC, gRPC-Web).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use e2b_commands::{CommandOptions, Transport};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_info_timeout_connect_kill() {
    let env = start().await;
    let sbx = env
        .create(json!({"metadata": {"suite": "lifecycle"}}))
        .await;
    let id = id(&sbx);
    assert!(id.starts_with('i') && id.len() == 21, "{id}");
    assert_eq!(sbx["templateID"], "base");
    assert_eq!(sbx["clientID"], "6532622b");
    assert!(
        sbx["envdAccessToken"]
            .as_str()
            .is_some_and(|t| t.len() == 64)
    );
    assert!(sbx["trafficAccessToken"].is_null());
    // The domain names this machine's edge, never E2B's cloud: the SDKs build host names
    // (`get_host`) and, without E2B_SANDBOX_URL, envd's URL from it.
    let domain = format!("localhost:{}", env.serve.edge_addr().port());
    assert_eq!(sbx["domain"], domain.as_str(), "{sbx}");
    assert_eq!(env.serve.domain(), domain);
    let version = sbx["envdVersion"].as_str().unwrap();
    assert!(semver_at_least(version, (0, 6, 4)), "{version}");

    // envd is up as soon as create answers.
    assert_eq!(env.health(&id).await, 204);

    let (status, info) = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["state"], "running");
    assert_eq!(info["metadata"]["suite"], "lifecycle");
    assert!(info["cpuCount"].as_u64().unwrap() >= 1);
    assert!(info["memoryMB"].as_u64().unwrap() > 0);
    assert_eq!(info["lifecycle"]["onTimeout"], "kill");
    assert_eq!(info["domain"], domain.as_str(), "{info}");
    let end_at = info["endAt"].as_str().unwrap().to_string();

    // connect with a shorter timeout leaves endAt byte-for-byte alone (200) ...
    let (status, body) = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 10}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["envdAccessToken"], sbx["envdAccessToken"]);
    assert_eq!(body["domain"], domain.as_str(), "{body}");
    let (_, info) = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(info["endAt"].as_str().unwrap(), end_at);
    // ... a longer one extends it.
    let (status, _) = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 600}))
        .await;
    assert_eq!(status, 200);
    let (_, info) = env.get(&format!("/sandboxes/{id}")).await;
    assert!(info["endAt"].as_str().unwrap() > end_at.as_str());
    // /timeout may shorten.
    let (status, _) = env
        .post(&format!("/sandboxes/{id}/timeout"), json!({"timeout": 100}))
        .await;
    assert_eq!(status, 204);
    let (_, info2) = env.get(&format!("/sandboxes/{id}")).await;
    assert!(info2["endAt"].as_str().unwrap() < info["endAt"].as_str().unwrap());

    // Metrics: at least the sample taken at create.
    let (status, metrics) = env.get(&format!("/sandboxes/{id}/metrics")).await;
    assert_eq!(status, 200);
    let m = &metrics[0];
    for k in [
        "timestamp",
        "timestampUnix",
        "cpuCount",
        "cpuUsedPct",
        "memUsed",
        "memTotal",
        "memCache",
        "diskUsed",
        "diskTotal",
    ] {
        assert!(!m[k].is_null(), "metric field {k} missing: {m}");
    }
    assert!(m["memUsed"].as_u64().unwrap() > 0);
    let (_, none) = env
        .get(&format!("/sandboxes/{id}/metrics?start=1&end=2"))
        .await;
    assert_eq!(none, json!([]));
    let (status, logs) = env.get(&format!("/sandboxes/{id}/logs")).await;
    assert_eq!(status, 200);
    assert!(
        logs["logs"][0]["line"]
            .as_str()
            .unwrap()
            .contains("\"level\"")
    );

    let (status, _) = env.delete(&format!("/sandboxes/{id}")).await;
    assert_eq!(status, 204);
    let (status, body) = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], 404);
    let (status, _) = env.delete(&format!("/sandboxes/{id}")).await;
    assert_eq!(status, 404);
    assert_eq!(env.health(&id).await, 502);
    env.serve.shutdown().await;
}

/// `--domain` (for example a wildcard DNS name pointing at this machine) is what create,
/// connect and info answer; a domain that is not a host name is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_domain_is_what_sandboxes_answer() {
    let env = start_with(|mut c| {
        c.domain = Some("sandboxes.example.test:8443".into());
        c
    })
    .await;
    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    assert_eq!(sbx["domain"], "sandboxes.example.test:8443", "{sbx}");
    let (status, body) = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 60}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["domain"], "sandboxes.example.test:8443", "{body}");
    let (_, info) = env.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(info["domain"], "sandboxes.example.test:8443", "{info}");
    env.serve.shutdown().await;

    // Listening on every address, the default is still this machine's `localhost` (never
    // none, which the SDKs would turn into E2B's cloud).
    let env = start_with(|mut c| {
        c.bind = std::net::Ipv4Addr::UNSPECIFIED.into();
        c
    })
    .await;
    let port = env.serve.edge_addr().port();
    assert_eq!(env.serve.domain(), format!("localhost:{port}"));
    env.serve.shutdown().await;

    for bad in ["", "https://x.test", "x.test/path", "a b", ".x.test"] {
        let mut config = e2b_serve::ServeConfig::ephemeral(KEY);
        config.domain = Some(bad.into());
        let runtime = std::sync::Arc::new(e2b_serve::PlainRuntime::new(envd_command()));
        let err = e2b_serve::Serve::start(config, runtime)
            .await
            .expect_err(&format!("domain {bad:?} must be refused"));
        assert!(
            err.to_string().contains("not a host name"),
            "{bad:?}: {err}"
        );
    }
}

/// A command in a fresh sandbox through the edge over `transport`: its env vars, id, user and
/// own working directory; without the sandbox's access token envd refuses.
async fn runs_through_the_edge(transport: Transport) {
    let env = start().await;
    let sbx = env.create(json!({"envVars": {"GREETING": "hi"}})).await;
    let id = id(&sbx);
    let out = env
        .commands(&sbx, transport)
        .run(
            "echo $GREETING $E2B_SANDBOX_ID; whoami; pwd",
            CommandOptions::new(),
        )
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert_eq!(lines[0], format!("hi {id}"), "{}", out.stdout);
    assert_eq!(lines[1], "user", "{}", out.stdout);
    // Its own working directory, named after the sandbox.
    assert!(lines[2].contains(&id), "{}", out.stdout);

    // Without the token envd refuses: each sandbox has its own.
    let mut no_token = sbx.clone();
    no_token["envdAccessToken"] = serde_json::Value::Null;
    let err = env
        .commands(&no_token, transport)
        .run("true", CommandOptions::new())
        .await;
    assert!(err.is_err(), "a call without the access token must fail");
    env.serve.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_through_the_edge_h2c() {
    runs_through_the_edge(Transport::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_through_the_edge_grpc_web() {
    runs_through_the_edge(Transport::GrpcWeb).await;
}

fn semver_at_least(v: &str, min: (u64, u64, u64)) -> bool {
    let p: Vec<u64> = v.split('.').filter_map(|x| x.parse().ok()).collect();
    p.len() == 3 && (p[0], p[1], p[2]) >= min
}
