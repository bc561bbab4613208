//! The edge: routing by header, by `Host: 49983-<id>.<domain>`, and by the signature of a signed
//! `/files` URL (no header, as browsers and curl use it); files up and down through it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use common::*;
use serde_json::json;
use sha2::Digest as _;

fn sign(path: &str, op: &str, user: &str, token: &str, exp: Option<u64>) -> String {
    let raw = match exp {
        Some(e) => format!("{path}:{op}:{user}:{token}:{e}"),
        None => format!("{path}:{op}:{user}:{token}"),
    };
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD
            .encode(sha2::Sha256::digest(raw.as_bytes()))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_header_host_and_signature() {
    let env = start().await;
    let a = env.create(json!({})).await;
    let b = env.create(json!({})).await;
    let edge = env.serve.edge_url();
    let path = format!("/tmp/e2b-serve-edge-{}.txt", id(&a));
    let token_a = a["envdAccessToken"].as_str().unwrap();

    // Upload through the edge (header routing, multipart as the SDKs send it).
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"hello edge".to_vec()).file_name(path.clone()),
    );
    let resp = env
        .http
        .post(format!("{edge}/files"))
        .query(&[("path", path.as_str())])
        .header("E2b-Sandbox-Id", id(&a))
        .header("X-Access-Token", token_a)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    // Host routing: 49983-<id>.<anything>.
    let resp = env
        .http
        .get(format!("{edge}/files"))
        .query(&[("path", path.as_str())])
        .header("Host", format!("49983-{}.e2b.local", id(&a)))
        .header("X-Access-Token", token_a)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "hello edge");
    // Another port on the same host is not served.
    let resp = env
        .http
        .get(format!("{edge}/"))
        .header("Host", format!("8080-{}.e2b.local", id(&a)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);

    // Signed URL, no header and no token: found by its signature (with and without expiry).
    let sig = sign(&path, "read", "", token_a, None);
    let resp = env
        .http
        .get(format!("{edge}/files"))
        .query(&[("path", path.as_str()), ("signature", sig.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "hello edge");
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 60;
    let sig = sign(&path, "read", "user", token_a, Some(exp));
    let resp = env
        .http
        .get(format!("{edge}/files"))
        .query(&[
            ("path", path.as_str()),
            ("username", "user"),
            ("signature", sig.as_str()),
            ("signature_expiration", exp.to_string().as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A signature made with sandbox b's token goes to b, not a: with b paused it gets the 502
    // of a paused sandbox while a's own signature still reaches a.
    let (status, _) = env
        .post(&format!("/sandboxes/{}/pause", id(&b)), json!({}))
        .await;
    assert_eq!(status, 204);
    let sig_b = sign(
        &path,
        "read",
        "",
        b["envdAccessToken"].as_str().unwrap(),
        None,
    );
    let resp = env
        .http
        .get(format!("{edge}/files"))
        .query(&[("path", path.as_str()), ("signature", sig_b.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502, "routed to the wrong sandbox");
    let sig = sign(&path, "read", "", token_a, None);
    let resp = env
        .http
        .get(format!("{edge}/files"))
        .query(&[("path", path.as_str()), ("signature", sig.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A forged signature reaches no sandbox at all.
    let resp = env
        .http
        .get(format!("{edge}/files"))
        .query(&[("path", path.as_str()), ("signature", "v1_forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);

    // Signed upload without header.
    let up = format!("{path}.up");
    let sig = sign(&up, "write", "", token_a, None);
    let resp = env
        .http
        .post(format!("{edge}/files"))
        .query(&[("path", up.as_str()), ("signature", sig.as_str())])
        .header("content-type", "application/octet-stream")
        .body(vec![7u8; 3 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    assert_eq!(std::fs::metadata(&up).unwrap().len(), 3 * 1024 * 1024);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&up);
    env.serve.shutdown().await;
}
