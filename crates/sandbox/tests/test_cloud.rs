//! The facade's E2B-API path: `Sandbox::builder(..).create()`, `connect_by_id`, the lifecycle
//! calls and the envd version gate. The API side is the contract-checking loopback server of
//! `e2b-api`'s tests (every request validated against `openapi/e2b.yml`); envd is a real local
//! daemon, so commands really run.

#[path = "../../api/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use e2b::{CommandOptions, ConnectionConfig, Sandbox, SandboxError};
use serde_json::json;
use support::{KEY, Reply, TestServer};

fn answer(id: &str, version: &str, token: Option<&str>) -> serde_json::Value {
    let mut v = json!({
        "templateID": "base",
        "sandboxID": id,
        "clientID": "6532622b",
        "envdVersion": version,
        "trafficAccessToken": null,
        "domain": null
    });
    if let Some(t) = token {
        v["envdAccessToken"] = json!(t);
    }
    v
}

fn config(api: &TestServer, envd_url: &str) -> ConnectionConfig {
    ConnectionConfig::default()
        .api_key(KEY)
        .api_url(api.url())
        .sandbox_url(envd_url)
}

#[allow(clippy::expect_used)]
fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    format!("http://{}", l.local_addr().expect("its address"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_run_and_manage_a_sandbox_through_the_api() {
    let envd = Sandbox::local_unisolated().await.unwrap();
    let token = envd.connection().access_token().unwrap().to_owned();
    let version = envd.envd_version().to_string();
    let api = TestServer::start().await;
    api.reply(Reply::json(201, answer("isbx1", &version, Some(&token))));

    let sbx = Sandbox::builder("base")
        .timeout(Duration::from_secs(60))
        .metadata("suite", "test_cloud")
        .env("FOO", "bar")
        .connection(config(&api, envd.url()))
        .create()
        .await
        .unwrap();
    assert_eq!(sbx.id(), "isbx1");
    assert_eq!(sbx.envd_version().to_string(), version);
    let out = sbx
        .commands()
        .run("echo from the created sandbox", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "from the created sandbox\n", "{out:?}");

    api.reply(Reply::json(
        200,
        json!({
            "templateID": "base", "sandboxID": "isbx1", "clientID": "6532622b",
            "startedAt": "2026-12-01T10:00:00Z", "endAt": "2026-12-01T10:01:00Z",
            "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "state": "running",
            "envdVersion": version
        }),
    ));
    let info = sbx.info().await.unwrap();
    assert_eq!(info.end_at, "2026-12-01T10:01:00Z");
    api.reply(Reply::empty(204));
    sbx.set_timeout(Duration::from_secs(120)).await.unwrap();
    api.reply(Reply::json(200, json!([])));
    assert!(sbx.metrics().await.unwrap().is_empty());
    api.reply(Reply::empty(204));
    assert!(sbx.pause().await.unwrap());
    api.reply(Reply::json(201, answer("isbx1", &version, Some(&token))));
    assert!(
        sbx.resume().await.unwrap(),
        "201 = it was paused and is resumed"
    );
    api.reply(Reply::error(404, "sandbox not found"));
    assert!(!sbx.is_running().await.unwrap());
    api.reply(Reply::empty(204));
    sbx.kill().await.unwrap();

    api.assert_contract();
    let rec = api.recorded();
    let create = rec[0].json();
    assert_eq!(
        create,
        json!({
            "templateID": "base", "timeout": 60, "metadata": {"suite": "test_cloud"},
            "envVars": {"FOO": "bar"}, "secure": true, "allow_internet_access": true
        }),
        "the body the Python SDK sends"
    );
    let paths: Vec<String> = rec
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        [
            "POST /sandboxes",
            "GET /sandboxes/isbx1",
            "POST /sandboxes/isbx1/timeout",
            "GET /sandboxes/isbx1/metrics",
            "POST /sandboxes/isbx1/pause",
            "POST /sandboxes/isbx1/connect",
            "GET /sandboxes/isbx1",
            "DELETE /sandboxes/isbx1",
        ]
    );
    assert_eq!(rec[2].json(), json!({"timeout": 120}));
    assert_eq!(
        rec[5].json(),
        json!({"timeout": 300}),
        "resume = connect with 300 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_by_id_reaches_the_same_envd_with_the_returned_token() {
    let envd = Sandbox::local_unisolated().await.unwrap();
    let token = envd.connection().access_token().unwrap().to_owned();
    let version = envd.envd_version().to_string();
    let api = TestServer::start().await;
    api.reply(Reply::json(200, answer("isbx2", &version, Some(&token))));
    let client = e2b::ApiClient::new(config(&api, envd.url())).unwrap();
    let sbx = Sandbox::connect_by_id_with(&client, "isbx2", Duration::from_secs(30))
        .await
        .unwrap();
    let out = sbx
        .commands()
        .run("echo again", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "again\n", "{out:?}");
    assert_eq!(api.recorded()[0].json(), json!({"timeout": 30}));

    // Without the token envd refuses: the token really comes from the API's answer.
    api.reply(Reply::json(200, answer("isbx2", &version, None)));
    let tokenless = Sandbox::connect_by_id_with(&client, "isbx2", Duration::from_secs(30))
        .await
        .unwrap();
    let err = tokenless
        .commands()
        .run("true", CommandOptions::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("access token"), "{err}");

    api.reply(Reply::error(404, "Sandbox nope not found"));
    let err = Sandbox::connect_by_id_with(&client, "nope", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SandboxError::Api(e) if e.is_not_found()),
        "{err:?}"
    );
    api.assert_contract();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_envd_gets_the_teaching_error_before_anything_is_sent() {
    // envd's URL is a closed port: had anything been sent, the error would be a connection
    // error instead of the version gate's.
    let envd_url = closed_port_url();
    let api = TestServer::start().await;
    api.reply(Reply::json(201, answer("iold", "0.2.0", Some("t"))));
    let sbx = Sandbox::builder("old-template")
        .connection(config(&api, &envd_url))
        .create()
        .await
        .unwrap();
    let err = sbx
        .commands()
        .run("true", CommandOptions::new().stdin(false))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("0.3.0") && msg.contains("0.2.0"), "{msg}");

    // Metrics need 0.1.5: refused locally, no API request.
    api.reply(Reply::json(201, answer("iolder", "0.1.2", Some("t"))));
    let older = Sandbox::builder("older")
        .connection(config(&api, &envd_url))
        .create()
        .await
        .unwrap();
    let before = api.recorded().len();
    let err = older.metrics().await.unwrap_err();
    assert!(matches!(err, SandboxError::Template(_)), "{err:?}");
    assert!(err.to_string().contains("0.1.5"), "{err}");
    assert_eq!(api.recorded().len(), before, "no request for a gated call");

    // Below 0.1.0 the SDKs refuse the sandbox and kill it.
    api.reply(Reply::json(201, answer("iancient", "0.0.9", None)));
    api.reply(Reply::empty(204));
    let err = Sandbox::builder("ancient")
        .connection(config(&api, &envd_url))
        .create()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("update the template"), "{err}");
    let rec = api.recorded();
    let last = rec.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("DELETE", "/sandboxes/iancient")
    );
    api.assert_contract();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_calls_on_a_local_sandbox_say_what_they_need() {
    let local = Sandbox::local_unisolated().await.unwrap();
    let err = local.set_timeout(Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(
        err,
        SandboxError::NotFromApi {
            operation: "set_timeout"
        }
    ));
    assert!(err.to_string().contains("Sandbox::create"), "{err}");
    assert!(local.api().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_seam_is_backed_by_the_api_client() {
    let envd = Sandbox::local_unisolated().await.unwrap();
    let token = envd.connection().access_token().unwrap().to_owned();
    let version = envd.envd_version().to_string();
    let api = TestServer::start().await;
    api.reply(Reply::json(201, answer("iseam", &version, Some(&token))));
    let client = e2b::ApiClient::new(config(&api, envd.url())).unwrap();
    let sbx = Sandbox::create_with(&client, "base", e2b::CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(sbx.id(), "iseam");
    let out = sbx
        .commands()
        .run("echo seam", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "seam\n", "{out:?}");
    api.assert_contract();
}

/// Debug mode (`E2B_DEBUG=true`), as in the SDKs: create and connect by id make no API call
/// and need no API key; the sandbox is the envd at the sandbox URL (no token, envd 99.99.99)
/// under the id asked for (`debug_sandbox_id` for create), and killing it sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_mode_makes_no_api_call() {
    // An envd without an access token, as a debug envd runs.
    let envd = e2b_envd::Envd::start(e2b::EnvdConfig::ephemeral())
        .await
        .unwrap();
    let api = TestServer::start().await;
    let debug = ConnectionConfig::default()
        .debug(true)
        .api_url(api.url())
        .sandbox_url(envd.url());

    let sbx = Sandbox::builder("base")
        .connection(debug.clone())
        .create()
        .await
        .unwrap();
    assert_eq!(sbx.id(), "debug_sandbox_id");
    assert_eq!(sbx.envd_version().to_string(), "99.99.99");
    let out = sbx
        .commands()
        .run("echo debug", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "debug\n");

    let client = e2b::api::ApiClient::new(debug).unwrap();
    let other = Sandbox::connect_by_id_with(&client, "sbx-abc", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(other.id(), "sbx-abc");
    assert_eq!(other.connection().sandbox_id(), Some("sbx-abc"));
    let out = other
        .commands()
        .run("echo again", CommandOptions::new())
        .await
        .unwrap();
    assert_eq!(out.stdout, "again\n");
    sbx.kill().await.unwrap();
    other.kill().await.unwrap();
    assert!(
        api.recorded().is_empty(),
        "debug mode called the API: {:?}",
        api.recorded().len()
    );
    envd.shutdown().await;
}
