//! REST routes and the access token across every protocol.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use e2b_envd_proto::process::ListRequest;
use serde_json::json;

const UNAUTHORIZED: &str =
    "unauthorized access, please provide a valid access token or method signing if supported";

#[tokio::test]
async fn health_is_open_and_204() {
    let envd = spawn_envd().await;
    let r = reqwest::get(format!("{}/health", envd.url()))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(r.headers()["cache-control"], "no-store");
}

#[tokio::test]
async fn token_is_required_everywhere_else() {
    let envd = spawn_envd().await;
    let http = reqwest::Client::new();
    for (method, path, ct) in [
        ("GET", "/envs", ""),
        ("GET", "/metrics", ""),
        ("POST", "/process.Process/List", "application/json"),
        ("POST", "/process.Process/Start", "application/connect+json"),
    ] {
        let mut b = http.request(method.parse().unwrap(), format!("{}{path}", envd.url()));
        if !ct.is_empty() {
            b = b.header("content-type", ct).body("{}");
        }
        for token in [None, Some("wrong")] {
            let mut b = b.try_clone().unwrap();
            if let Some(t) = token {
                b = b.header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, t);
            }
            let r = b.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 401, "{method} {path}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body, json!({"code": 401, "message": UNAUTHORIZED}));
        }
    }
    // gRPC over h2c.
    let mut c = h2c(&envd).await;
    let err = c
        .list(tonic::Request::new(ListRequest {}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    c.list(req(&envd, ListRequest {})).await.unwrap();
}

#[tokio::test]
async fn envs_metrics_and_init() {
    let envd = spawn_envd().await;
    let token = envd.access_token().unwrap();
    let http = reqwest::Client::new();
    let get = |p: &str| {
        http.get(format!("{}{p}", envd.url()))
            .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, token.clone())
    };
    let envs: serde_json::Value = get("/envs").send().await.unwrap().json().await.unwrap();
    assert_eq!(envs, json!({"E2B_SANDBOX": "true"}));
    let m: serde_json::Value = get("/metrics").send().await.unwrap().json().await.unwrap();
    for k in [
        "ts",
        "cpu_count",
        "cpu_used_pct",
        "mem_total",
        "mem_used",
        "mem_cache",
        "mem_total_mib",
        "mem_used_mib",
        "disk_used",
        "disk_total",
    ] {
        assert!(m.get(k).is_some(), "missing {k} in {m}");
    }
    assert!(m["mem_total"].as_u64().unwrap() > 0);

    // /init without the current token is refused once a token is set.
    let r = http
        .post(format!("{}/init", envd.url()))
        .json(&json!({"envVars": {"A": "1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);

    let r = http
        .post(format!("{}/init", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, &token)
        .json(&json!({"envVars": {"A": "1"}, "accessToken": "new-token", "defaultWorkdir": "/tmp", "unknown": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        r.headers()["x-envd-version"],
        e2b_envd::IMPLEMENTED_ENVD_VERSION
    );
    assert_eq!(envd.access_token().as_deref(), Some("new-token"));
    let r = get("/envs").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let envs: serde_json::Value = http
        .get(format!("{}/envs", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, "new-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(envs, json!({"E2B_SANDBOX": "true", "A": "1"}));

    // The new env vars and workdir reach commands; envVars replace the previous set.
    let mut c = h2c(&envd).await;
    let got = collect(start_bash(&mut c, &envd, "echo $A; pwd").await, |m| m.event).await;
    assert_eq!(got.stdout, b"1\n/tmp\n");
    let r = http
        .post(format!("{}/init", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, "new-token")
        .json(&json!({"envVars": {"B": "2"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let envs: serde_json::Value = http
        .get(format!("{}/envs", envd.url()))
        .header(e2b_envd_proto::wire::headers::ACCESS_TOKEN, "new-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(envs, json!({"E2B_SANDBOX": "true", "B": "2"}));
}

#[tokio::test]
async fn open_daemon_and_configured_version() {
    let envd = spawn_envd_with(|mut c| {
        c.access_token = None;
        c.envd_version = "0.5.1".into();
        c
    })
    .await;
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(format!("{}/envs", envd.url()))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let r = http
        .post(format!("{}/init", envd.url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-envd-version"], "0.5.1");
    let r = http
        .get(format!("{}/nope", envd.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

#[tokio::test]
async fn unknown_basic_auth_user_is_unauthenticated() {
    let envd = spawn_envd().await;
    let c = ConnectClient::new(&envd);
    let auth = basic_auth("no-such-user-xyz");
    let body = envelope(0, serde_json::to_string(&bash("true")).unwrap().as_bytes());
    let (s, env) = c
        .stream("/process.Process/Start", &body, &[("authorization", &auth)])
        .await;
    assert_eq!(s, 200);
    assert_eq!(env[0].1["error"]["code"], "unauthenticated");
    assert!(
        env[0].1["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid username: 'no-such-user-xyz'")
    );
}
