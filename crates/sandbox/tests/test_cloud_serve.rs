//! The Rust client (`e2b-api`) and the facade (`Sandbox::create`, ...) against the real
//! `e2b-serve` binary on ephemeral loopback ports: the whole lifecycle, list filters and
//! pagination, timeout expiry, pause/resume with a running process, kill, wrong key, unknown
//! ids, bad bodies. Every request and response of the contract test is validated against
//! `openapi/e2b.yml`.
//!
//! Needs the `e2b-serve` binary next to this test's build (`cargo build -p e2b-serve`; the
//! workspace `cargo nextest run` builds it) or at `E2B_SERVE_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../api/tests/support/mod.rs"]
mod support;

use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2b::api::models::{NewSandbox, SandboxState};
use e2b::api::{ApiClient, ApiError, ConnectionConfig, ListQuery};
use e2b::{CommandOptions, Sandbox, SandboxError};
use serde_json::{Value, json};

const KEY: &str = "e2b_00112233445566778899aabbccddeeff";

fn serve_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("E2B_SERVE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("e2b-serve");
    assert!(
        bin.is_file(),
        "missing {}: build it with `cargo build -p e2b-serve` (or set E2B_SERVE_BIN)",
        bin.display()
    );
    bin
}

/// A running `e2b-serve` process; SIGTERM and wait on drop (it kills its sandboxes).
struct Serve {
    child: Child,
    state: PathBuf,
    api_url: String,
    edge_url: String,
}

impl Serve {
    fn start() -> Serve {
        let state = tempfile_dir();
        let mut child = Command::new(serve_bin())
            .args(["--api-port", "0", "--edge-port", "0", "--api-key", KEY])
            .arg("--state-dir")
            .arg(&state)
            .env_remove("E2B_API_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn e2b-serve");
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let (mut api_url, mut edge_url) = (None, None);
        while api_url.is_none() || edge_url.is_none() {
            let line = lines
                .next()
                .expect("e2b-serve printed its URLs before exiting")
                .unwrap();
            if let Some(u) = line.strip_prefix("export E2B_API_URL=") {
                api_url = Some(u.to_owned());
            }
            if let Some(u) = line.strip_prefix("export E2B_SANDBOX_URL=") {
                edge_url = Some(u.to_owned());
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Serve {
            child,
            state,
            api_url: api_url.unwrap(),
            edge_url: edge_url.unwrap(),
        }
    }

    fn config(&self) -> ConnectionConfig {
        ConnectionConfig::default()
            .api_key(KEY)
            .api_url(self.api_url.clone())
            .sandbox_url(self.edge_url.clone())
    }

    fn api(&self) -> ApiClient {
        ApiClient::new(self.config()).unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signalling our own child process.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                remove_state(&self.state);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_state(&self.state);
    }
}

/// Removes the state directory; the sandboxes' own cleanup may still be racing with it.
fn remove_state(dir: &std::path::Path) {
    for _ in 0..50 {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "e2b-api-test-serve-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_lifecycle_through_the_facade() {
    let serve = Serve::start();
    let tag = rand_suffix();
    let sbx = Sandbox::builder("base")
        .metadata("test", tag.clone())
        .env("GREETING", "hello from the API")
        .timeout(Duration::from_secs(120))
        .connection(serve.config())
        .create()
        .await
        .unwrap();
    let out = sbx
        .commands()
        .run("echo \"$GREETING\"; whoami", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "hello from the API\nuser\n");
    // Host names name this machine's edge (e2b serve answers `domain: localhost:<edge port>`),
    // not E2B's cloud.
    let edge_port = serve.edge_url.rsplit(':').next().unwrap();
    assert_eq!(
        sbx.host(8080),
        Some(format!("8080-{}.localhost:{edge_port}", sbx.id()))
    );
    let counter = format!("/tmp/e2b-api-test-counter-{tag}");

    let info = sbx.info().await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.metadata.as_ref().unwrap()["test"], tag);
    let api = serve.api();
    let listed = api
        .list(ListQuery::new().metadata("test", tag.clone()))
        .collect(None)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].sandbox_id, sbx.id());

