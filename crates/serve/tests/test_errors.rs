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
    // /health needs no key, and answers as the spec says: 204, no body.
    let health = env.http.get(env.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 204);
    assert!(health.bytes().await.unwrap().is_empty());

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

/// Every route with a sandbox id checks it first; query strings and optional bodies are checked
/// before the sandbox is looked up; each answer is E2B's 400 body naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_ids_queries_and_bodies_are_400() {
    use reqwest::Method;
    let env = start().await;
    let bad = "Not-An-Id";
    for (method, path) in [
        (Method::GET, format!("/sandboxes/{bad}")),
        (Method::DELETE, format!("/sandboxes/{bad}")),
        (Method::POST, format!("/sandboxes/{bad}/timeout")),
        (Method::POST, format!("/sandboxes/{bad}/connect")),
        (Method::POST, format!("/v2/sandboxes/{bad}/connect")),
        (Method::POST, format!("/sandboxes/{bad}/pause")),
        (Method::POST, format!("/sandboxes/{bad}/resume")),
        (Method::POST, format!("/sandboxes/{bad}/refreshes")),
        (Method::GET, format!("/sandboxes/{bad}/metrics")),
        (Method::GET, format!("/sandboxes/{bad}/logs")),
        (Method::GET, format!("/v2/sandboxes/{bad}/logs")),
    ] {
        // A body that would be invalid too: the id is reported, not the body.
        let (status, _, body) = env.call(method.clone(), &path, Some(json!([]))).await;
        assert_eq!(status, 400, "{method} {path}: {body}");
        assert_eq!(body["code"], 400);
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("Invalid sandbox ID"),
            "{method} {path}: {message}"
        );
    }

    let sbx = env.create(json!({})).await;
    let id = id(&sbx);
    for path in [
        format!("/sandboxes/{id}/metrics?start=%zz"),
        format!("/sandboxes/{id}/logs?limit=%2"),
        format!("/v2/sandboxes/{id}/logs?cursor=%zz"),
        "/v2/sandboxes?state=%zz".to_string(),
        "/sandboxes?metadata=%zz".to_string(),
        "/sandboxes/metrics?sandbox_ids=%zz".to_string(),
    ] {
        let (status, body) = env.get(&path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["message"], "malformed query string", "{path}");
    }
    for path in [
        format!("/sandboxes/{id}/metrics?start=yesterday"),
        format!("/sandboxes/{id}/logs?limit=many"),
        format!("/v2/sandboxes/{id}/logs?cursor=1.5"),
    ] {
        let (status, body) = env.get(&path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("must be an integer"),
            "{path}: {body}"
        );
    }
    let (status, body) = env
        .post(&format!("/sandboxes/{id}/pause"), json!({"unknown": []}))
        .await;
    // Unknown fields are ignored, as the SDKs expect of a newer server.
    assert_eq!(status, 204, "{body}");
    let (status, body) = env
        .post(&format!("/sandboxes/{id}/connect"), json!({"timeout": 5}))
        .await;
    assert_eq!(status, 201, "connect resumes the paused sandbox: {body}");
    let resp = env
        .http
        .post(env.url(&format!("/sandboxes/{id}/pause")))
        .header("X-API-Key", KEY)
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid SandboxPauseRequest body"),
        "{v}"
    );
    // Still running: the bad request changed nothing.
    assert_eq!(env.health(&id).await, 204);
    // Out of the spec's ranges: a refresh of more than an hour or less than nothing, metrics
    // before 1970, batch metrics of no sandbox.
    for (path, body, want) in [
        (
            format!("/sandboxes/{id}/refreshes"),
            json!({"duration": 3601}),
            "duration must be 0 to 3600 seconds",
        ),
        (
            format!("/sandboxes/{id}/refreshes"),
            json!({"duration": -1}),
            "duration must be 0 to 3600 seconds",
        ),
    ] {
        let (status, body) = env.post(&path, body).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body["message"].as_str().unwrap().contains(want), "{body}");
    }
    for (path, want) in [
        (
            format!("/sandboxes/{id}/metrics?start=-5"),
            "start must be unix seconds",
        ),
        (
            format!("/sandboxes/{id}/metrics?end=-1"),
            "end must be unix seconds",
        ),
        ("/sandboxes/metrics".to_string(), "sandbox_ids is required"),
        (
            "/sandboxes/metrics?sandbox_ids=".to_string(),
            "sandbox_ids is required",
        ),
    ] {
        let (status, body) = env.get(&path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(want),
            "{path}: {body}"
        );
    }
    env.serve.shutdown().await;
}

/// What of a create request `e2b serve` cannot hold is refused with 400 naming it, never
/// silently dropped (a caller that asked for egress rules must not get an open sandbox), and
/// nothing is started. Plain sandboxes share the machine's network, so one asked to be cut off
/// from the internet is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_options_that_cannot_be_held_are_refused() {
    let env = start().await;
    assert_eq!(env.serve.runtime_name(), "plain");
    let cases = [
        (
            json!({"network": {"allowOut": ["example.com"], "denyOut": ["0.0.0.0/0"]}}),
            "network.allowOut",
        ),
        (
            json!({"network": {"denyOut": ["10.0.0.0/8"]}}),
            "network.denyOut",
        ),
        (
            json!({"network": {"egressProxy": {"address": "127.0.0.1:1080"}}}),
            "network.egressProxy",
        ),
        (
            json!({"network": {"rules": {"api.example.com": [{}]}}}),
            "network.rules",
        ),
        (
            json!({"network": {"maskRequestHost": "bad\nhost"}}),
            "is not a valid Host header",
        ),
        (
            json!({"volumeMounts": [{"name": "data", "path": "/data"}]}),
            "volumeMounts",
        ),
        (json!({"mcp": {"github": {}}}), "mcp"),
        (
            json!({"iam": {"tokens": {"aws": {"audience": "sts.amazonaws.com", "tokenType": "JWT-SVID"}}}}),
            "iam",
        ),
        (
            json!({"allow_internet_access": false}),
            "without internet access needs a network of its own",
        ),
        (
            json!({"network": {"denyOut": ["0.0.0.0/0"]}}),
            "without internet access needs a network of its own",
        ),
    ];
    for (extra, want) in cases {
        let mut body = json!({"templateID": "base", "timeout": 60});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = env.post("/sandboxes", body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["code"], 400);
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(want), "{body}: {message}");
    }
    assert_eq!(
        env.serve.sandbox_count(),
        0,
        "a refused create started a sandbox"
    );
    // Empty lists and public traffic are what every sandbox has: accepted.
    let sbx = env.create(json!({"network": {"allowOut": [], "denyOut": [], "allowPublicTraffic": true}, "volumeMounts": []}))
        .await;
    // Egress rules cannot be changed later either (the SDKs' update_network): 400, not 204.
    let path = format!("/sandboxes/{}/network", id(&sbx));
    let body = json!({"denyOut": ["0.0.0.0/0"]});
    let (status, _, answer) = env
        .call(reqwest::Method::PUT, &path, Some(body.clone()))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot change a sandbox's egress rules"),
        "{answer}"
    );
    let (status, _, _) = env
        .call(
            reqwest::Method::PUT,
            "/sandboxes/nosuchsandbox/network",
            Some(body),
        )
        .await;
    assert_eq!(status, 404);
    // Parts of E2B's API that e2b serve does not serve say so.
    let (status, _, answer) = env.call(reqwest::Method::GET, "/templates", None).await;
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("has no endpoint GET /templates"),
        "{answer}"
    );
    env.serve.shutdown().await;
}
