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

/// One request of a contract walk: what is sent, the status it must get, and whether the
/// request breaks the spec on purpose (then the spec must refuse the request, and only the
/// answer is checked: an `Error`).
struct Step {
    method: &'static str,
    path: String,
    body: Option<Value>,
    want: u16,
    bad_request: bool,
}

/// A request the spec accepts; request and answer are checked against the spec.
fn step(method: &'static str, path: impl Into<String>, body: Option<Value>, want: u16) -> Step {
    Step {
        method,
        path: path.into(),
        body,
        want,
        bad_request: false,
    }
}

/// A request the spec refuses (a bad body or query); its answer must be a documented `Error`.
fn bad_step(method: &'static str, path: impl Into<String>, body: Option<Value>, want: u16) -> Step {
    Step {
        bad_request: true,
        ..step(method, path, body, want)
    }
}

/// What the real server answered, with its headers.
struct Exchanged {
    rec: support::Recorded,
    headers: reqwest::header::HeaderMap,
}

impl Exchanged {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.rec.response_body).unwrap()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The `sandboxID`s of a list answer, in order.
    fn ids(&self) -> Vec<String> {
        self.json()
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sandboxID"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Sends one request to the real server and checks request and response against the spec: the
/// status is the one wanted and one the operation itself documents (not only a shared response
/// of `components.responses`), and the answer matches the schema of that status.
async fn exchange(http: &reqwest::Client, serve: &Serve, step: &Step, key: &str) -> Exchanged {
    let Step {
        method,
        path,
        body,
        want,
        bad_request,
    } = step;
    let url = format!("{}{path}", serve.api_url);
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
    let headers = resp.headers().clone();
    let response_body = resp.bytes().await.unwrap().to_vec();
    let parsed = url::Url::parse(&url).unwrap();
    let rec = support::Recorded {
        method: (*method).into(),
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
    let answer = String::from_utf8_lossy(&rec.response_body).into_owned();
    assert_eq!(status, *want, "{method} {path} → {status} {answer}");
    let (template, op) = support::operation(method, parsed.path())
        .unwrap_or_else(|| panic!("{method} {path} is not an operation of the spec"));
    assert!(
        op["responses"].get(status.to_string().as_str()).is_some(),
        "{method} {template} → {status} {answer}: the spec does not document {status} here"
    );
    let checked = if *bad_request {
        assert!(
            support::check_contract(&rec).is_err(),
            "{method} {path} is marked bad, but the spec accepts the request"
        );
        serde_json::from_slice(&rec.response_body)
            .map_err(|e| e.to_string())
            .and_then(|v| support::validate_named("Error", &v))
    } else {
        support::check_contract(&rec)
    };
    if let Err(e) = checked {
        panic!("{method} {path} → {status} {answer}: {e}");
    }
    Exchanged { rec, headers }
}

/// Every sandbox endpoint `e2b serve` answers, on two live sandboxes through running, paused,
/// resumed and killed: each success and each documented error answer matches the spec, and the
/// answers say what they should (filters filter, states change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_of_e2b_serve_matches_the_spec() {
    let serve = Serve::start();
    let http = reqwest::Client::new();
    exchange(&http, &serve, &step("GET", "/health", None, 204), KEY).await;
    let ex = |s: Step| {
        let (http, serve) = (&http, &serve);
        async move { exchange(http, serve, &s, KEY).await }
    };
    let create = json!({"templateID": "base", "timeout": 60, "metadata": {"c": "1"}, "envVars": {}, "secure": true, "allow_internet_access": true});
    let created = ex(step("POST", "/sandboxes", Some(create), 201)).await;
    let a = created.json()["sandboxID"].as_str().unwrap().to_owned();
    let created = ex(step(
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "base", "timeout": 300, "metadata": {"c": "1"}})),
        201,
    ))
    .await;
    let b = created.json()["sandboxID"].as_str().unwrap().to_owned();
    let s = |p: &str| format!("/sandboxes/{a}{p}");

    // Lists, v1 (running only) and v2 with every filter and pagination.
    let all = ex(step("GET", "/sandboxes", None, 200)).await.ids();
    assert!(all.contains(&a) && all.contains(&b), "{all:?}");
    let c1 = ex(step("GET", "/sandboxes?metadata=c%3D1", None, 200)).await;
    assert_eq!(c1.ids().len(), 2);
    let c2 = ex(step("GET", "/sandboxes?metadata=c%3D2", None, 200)).await;
    assert!(c2.ids().is_empty());
    ex(step("GET", "/sandboxes?metadata=a%3Db%3Dc", None, 400)).await;
    let page = "/v2/sandboxes?metadata=c%3D1&state=running,paused&limit=1";
    let first = ex(step("GET", page, None, 200)).await;
    assert_eq!(first.ids(), [b.as_str()], "newest first");
    assert_eq!(first.header("x-total-running"), Some("2"));
    let token = first
        .header("x-next-token")
        .expect("a next token")
        .to_owned();
    let token: String = url::form_urlencoded::byte_serialize(token.as_bytes()).collect();
    let second = ex(step("GET", format!("{page}&nextToken={token}"), None, 200)).await;
    assert_eq!(second.ids(), [a.as_str()]);
    assert_eq!(second.header("x-next-token"), None, "the last page");
    let asc =
        "/v2/sandboxes?order=asc&startedAfter=2020-01-01T00:00:00Z&template=base&state=running";
    assert_eq!(
        ex(step("GET", asc, None, 200)).await.ids(),
        [a.as_str(), b.as_str()]
    );
    let later = "/v2/sandboxes?startedAfter=2100-01-01T00:00:00Z";
    assert!(ex(step("GET", later, None, 200)).await.ids().is_empty());
    let none_paused = ex(step("GET", "/v2/sandboxes?state=paused", None, 200)).await;
    assert!(none_paused.ids().is_empty());
    assert_eq!(none_paused.header("x-total-running"), None);
    ex(step(
        "GET",
        "/v2/sandboxes?nextToken=not-a-token",
        None,
        400,
    ))
    .await;
    ex(step("GET", "/v2/sandboxes?metadata=a%3Db%3Dc", None, 400)).await;
    ex(bad_step("GET", "/v2/sandboxes?state=dead", None, 400)).await;
    ex(bad_step("GET", "/v2/sandboxes?limit=0", None, 400)).await;

    // A running sandbox: info, timeout, connect, refreshes, metrics, logs.
    let info = ex(step("GET", s(""), None, 200)).await;
    assert_eq!(info.json()["state"], "running");
    ex(step(
        "POST",
        s("/timeout"),
        Some(json!({"timeout": 120})),
        204,
    ))
    .await;
    let connected = ex(step(
        "POST",
        s("/connect"),
        Some(json!({"timeout": 60})),
        200,
    ))
    .await;
    assert_eq!(connected.json()["sandboxID"], a.as_str());
    ex(bad_step(
        "POST",
        s("/connect"),
        Some(json!({"timeout": -1})),
        400,
    ))
    .await;
    ex(bad_step("POST", s("/connect"), None, 400)).await;
    ex(step(
        "POST",
        s("/refreshes"),
        Some(json!({"duration": 30})),
        204,
    ))
    .await;
    ex(step("POST", s("/refreshes"), None, 204)).await;
    let metrics = ex(step("GET", s("/metrics"), None, 200)).await;
    assert!(!metrics.json().as_array().unwrap().is_empty());
    let window = ex(step("GET", s("/metrics?start=0&end=4102444800"), None, 200)).await;
    assert!(!window.json().as_array().unwrap().is_empty());
    ex(bad_step("GET", s("/metrics?start=soon"), None, 400)).await;
    ex(bad_step("GET", s("/metrics?start=-5"), None, 400)).await;
    ex(bad_step("GET", "/sandboxes/metrics", None, 400)).await;
    let batch = format!("/sandboxes/metrics?sandbox_ids={a},{b}");
    let batch = ex(step("GET", batch, None, 200)).await.json();
    let keys: Vec<&String> = batch["sandboxes"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 2, "{batch}");
    let batch = format!("/sandboxes/metrics?sandbox_ids={a},nonexistingsandbox");
    let batch = ex(step("GET", batch, None, 200)).await.json();
    let keys: Vec<&String> = batch["sandboxes"].as_object().unwrap().keys().collect();
    assert_eq!(keys, [&a], "{batch}");
    let too_many: Vec<String> = (0..=100).map(|i| format!("x{i}")).collect();
    let too_many = format!("/sandboxes/metrics?sandbox_ids={}", too_many.join(","));
    ex(bad_step("GET", too_many, None, 400)).await;
    let logs = ex(step("GET", s("/logs"), None, 200)).await.json();
    assert!(!logs["logs"].as_array().unwrap().is_empty(), "{logs}");
    assert!(!logs["logEntries"].as_array().unwrap().is_empty(), "{logs}");
    let two = ex(step("GET", s("/logs?start=0&limit=2"), None, 200))
        .await
        .json();
    assert_eq!(two["logEntries"].as_array().unwrap().len(), 2, "{two}");
    let logs = ex(step("GET", format!("/v2{}", s("/logs")), None, 200)).await;
    assert!(!logs.json()["logs"].as_array().unwrap().is_empty());
    let query = "/logs?cursor=0&limit=10&direction=forward&level=info&search=created";
    let found = ex(step("GET", format!("/v2{}", s(query)), None, 200))
        .await
        .json();
    assert_eq!(found["logs"].as_array().unwrap().len(), 1, "{found}");
    ex(step(
        "POST",
        s("/resume"),
        Some(json!({"timeout": 60})),
        409,
    ))
    .await;

    // Paused: pause, info, lists, batch metrics, resume, connect.
    ex(step(
        "POST",
        s("/pause"),
        Some(json!({"memory": true})),
        204,
    ))
    .await;
    ex(step(
        "POST",
        s("/pause"),
        Some(json!({"memory": true})),
        409,
    ))
    .await;
    assert_eq!(
        ex(step("GET", s(""), None, 200)).await.json()["state"],
        "paused"
    );
    // A refresh keeps running sandboxes alive: a paused one is not found, and stays paused.
    ex(step(
        "POST",
        s("/refreshes"),
        Some(json!({"duration": 30})),
        404,
    ))
    .await;
    assert_eq!(
        ex(step("GET", s(""), None, 200)).await.json()["state"],
        "paused"
    );
    let running = ex(step("GET", "/sandboxes?metadata=c%3D1", None, 200)).await;
    assert_eq!(
        running.ids(),
        [b.as_str()],
        "v1 lists running sandboxes only"
    );
    let paused = ex(step("GET", "/v2/sandboxes?state=paused", None, 200)).await;
    assert_eq!(paused.ids(), [a.as_str()]);
    ex(step("GET", s("/metrics"), None, 200)).await;
    let batch = format!("/sandboxes/metrics?sandbox_ids={a}");
    ex(step("GET", batch, None, 200)).await;
    ex(bad_step(
        "POST",
        s("/resume"),
        Some(json!({"timeout": -1})),
        400,
    ))
    .await;
    let resumed = ex(step(
        "POST",
        s("/resume"),
        Some(json!({"timeout": 60})),
        201,
    ))
    .await;
    assert_eq!(resumed.json()["sandboxID"], a.as_str());
    ex(step("POST", s("/resume"), Some(json!({})), 409)).await;
    ex(step("POST", s("/pause"), None, 204)).await;
    ex(step(
        "POST",
        s("/connect"),
        Some(json!({"timeout": 60})),
        201,
    ))
    .await;
    ex(step(
        "POST",
        s("/connect"),
        Some(json!({"timeout": 60})),
        200,
    ))
    .await;

    // Killed: gone for every endpoint.
    ex(step("DELETE", s(""), None, 204)).await;
    ex(step("GET", s(""), None, 404)).await;
    ex(step("DELETE", s(""), None, 404)).await;
    ex(step(
        "POST",
        s("/connect"),
        Some(json!({"timeout": 60})),
        404,
    ))
    .await;
    ex(step("DELETE", format!("/sandboxes/{b}"), None, 204)).await;
    assert!(
        ex(step("GET", "/sandboxes", None, 200))
            .await
            .ids()
            .is_empty()
    );
    assert!(
        ex(step("GET", "/v2/sandboxes", None, 200))
            .await
            .ids()
            .is_empty()
    );
    ex(bad_step(
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "base", "timeout": -5})),
        400,
    ))
    .await;
}