    sbx.set_timeout(Duration::from_secs(600)).await.unwrap();
    let later = sbx.info().await.unwrap();
    assert!(
        later.end_at > info.end_at,
        "{} !> {}",
        later.end_at,
        info.end_at
    );

    // Pause with a process running; it is still there, and still running, after resume.
    let handle = sbx
        .commands()
        .start(
            format!("for i in $(seq 1 600); do echo $i > {counter}; sleep 0.05; done"),
            CommandOptions::new(),
        )
        .await
        .unwrap();
    let pid = handle.pid();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(sbx.pause().await.unwrap());
    assert!(
        !sbx.pause().await.unwrap(),
        "pausing a paused sandbox is false"
    );
    assert!(!sbx.is_running().await.unwrap());
    assert_eq!(sbx.info().await.unwrap().state, SandboxState::Paused);
    let paused = api
        .list(
            ListQuery::new()
                .metadata("test", tag.clone())
                .state(SandboxState::Paused),
        )
        .collect(None)
        .await
        .unwrap();
    assert_eq!(paused.len(), 1);
    assert!(sbx.resume().await.unwrap(), "resumed from paused");
    assert!(sbx.is_running().await.unwrap());
    let first = sbx.files().read_text(&counter).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = sbx.files().read_text(&counter).await.unwrap();
    let (a, b): (u32, u32) = (
        first.trim().parse().unwrap(),
        second.trim().parse().unwrap(),
    );
    assert!(b > a, "the process continues after resume: {a} then {b}");
    let procs = sbx.commands().list().await.unwrap();
    assert!(procs.iter().any(|p| p.pid == pid));

    // Connect by id reaches the same sandbox.
    let again = Sandbox::connect_by_id_with(&api, sbx.id(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again.id(), sbx.id());
    let out = again
        .commands()
        .run(
            format!("cat {counter} >/dev/null && echo ok"),
            CommandOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "ok\n");

    let id = sbx.id().to_owned();
    sbx.kill().await.unwrap();
    let _ = std::fs::remove_file(&counter);
    assert!(!api.kill_sandbox(&id).await.unwrap(), "already gone: false");
    let err = Sandbox::connect_by_id_with(&api, &id, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SandboxError::Api(e) if e.is_not_found()),
        "{err:?}"
    );
    let running = api
        .list(
            ListQuery::new()
                .metadata("test", tag)
                .state(SandboxState::Running),
        )
        .collect(None)
        .await
        .unwrap();
    assert!(running.is_empty());
}

