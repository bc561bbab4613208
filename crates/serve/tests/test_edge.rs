//! The edge: routing by header, by `Host: 49983-<id>.<domain>`, and by the signature of a signed
//! `/files` URL (no header, as browsers and curl use it); files up and down through it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use e2b_envd_proto::wire::{FileOperation, file_signature};
use serde_json::json;
use std::time::Duration;

/// The SDKs' `/files` URL signature (its digest is pinned by `e2b-envd-proto`'s own tests).
fn sign(path: &str, op: &str, user: &str, token: &str, exp: Option<u64>) -> String {
    let op = match op {
        "read" => FileOperation::Read,
        _ => FileOperation::Write,
    };
    file_signature(path, op, user, token, exp.map(|e| e as i64))
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
    // A port nothing listens on: E2B's "port is not open" 502.
    let closed = free_port();
    let resp = env
        .http
        .get(format!("{edge}/"))
        .header("Host", format!("{closed}-{}.e2b.local", id(&a)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    assert!(resp.text().await.unwrap().contains("is not open"));

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
    // The expiration is read as envd reads it (unix seconds, surrounding spaces allowed); one
    // that is not a number signs nothing, even when the signature covers its text.
    for (given, signed) in [
        (format!(" {exp} "), Some(exp.to_string())),
        ("soon".into(), None),
    ] {
        let raw_sig = match &signed {
            Some(_) => sig.clone(),
            None => {
                // Sign over the literal text, as a sloppy client might.
                use base64::Engine as _;
                use sha2::Digest as _;
                let raw = format!("{path}:read:user:{token_a}:{given}");
                format!(
                    "v1_{}",
                    base64::engine::general_purpose::STANDARD_NO_PAD
                        .encode(sha2::Sha256::digest(raw.as_bytes()))
                )
            }
        };
        let resp = env
            .http
            .get(format!("{edge}/files"))
            .query(&[
                ("path", path.as_str()),
                ("username", "user"),
                ("signature", raw_sig.as_str()),
                ("signature_expiration", given.as_str()),
            ])
            .send()
            .await
            .unwrap();
        let want = if signed.is_some() { 200 } else { 502 };
        assert_eq!(resp.status(), want, "expiration {given:?}");
    }
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

/// An h2c connection is bound to the sandbox of its first request (the edge relays it to that
/// envd byte for byte): a later request on it for another sandbox, for a port, or for no
/// sandbox gets E2B's 502 with a message saying so, and the connection keeps serving its own
/// sandbox afterwards (flow control stays balanced across refused uploads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_connection_is_bound_to_its_first_sandbox() {
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};

    let env = start().await;
    let a = env.create(json!({})).await;
    let b = env.create(json!({})).await;
    let edge = env.serve.edge_url();
    // One h2c connection (prior knowledge), as our Rust client opens per sandbox.
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .pool_max_idle_per_host(1)
            .build_http();
    let send = |id: Option<String>, port: Option<&str>, body: Vec<u8>| {
        let mut req = http::Request::builder()
            .method(if body.is_empty() { "GET" } else { "POST" })
            .uri(format!(
                "{edge}/{}",
                if body.is_empty() {
                    "health"
                } else {
                    "files?path=/tmp/x"
                }
            ));
        if let Some(id) = id {
            req = req.header("e2b-sandbox-id", id);
        }
        if let Some(p) = port {
            req = req.header("e2b-sandbox-port", p);
        }
        let req = req.body(Full::new(Bytes::from(body))).unwrap();
        let client = client.clone();
        async move {
            let resp =
                tokio::time::timeout(std::time::Duration::from_secs(30), client.request(req))
                    .await
                    .expect("the edge answers (hang guard)")
                    .unwrap();
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    assert_eq!(send(Some(id(&a)), None, vec![]).await.0, 204);
    let (status, body) = send(Some(id(&b)), None, vec![]).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("bound to sandbox"), "{body}");
    assert!(body.contains(&id(&b)), "{body}");
    let (status, body) = send(Some(id(&a)), Some("8080"), vec![]).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("port 8080"), "{body}");
    let (status, body) = send(None, None, vec![]).await;
    assert_eq!(status, 502, "{body}");
    // Refused uploads: their DATA is dropped and credited back; the connection still serves a.
    for _ in 0..4 {
        let (status, body) = send(Some(id(&b)), None, vec![1u8; 4 << 20]).await;
        assert_eq!(status, 502, "{body}");
    }
    assert_eq!(send(Some(id(&a)), None, vec![]).await.0, 204);
    // A paused sandbox: its bound connection answers 502 for new requests.
    let (status, _) = env
        .post(&format!("/sandboxes/{}/pause", id(&a)), json!({}))
        .await;
    assert_eq!(status, 204);
    let (status, body) = send(Some(id(&a)), None, vec![]).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("not found"), "{body}");
    // Other sandboxes on their own connections are unaffected.
    assert_eq!(env.health(&id(&b)).await, 204);
    env.serve.shutdown().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `python3 -m http.server` on `port` in the sandbox of `cmds`, its `/index.html` being
/// `text` and a newline; the handle keeps it running.
async fn serve_page(
    cmds: &e2b_commands::Commands,
    port: u16,
    text: &str,
) -> e2b_commands::CommandHandle {
    cmds.run(
        format!("mkdir -p site && echo {text} > site/index.html"),
        e2b_commands::CommandOptions::new(),
    )
    .await
    .unwrap();
    cmds.start_streaming(
        e2b_commands::CommandLine::shell(format!(
            "exec python3 -m http.server {port} --bind 127.0.0.1 --directory site"
        )),
        e2b_commands::CommandOptions::new().retain_output(false),
    )
    .await
    .unwrap()
}

/// User ports: `Host: <port>-<id>.<domain>` (as the SDKs' `get_host(port)`) and the
/// `E2b-Sandbox-Port` header reach a server started inside the sandbox; `e2b serve`'s own
/// ports and the sandboxes' envd ports are never reachable that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_ports_reach_a_server_in_the_sandbox() {
    let env = start().await;
    let a = env.create(json!({})).await;
    let port = free_port();
    let cmds = env.commands(&a, e2b_commands::Transport::Grpc);
    let _server = serve_page(&cmds, port, "served-from-the-sandbox").await;
    let edge = env.serve.edge_url();
    let body = env
        .fetch_port_page(&format!("{port}-{}.localhost", id(&a)), "/index.html")
        .await;
    assert_eq!(
        body, "served-from-the-sandbox\n",
        "the server in the sandbox answered"
    );
    // The header form (E2b-Sandbox-Id + E2b-Sandbox-Port), as E2B's shared host uses.
    let resp = env
        .http
        .get(format!("{edge}/index.html"))
        .header("E2b-Sandbox-Id", id(&a))
        .header("E2b-Sandbox-Port", port.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // e2b serve's own ports and envd's port are refused.
    let api_port = env.serve.api_addr().port();
    let envd_port = env.serve.envd_addr(&id(&a)).unwrap().port();
    for p in [api_port, envd_port] {
        let resp = env
            .http
            .get(format!("{edge}/health"))
            .header("Host", format!("{p}-{}.localhost", id(&a)))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 502, "port {p} must not be reachable");
        assert!(resp.text().await.unwrap().contains("not served"));
    }
    // An unknown sandbox: 502 not found.
    let resp = env
        .http
        .get(format!("{edge}/"))
        .header("Host", format!("{port}-nosuchsandbox.localhost"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    env.serve.shutdown().await;
}

/// `network.allowPublicTraffic: false`: create answers a traffic access token, info says the
/// traffic is not public, and the sandbox's user ports answer 403 without the token (missing or
/// wrong) and reach the server with it, as E2B's proxy; envd's port keeps its own access token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_ports_need_the_traffic_access_token() {
    let env = start().await;
    let a = env
        .create(json!({"network": {"allowPublicTraffic": false}, "autoResume": {"enabled": true}}))
        .await;
    let token = a["trafficAccessToken"]
        .as_str()
        .unwrap_or_else(|| panic!("no trafficAccessToken: {a}"))
        .to_owned();
    assert_eq!(token.len(), 64, "{a}");
    let (_, info) = env.get(&format!("/sandboxes/{}", id(&a))).await;
    assert_eq!(info["network"]["allowPublicTraffic"], false, "{info}");
    let (status, again) = env
        .post(
            &format!("/sandboxes/{}/connect", id(&a)),
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(again["trafficAccessToken"], token.as_str());

    let port = free_port();
    let cmds = env.commands(&a, e2b_commands::Transport::Grpc);
    let _server = serve_page(&cmds, port, "private").await;
    let url = format!("{}/index.html", env.serve.edge_url());
    let host = format!("{port}-{}.localhost", id(&a));
    let get = |token: Option<&str>| {
        let mut req = env.http.get(&url).header("Host", &host);
        if let Some(t) = token {
            req = req.header("e2b-traffic-access-token", t);
        }
        req.send()
    };
    let mut body = String::new();
    for _ in 0..100 {
        let resp = get(Some(&token)).await.unwrap();
        if resp.status() == 200 {
            body = resp.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body, "private\n", "with the token the server answers");
    for (token, why) in [
        (None, "missing"),
        (Some("0".repeat(64).as_str()), "invalid"),
    ] {
        let resp = get(token).await.unwrap();
        assert_eq!(resp.status(), 403, "{why} token");
        let text = resp.text().await.unwrap();
        assert!(
            text.contains(&format!("{why} traffic access token")) && text.contains("\"code\":403"),
            "{text}"
        );
    }
    // A request without the token does not even wake the sandbox when it is paused.
    let (status, _) = env
        .post(&format!("/sandboxes/{}/pause", id(&a)), json!({}))
        .await;
    assert_eq!(status, 204);
    assert_eq!(get(None).await.unwrap().status(), 403);
    let (_, info) = env.get(&format!("/sandboxes/{}", id(&a))).await;
    assert_eq!(
        info["state"], "paused",
        "a tokenless request woke it: {info}"
    );
    // envd's port is guarded by the envd access token, not the traffic token (and wakes it).
    assert_eq!(env.health(&id(&a)).await, 204);
    // A sandbox with public traffic (the default) has no token and needs none.
    let b = env.create(json!({})).await;
    assert!(b["trafficAccessToken"].is_null(), "{b}");
    env.serve.shutdown().await;
}

/// `network.maskRequestHost`: the sandbox's server sees that `Host` (`${PORT}` replaced by the
/// port), as behind E2B's proxy; without it, the address the edge connects to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_host_is_what_the_server_sees() {
    let env = start().await;
    let masked = env
        .create(json!({"network": {"maskRequestHost": "localhost:${PORT}"}}))
        .await;
    let (_, info) = env.get(&format!("/sandboxes/{}", id(&masked))).await;
    assert_eq!(
        info["network"]["maskRequestHost"], "localhost:${PORT}",
        "{info}"
    );
    let plain = env.create(json!({})).await;
    let echo_host = "import http.server as h, sys\n\
        class H(h.BaseHTTPRequestHandler):\n\
        \x20   def do_GET(self):\n\
        \x20       b = self.headers.get('Host', '').encode()\n\
        \x20       self.send_response(200)\n\
        \x20       self.send_header('Content-Length', str(len(b)))\n\
        \x20       self.end_headers()\n\
        \x20       self.wfile.write(b)\n\
        h.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n";
    let mut servers = Vec::new();
    let mut ports = Vec::new();
    for sbx in [&masked, &plain] {
        let port = free_port();
        let cmds = env.commands(sbx, e2b_commands::Transport::Grpc);
        let script = format!("/tmp/e2b-serve-echo-host-{}.py", id(sbx));
        cmds.run(
            format!("cat > {script} <<'EOF'\n{echo_host}EOF"),
            e2b_commands::CommandOptions::new(),
        )
        .await
        .unwrap();
        servers.push(
            cmds.start_streaming(
                e2b_commands::CommandLine::shell(format!("exec python3 {script} {port}")),
                e2b_commands::CommandOptions::new().retain_output(false),
            )
            .await
            .unwrap(),
        );
        ports.push((port, script));
    }
    let (port, _) = &ports[0];
    let seen = env
        .fetch_port_page(&format!("{port}-{}.localhost", id(&masked)), "/")
        .await;
    assert_eq!(seen, format!("localhost:{port}"));
    let (port, _) = &ports[1];
    let seen = env
        .fetch_port_page(&format!("{port}-{}.localhost", id(&plain)), "/")
        .await;
    assert_eq!(seen, format!("127.0.0.1:{port}"));
    for (_, script) in &ports {
        let _ = std::fs::remove_file(script);
    }
    drop(servers);
    env.serve.shutdown().await;
}
