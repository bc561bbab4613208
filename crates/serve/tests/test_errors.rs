//! Wrong or missing key (401), unknown id (404), malformed id and bodies (400), unknown template.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed_like_e2b() {
    let env = start().await;

    for key in [None, Some("e2b_ffff")] {
        let mut req = env.http.get(env.url("/v2/sandboxes"));
        if let Some(k) = key {
            req = req.header("X-API-Key", k);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], 401);
        assert!(body["message"].as_str().unwrap().contains("E2B_API_KEY"));
    }
    // /health needs no key.
    assert_eq!(
        env.http
            .get(env.url("/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let unknown = "nonexistingsandbox";
    for (method, path, body) in [
        (reqwest::Method::GET, format!("/sandboxes/{unknown}"), None),
        (
            reqwest::Method::DELETE,
            format!("/sandboxes/{unknown}"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/sandboxes/{unknown}/timeout"),
            Some(json!({"timeout": 5})),
        ),
        (
            reqwest::Method::POST,
            format!("/sandboxes/{unknown}/connect"),
            Some(json!({"timeout": 5})),
        ),
        (
            reqwest::Method::POST,
            format!("/sandboxes/{unknown}/pause"),
            Some(json!({})),
        ),
        (
            reqwest::Method::GET,
            format!("/sandboxes/{unknown}/metrics"),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/sandboxes/{unknown}/logs"),
            None,
        ),
    ] {
        let (status, _, body) = env.call(method.clone(), &path, body).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(body["code"], 404);
    }
    let (status, _, body) = env
        .call(reqwest::Method::GET, "/sandboxes/Not-An-Id", None)
        .await;
    assert_eq!(status, 400, "{body}");

    // Bad bodies.
    for body in ["", "{", "[]", "{\"timeout\": 5}", "{\"templateID\": 5}"] {
        let resp = env
            .http
            .post(env.url("/sandboxes"))
            .header("X-API-Key", KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body:?}");
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["code"], 400);
    }
    let (status, body) = env
        .post("/sandboxes", json!({"templateID": "base", "timeout": -1}))
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = env
        .post("/sandboxes", json!({"templateID": "python-3"}))
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(body["message"].as_str().unwrap().contains("python-3"));

    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    let (status, _) = env
        .post(
            &format!("/sandboxes/{id}/timeout"),
            json!({"timeout": "soon"}),
        )
        .await;
    assert_eq!(status, 400);
    let resp = env
        .http
        .post(env.url(&format!("/sandboxes/{id}/connect")))
        .header("X-API-Key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // The sandbox is unharmed and the server keeps serving.
    assert_eq!(env.health(&id).await, 204);
    // Unknown sandbox on the edge: E2B's 502 body.
    let resp = env
        .http
        .get(format!("{}/health", env.serve.edge_url()))
        .header("E2b-Sandbox-Id", "nonexistingsandbox")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["sandboxId"], "nonexistingsandbox");
    assert_eq!(v["code"], 502);
    // No sandbox named at all.
    let resp = env
        .http
        .get(format!("{}/health", env.serve.edge_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    env.serve.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_sandboxes_is_429() {
    let env = start_with(|mut c| {
        c.max_sandboxes = 1;
        c
    })
    .await;
    env.create(json!({})).await;
    let (status, body) = env.post("/sandboxes", json!({"templateID": "base"})).await;
    assert_eq!(status, 429, "{body}");
    env.serve.shutdown().await;
}