/// The builder's `allow_public_traffic(false)` and `auto_resume(true)`: the sandbox has a traffic
/// access token, and a command sent while it is paused resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_traffic_and_auto_resume_through_the_builder() {
    let serve = Serve::start();
    let sbx = Sandbox::builder("base")
        .allow_public_traffic(false)
        .auto_pause(true)
        .auto_resume(true)
        .timeout(Duration::from_secs(120))
        .connection(serve.config())
        .create()
        .await
        .unwrap();
    let token = sbx.traffic_access_token().unwrap_or_default();
    assert_eq!(token.len(), 64, "a traffic access token: {token:?}");
    assert!(sbx.pause().await.unwrap());
    assert_eq!(sbx.info().await.unwrap().state, SandboxState::Paused);
    let out = sbx
        .commands()
        .run("echo awake", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "awake\n", "traffic resumed the paused sandbox");
    assert_eq!(sbx.info().await.unwrap().state, SandboxState::Running);
    sbx.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_and_paginates_over_pages() {
    let serve = Serve::start();
    let api = serve.api();
    let tag = rand_suffix();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut body = NewSandbox::new("base");
        body.timeout = Some(120);
        body.metadata = Some([("page".to_owned(), tag.clone())].into());
        ids.push(api.create_sandbox(&body).await.unwrap().sandbox_id);
    }
    let mut other = NewSandbox::new("base");
    other.metadata = Some([("page".to_owned(), "other".to_owned())].into());
    let other_id = api.create_sandbox(&other).await.unwrap().sandbox_id;

    let mut pages = api.list(ListQuery::new().metadata("page", tag.clone()).limit(1));
    let mut seen = Vec::new();
    let mut n = 0;
    while let Some(page) = pages.next_page().await.unwrap() {
        n += 1;
        assert!(page.len() <= 1);
        seen.extend(page.into_iter().map(|s| s.sandbox_id));
        assert!(n <= 4, "the paginator must stop");
    }
    assert_eq!(n, 3, "three pages of one");
    let mut sorted = seen.clone();
    sorted.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(sorted, want);
    assert!(!seen.contains(&other_id));

    // Newest first by default, the reverse with asc.
    let desc = api
        .list(ListQuery::new().metadata("page", tag.clone()))
        .collect(None)
        .await
        .unwrap();
    let asc = api
        .list(
            ListQuery::new()
                .metadata("page", tag.clone())
                .order(e2b::api::models::OrderDirection::Asc),
        )
        .collect(None)
        .await
        .unwrap();
    let d: Vec<_> = desc.iter().map(|s| s.sandbox_id.clone()).collect();
    let mut a: Vec<_> = asc.iter().map(|s| s.sandbox_id.clone()).collect();
    a.reverse();
    assert_eq!(d, a);

    // state filter: pause one.
    assert!(api.pause_sandbox(&ids[0], true).await.unwrap());
    let paused = api
        .list(
            ListQuery::new()
                .metadata("page", tag.clone())
                .state(SandboxState::Paused),
        )
        .collect(None)
        .await
        .unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].sandbox_id, ids[0]);
    let both = api
        .list(
            ListQuery::new()
                .metadata("page", tag.clone())
                .state(SandboxState::Running)
                .state(SandboxState::Paused),
        )
        .collect(None)
        .await
        .unwrap();
    assert_eq!(both.len(), 3);
    // template filter
    let unknown = api
        .list(ListQuery::new().template("unknown-template"))
        .collect(None)
        .await
        .unwrap();
    assert!(unknown.is_empty());
    for id in ids.iter().chain([&other_id]) {
        assert!(api.kill_sandbox(id).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_expires_and_kills_the_sandbox() {
    let serve = Serve::start();
    let sbx = Sandbox::builder("base")
        .connection(serve.config())
        .create()
        .await
        .unwrap();
    sbx.set_timeout(Duration::from_secs(1)).await.unwrap();
    // Hang guard only: expiry is checked by state, not by time.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sbx.info().await {
            Err(SandboxError::Api(e)) if e.is_not_found() => break,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => panic!("the sandbox should have expired: {other:?}"),
        }
    }
    assert!(!sbx.is_running().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_unknown_ids_and_bad_bodies_are_typed() {
    let serve = Serve::start();
    let wrong = ApiClient::new(serve.config().api_key("e2b_ffff")).unwrap();
    let err = wrong.list_sandboxes(&ListQuery::new()).await.unwrap_err();
    assert!(matches!(err, ApiError::Authentication { .. }), "{err:?}");
    let err = Sandbox::builder("base")
        .api(wrong)
        .create()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    let api = serve.api();
    let unknown = "nonexistingsandbox";
    assert!(!api.kill_sandbox(unknown).await.unwrap());
    for err in [
        api.get_sandbox(unknown).await.unwrap_err(),
        api.set_timeout(unknown, Duration::from_secs(5))
            .await
            .unwrap_err(),
        api.pause_sandbox(unknown, true).await.unwrap_err(),
        api.connect_sandbox(unknown, Duration::from_secs(5))
            .await
            .unwrap_err(),
        api.sandbox_metrics(unknown, None, None).await.unwrap_err(),
    ] {
        assert!(err.is_not_found(), "{err:?}");
    }

    let mut negative = NewSandbox::new("base");
    negative.timeout = Some(-1);
    let err = api.create_sandbox(&negative).await.unwrap_err();
    assert!(matches!(err, ApiError::InvalidArgument { .. }), "{err:?}");
    let bad_token = ListQuery::new().next_token("not a token");
    let err = api.list_sandboxes(&bad_token).await;
    assert!(
        matches!(err, Err(ApiError::InvalidArgument { .. })),
        "{err:?}"
    );
}

/// Sends one request to the real server and checks request and response against the spec.
async fn exchange(
    http: &reqwest::Client,
    serve: &Serve,
    method: &str,
    path_and_query: &str,
    body: Option<Value>,
    key: &str,
) -> support::Recorded {
    let url = format!("{}{path_and_query}", serve.api_url);
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = http.request(m, &url).header("X-API-Key", key);
    let raw = body.as_ref().map(|b| serde_json::to_vec(b).unwrap());
    if let Some(b) = &raw {
        req = req
            .header("content-type", "application/json")
            .body(b.clone());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let response_body = resp.bytes().await.unwrap().to_vec();
    let parsed = url::Url::parse(&url).unwrap();
    let rec = support::Recorded {
        method: method.into(),
        path: parsed.path().into(),
        query: parsed.query_pairs().into_owned().collect(),
        raw_query: parsed.query().map(str::to_owned),
        headers: vec![
            ("x-api-key".into(), key.into()),
            ("content-type".into(), "application/json".into()),
        ],
        body: raw.unwrap_or_default(),
        status,
        response_body,
    };
    let checked = if body
        .as_ref()
        .is_some_and(|b| b["timeout"].as_i64().is_some_and(|t| t < 0))
    {
        // A deliberately bad body: only the answer is checked (an `Error`).
        serde_json::from_slice(&rec.response_body)
            .map_err(|e| e.to_string())
            .and_then(|v| support::validate_named("Error", &v))
    } else {
        support::check_contract(&rec)
    };
    if let Err(e) = checked {
        panic!(
            "{method} {path_and_query} → {status} {}: {e}",
            String::from_utf8_lossy(&rec.response_body)
        );
    }
    rec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_of_e2b_serve_matches_the_spec() {
    let serve = Serve::start();
    let http = reqwest::Client::new();
    let created = exchange(
        &http,
        &serve,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "base", "timeout": 60, "metadata": {"c": "1"}, "envVars": {}, "secure": true, "allow_internet_access": true})),
        KEY,
    )
    .await;
    assert_eq!(created.status, 201);
    let sandbox: Value = serde_json::from_slice(&created.response_body).unwrap();
    let id = sandbox["sandboxID"].as_str().unwrap().to_owned();
    let s = |p: &str| format!("/sandboxes/{id}{p}");
    let steps: Vec<(&str, String, Option<Value>, u16)> = vec![
        (
            "GET",
            "/v2/sandboxes?metadata=c%3D1&state=running,paused&limit=1".into(),
            None,
            200,
        ),
        ("GET", s(""), None, 200),
        ("POST", s("/timeout"), Some(json!({"timeout": 120})), 204),
        ("POST", s("/connect"), Some(json!({"timeout": 60})), 200),
        ("GET", s("/metrics"), None, 200),
        ("POST", s("/pause"), Some(json!({"memory": true})), 204),
        ("POST", s("/pause"), Some(json!({"memory": true})), 409),
        ("POST", s("/connect"), Some(json!({"timeout": 60})), 201),
        ("DELETE", s(""), None, 204),
        ("GET", s(""), None, 404),
        ("DELETE", s(""), None, 404),
        (
            "POST",
            "/sandboxes".into(),
            Some(json!({"templateID": "base", "timeout": -5})),
            400,
        ),
    ];
    for (method, path, body, want) in steps {
        let rec = exchange(&http, &serve, method, &path, body, KEY).await;
        assert_eq!(rec.status, want, "{method} {path}");
    }
    let rec = exchange(&http, &serve, "GET", "/v2/sandboxes", None, "e2b_dead").await;
    assert_eq!(rec.status, 401);
}
