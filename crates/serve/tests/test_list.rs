//! `GET /v2/sandboxes`: metadata and state filters, order, pagination over several pages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;

use common::*;
use serde_json::{Value, json};

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s["sandboxID"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_order_and_pages() {
    let env = start().await;
    let mut made = Vec::new();
    for i in 0..5 {
        let s = env
            .create(json!({"metadata": {"suite": "list", "n": i.to_string(), "odd key&": "v a=l"}}))
            .await;
        made.push(id(&s));
    }
    let other = id(&env.create(json!({"metadata": {"suite": "other"}})).await);

    // Metadata filter, encoded as the SDKs encode it (each part, then the pairs, then the value).
    let (status, _, all) = env
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?metadata=suite%3Dlist",
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(ids(&all).len(), 5);
    let (_, _, odd) = env
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?metadata=odd%252520key%252526%3Dv%252520a%25253Dl%26n%3D3",
            None,
        )
        .await;
    assert_eq!(ids(&odd), vec![made[3].clone()]);

    // Newest first; pages of 2 with X-Next-Token, which is absent on the last page.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = "/v2/sandboxes?metadata=suite%3Dlist&limit=2".to_string();
        if let Some(t) = &token {
            path.push_str(&format!("&nextToken={t}"));
        }
        let (status, headers, page) = env.call(reqwest::Method::GET, &path, None).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        seen.extend(ids(&page));
        match headers.get("x-next-token") {
            Some(t) => token = Some(t.to_str().unwrap().to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(seen, expected, "desc order across pages");

    let (_, _, asc) = env
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?metadata=suite%3Dlist&order=asc",
            None,
        )
        .await;
    assert_eq!(ids(&asc), made);

    // A token used with the other order, or garbage, is 400 "Invalid next token".
    let (_, headers, _) = env
        .call(reqwest::Method::GET, "/v2/sandboxes?limit=1", None)
        .await;
    let t = headers
        .get("x-next-token")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let (status, _, body) = env
        .call(
            reqwest::Method::GET,
            &format!("/v2/sandboxes?limit=1&order=asc&nextToken={t}"),
            None,
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["message"], "Invalid next token");

    // State filter: pause one.
    let (status, _) = env
        .post(
            &format!("/sandboxes/{}/pause", made[0]),
            json!({"memory": true}),
        )
        .await;
    assert_eq!(status, 204);
    let (_, _, paused) = env
        .call(reqwest::Method::GET, "/v2/sandboxes?state=paused", None)
        .await;
    assert_eq!(ids(&paused), vec![made[0].clone()]);
    assert_eq!(paused[0]["state"], "paused");
    let (_, headers, running) = env
        .call(reqwest::Method::GET, "/v2/sandboxes?state=running", None)
        .await;
    let running: HashSet<String> = ids(&running).into_iter().collect();
    assert_eq!(running.len(), 5);
    assert!(running.contains(&other) && !running.contains(&made[0]));
    assert_eq!(headers.get("x-total-running").unwrap(), "5");
    let (_, _, both) = env
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?state=running,paused",
            None,
        )
        .await;
    assert_eq!(ids(&both).len(), 6);

    // startedAfter is inclusive; template filter.
    let (_, info) = env.get(&format!("/sandboxes/{}", made[4])).await;
    let started = info["startedAt"].as_str().unwrap().replace(':', "%3A");
    let (_, _, after) = env
        .call(
            reqwest::Method::GET,
            &format!("/v2/sandboxes?metadata=suite%3Dlist&startedAfter={started}"),
            None,
        )
        .await;
    assert_eq!(ids(&after), vec![made[4].clone()]);
    let (_, _, unknown) = env
        .call(
            reqwest::Method::GET,
            "/v2/sandboxes?template=unknown-template",
            None,
        )
        .await;
    assert_eq!(unknown, json!([]));
    let (_, _, base) = env
        .call(reqwest::Method::GET, "/v2/sandboxes?template=base", None)
        .await;
    assert_eq!(ids(&base).len(), 6);

    // Bad parameters are 400 with E2B's error body.
    for q in [
        "limit=0",
        "limit=101",
        "state=sleeping",
        "order=up",
        "startedAfter=yesterday",
        "metadata=a%3Db%3Dc",
        "template=base%3Av1",
    ] {
        let (status, _, body) = env
            .call(reqwest::Method::GET, &format!("/v2/sandboxes?{q}"), None)
            .await;
        assert_eq!(status, 400, "{q}: {body}");
        assert_eq!(body["code"], 400);
        assert!(body["message"].as_str().is_some());
    }
    env.serve.shutdown().await;
}