/// Every sandbox endpoint's answer to an unknown id (404) and to a wrong key (401) is the
/// documented `Error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_response_of_e2b_serve_matches_the_spec() {
    let serve = Serve::start();
    let http = reqwest::Client::new();
    let s = |p: &str| format!("/sandboxes/nonexistingsandbox{p}");
    let t = || Some(json!({"timeout": 60}));
    let by_id = |want: u16| {
        vec![
            step("GET", s(""), None, want),
            step("DELETE", s(""), None, want),
            step("POST", s("/timeout"), t(), want),
            step("POST", s("/connect"), t(), want),
            step("POST", s("/pause"), Some(json!({"memory": true})), want),
            step("POST", s("/resume"), t(), want),
            step("POST", s("/refreshes"), Some(json!({"duration": 30})), want),
            step("PUT", s("/network"), Some(json!({"allowOut": []})), want),
            step("GET", s("/metrics"), None, want),
            step("GET", s("/logs"), None, want),
            step("GET", format!("/v2{}", s("/logs")), None, want),
        ]
    };
    for st in by_id(404) {
        exchange(&http, &serve, &st, KEY).await;
    }
    let mut wrong_key = by_id(401);
    wrong_key.extend([
        step("GET", "/sandboxes", None, 401),
        step(
            "POST",
            "/sandboxes",
            Some(json!({"templateID": "base"})),
            401,
        ),
        step("GET", "/v2/sandboxes", None, 401),
        step("GET", "/sandboxes/metrics?sandbox_ids=x", None, 401),
    ]);
    for st in wrong_key {
        exchange(&http, &serve, &st, "e2b_dead").await;
    }
}
