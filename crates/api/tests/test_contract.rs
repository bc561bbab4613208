//! Contract tests: every request `e2b-api` sends is validated against the vendored OpenAPI
//! document (`openapi/e2b.yml`), and so is every response the loopback server answers with.
//! The responses are shaped as E2B's cloud sends them (from the spec's schemas and field
//! definitions, and the research notes on infra), so they pin the client's behaviour against the
//! real cloud: decoding, status handling, headers, pagination.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use e2b_api::models::{
    LogLevel, LogsDirection, NewSandbox, OrderDirection, SandboxAutoResumeConfig,
    SandboxNetworkConfig, SandboxState,
};
use e2b_api::{ApiError, ConnectionConfig, ListQuery, LogsQuery};
use serde_json::json;
use support::{Reply, TestServer, client};

/// `POST /sandboxes` as E2B's cloud answers it.
fn cloud_sandbox(id: &str) -> serde_json::Value {
    json!({
        "templateID": "rki5dems9wqfm4r03t7g",
        "alias": "base",
        "sandboxID": id,
        "clientID": "6532622b",
        "envdVersion": "0.2.4",
        "envdAccessToken": "9f2c6f0e5b1d4a8c",
        "trafficAccessToken": null,
        "domain": null
    })
}

fn listed(id: &str, started: &str, state: &str) -> serde_json::Value {
    json!({
        "templateID": "rki5dems9wqfm4r03t7g",
        "alias": "base",
        "sandboxID": id,
        "clientID": "6532622b",
        "startedAt": started,
        "endAt": "2026-12-01T10:05:00Z",
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 10240,
        "metadata": {"app": "demo"},
        "state": state,
        "envdVersion": "0.2.4"
    })
}

fn detail(id: &str) -> serde_json::Value {
    json!({
        "templateID": "rki5dems9wqfm4r03t7g",
        "alias": "base",
        "sandboxID": id,
        "clientID": "6532622b",
        "startedAt": "2026-12-01T10:00:00.123456Z",
        "endAt": "2026-12-01T10:05:00.123456Z",
        "envdVersion": "0.2.4",
        "envdAccessToken": "9f2c6f0e5b1d4a8c",
        "allowInternetAccess": null,
        "domain": null,
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 10240,
        "metadata": {"app": "demo"},
        "state": "running",
        "lifecycle": {"autoResume": false, "onTimeout": "kill"}
    })
}

#[tokio::test]
async fn create_sends_a_valid_new_sandbox_and_reads_the_cloud_answer() {
    let server = TestServer::start().await;
    server.reply(Reply::json(201, cloud_sandbox("iabc123")));
    server.reply(Reply::json(201, cloud_sandbox("iabc124")));
    let api = client(&server);

    let mut full = NewSandbox::new("base");
    full.timeout = Some(300);
    full.secure = Some(true);
    full.allow_internet_access = Some(false);
    full.auto_pause = Some(true);
    full.auto_resume = Some(SandboxAutoResumeConfig { enabled: true });
    full.metadata = Some(BTreeMap::from([("app".into(), "demo".into())]));
    full.env_vars = Some(BTreeMap::from([("FOO".into(), "bar".into())]));
    full.network = Some(SandboxNetworkConfig {
        allow_out: Some(vec!["8.8.8.8/32".into()]),
        ..Default::default()
    });
    let sbx = api.create_sandbox(&full).await.unwrap();
    assert_eq!(sbx.sandbox_id, "iabc123");
    assert_eq!(sbx.envd_version, "0.2.4");
    assert_eq!(sbx.envd_access_token.as_deref(), Some("9f2c6f0e5b1d4a8c"));
    assert_eq!(sbx.domain, None);
    assert_eq!(sbx.traffic_access_token, None);

    // The minimal body sends only the template.
    api.create_sandbox(&NewSandbox::new("base")).await.unwrap();

    server.assert_contract();
    let rec = server.recorded();
    assert_eq!(rec[0].header("x-api-key"), Some(support::KEY));
    let body = rec[0].json();
    assert_eq!(body["templateID"], "base");
    assert_eq!(
        body["allow_internet_access"], false,
        "snake_case on the wire: {body}"
    );
    assert_eq!(body["envVars"]["FOO"], "bar");
    assert_eq!(rec[1].json(), json!({"templateID": "base"}));
}

#[tokio::test]
async fn list_follows_x_next_token_over_three_pages() {
    let server = TestServer::start().await;
    server.reply(
        Reply::json(
            200,
            json!([
                listed("sbx3", "2026-12-01T10:00:03Z", "running"),
                listed("sbx2", "2026-12-01T10:00:02Z", "paused")
            ]),
        )
        .header("X-Next-Token", "dG9rZW4x")
        .header("X-Total-Running", "4"),
    );
    server.reply(
        Reply::json(
            200,
            json!([
                listed("sbx1", "2026-12-01T10:00:01Z", "running"),
                listed("sbx0", "2026-12-01T10:00:00Z", "running")
            ]),
        )
        .header("X-Next-Token", "dG9rZW4y"),
    );
    server.reply(Reply::json(
        200,
        json!([listed("sbxa", "2026-12-01T09:00:00Z", "running")]),
    ));
    let api = client(&server);

    let query = ListQuery::new()
        .metadata("a b", "c&d")
        .metadata("app", "demo")
        .state(SandboxState::Running)
        .state(SandboxState::Paused)
        .order(OrderDirection::Desc)
        .started_after("2026-12-01T08:00:00Z")
        .template("base")
        .limit(2);
    let mut pages = api.list(query);
    let first = pages.next_page().await.unwrap().unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(first[1].state, SandboxState::Paused);
    assert!(pages.has_next());
    assert_eq!(pages.next_token(), Some("dG9rZW4x"));
    let rest = pages.collect(None).await.unwrap();
    let ids: Vec<&str> = rest.iter().map(|s| s.sandbox_id.as_str()).collect();
    assert_eq!(ids, ["sbx1", "sbx0", "sbxa"]);

    server.assert_contract();
    let rec = server.recorded();
    assert_eq!(rec.len(), 3);
    assert_eq!(rec[0].query_value("nextToken"), None);
    assert_eq!(rec[1].query_value("nextToken"), Some("dG9rZW4x"));
    assert_eq!(rec[2].query_value("nextToken"), Some("dG9rZW4y"));
    // `state` is one comma-joined value (explode: false), never a repeated key.
    assert_eq!(rec[0].query_value("state"), Some("running,paused"));
    assert_eq!(rec[0].query_value("limit"), Some("2"));
    // metadata: as infra decodes it (query decode → QueryUnescape → split → QueryUnescape).
    let value = rec[0].query_value("metadata").unwrap();
    assert_eq!(value, "a%2520b=c%2526d&app=demo");
    let once: Vec<(String, String)> = url::form_urlencoded::parse(value.as_bytes())
        .into_owned()
        .collect();
    let decoded: Vec<(String, String)> = once
        .iter()
        .map(|(k, v)| {
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .unwrap()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect();
    assert_eq!(
        decoded,
        [
            ("a b".to_owned(), "c&d".to_owned()),
            ("app".to_owned(), "demo".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_single_page_and_an_empty_next_token_end_the_listing() {
    let server = TestServer::start().await;
    server.reply(Reply::json(200, json!([])).header("X-Next-Token", ""));
    let api = client(&server);
    let page = api.list_sandboxes(&ListQuery::new()).await.unwrap();
    assert!(page.sandboxes.is_empty());
    assert_eq!(page.next_token, None);
    assert_eq!(page.total_running, None);
    server.assert_contract();
    assert!(
        server.recorded()[0].raw_query.is_none(),
        "no filters, no query string"
    );
}

#[tokio::test]
async fn info_kill_timeout_connect_pause_metrics_and_logs() {
    let server = TestServer::start().await;
    let api = client(&server);
    server.reply(Reply::json(200, detail("iabc123")));
    let info = api.get_sandbox("iabc123").await.unwrap();
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.memory_mb, 512);
    assert_eq!(info.lifecycle.unwrap().on_timeout.as_str(), "kill");

    server.reply(Reply::empty(204));
    assert!(api.kill_sandbox("iabc123").await.unwrap());
    server.reply(Reply::error(404, "sandbox \"nonexisting\" not found"));
    assert!(
        !api.kill_sandbox("nonexisting").await.unwrap(),
        "404 on kill is false"
    );

    server.reply(Reply::empty(204));
    api.set_timeout("iabc123", Duration::from_millis(1500))
        .await
        .unwrap();

    server.reply(Reply::json(200, cloud_sandbox("iabc123")));
    let c = api
        .connect_sandbox("iabc123", Duration::from_secs(300))
        .await
        .unwrap();
    assert!(!c.resumed);
    server.reply(Reply::json(201, cloud_sandbox("iabc123")));
    let c = api
        .resume_sandbox("iabc123", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(c.resumed);
    assert_eq!(
        c.sandbox.envd_access_token.as_deref(),
        Some("9f2c6f0e5b1d4a8c")
    );

    server.reply(Reply::empty(204));
    assert!(api.pause_sandbox("iabc123", true).await.unwrap());
    server.reply(Reply::error(409, "Sandbox iabc123 is already paused"));
    assert!(
        !api.pause_sandbox("iabc123", false).await.unwrap(),
        "409 on pause is false"
    );

    server.reply(Reply::json(
        200,
        json!([{
            "timestamp": "2026-12-01T10:00:05Z", "timestampUnix": 1796119205,
            "cpuCount": 2, "cpuUsedPct": 1.5, "memUsed": 40000000, "memTotal": 512000000,
            "memCache": 1000, "diskUsed": 100000, "diskTotal": 10000000000i64
        }]),
    ));
    let m = api
        .sandbox_metrics("iabc123", Some(1796119200), Some(1796119300))
        .await
        .unwrap();
    assert_eq!(m[0].cpu_count, 2);
    server.reply(Reply::json(200, json!([])));
    assert!(
        api.sandbox_metrics("iabc123", None, None)
            .await
            .unwrap()
            .is_empty()
    );

    server.reply(Reply::json(200, json!({"sandboxes": {}})));
    api.sandboxes_metrics(&["iabc123", "idef456"])
        .await
        .unwrap();

    server.reply(Reply::json(
        200,
        json!({"logs": [{"timestamp": "2026-12-01T10:00:05Z", "level": "info", "message": "started", "fields": {"logger": "envd"}}]}),
    ));
    let q = LogsQuery::new()
        .cursor(1796119200000)
        .limit(10)
        .direction(LogsDirection::Forward)
        .level(LogLevel::Info)
        .search("start");
    let logs = api.sandbox_logs("iabc123", &q).await.unwrap();
    assert_eq!(logs.logs[0].message, "started");

    server.reply(Reply::json(200, json!({"logs": [{"timestamp": "2026-12-01T10:00:05Z", "line": "{\"level\":\"info\"}"}], "logEntries": []})));
    api.sandbox_logs_v1("iabc123", Some(0), Some(1000))
        .await
        .unwrap();

    server.assert_contract();
    let rec = server.recorded();
    let timeout = rec.iter().find(|r| r.path.ends_with("/timeout")).unwrap();
    assert_eq!(
        timeout.json(),
        json!({"timeout": 2}),
        "1.5 s rounds up as in the JS SDK"
    );
    let pauses: Vec<_> = rec.iter().filter(|r| r.path.ends_with("/pause")).collect();
    assert_eq!(pauses[0].json(), json!({"memory": true}));
    assert_eq!(pauses[1].json(), json!({"memory": false}));
    let batch = rec.iter().find(|r| r.path == "/sandboxes/metrics").unwrap();
    assert_eq!(batch.query_value("sandbox_ids"), Some("iabc123,idef456"));
}

#[tokio::test]
async fn each_error_status_maps_to_its_kind_with_advice() {
    let server = TestServer::start().await;
    let api = client(&server);
    type IsKind = fn(&ApiError) -> bool;
    let cases: Vec<(u16, IsKind, &str)> = vec![
        (
            400,
            |e| matches!(e, ApiError::InvalidArgument { .. }),
            "Fix the argument",
        ),
        (
            401,
            |e| matches!(e, ApiError::Authentication { .. }),
            "E2B_API_KEY",
        ),
        (
            404,
            |e| matches!(e, ApiError::NotFound { .. }),
            "Check the sandbox id",
        ),
        (409, |e| matches!(e, ApiError::Conflict { .. }), "retry"),
        (
            429,
            |e| matches!(e, ApiError::RateLimit { .. }),
            "try again later",
        ),
        (
            500,
            |e| matches!(e, ApiError::Status { status: 500, .. }),
            "500",
        ),
    ];
    for (status, is_kind, advice) in cases {
        server.reply(Reply::error(status, "the server's words"));
        let err = api
            .connect_sandbox("iabc123", Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(is_kind(&err), "{status} → {err:?}");
        assert_eq!(err.status(), Some(status));
        let msg = err.to_string();
        assert!(
            msg.contains("the server's words") && msg.contains(advice),
            "{status}: {msg}"
        );
    }
    // error_code is kept; a body that is no Error is reported raw.
    server.reply(Reply::json(
        503,
        json!({"code": 503, "message": "no capacity", "error_code": "sandbox_capacity_unavailable"}),
    ));
    match api
        .create_sandbox(&NewSandbox::new("base"))
        .await
        .unwrap_err()
    {
        ApiError::Status {
            status: 503,
            error_code,
            ..
        } => {
            assert_eq!(error_code.as_deref(), Some("sandbox_capacity_unavailable"))
        }
        other => panic!("503 → {other:?}"),
    }
    server.assert_contract();
    server.reply(Reply {
        status: 502,
        headers: vec![],
        body: b"<html>bad gateway</html>".to_vec(),
        delay: Duration::ZERO,
    });
    let err = api.get_sandbox("iabc123").await.unwrap_err();
    assert!(
        err.to_string().contains("502: <html>bad gateway</html>"),
        "{err}"
    );
    // A success body that does not match the spec is a decode error, not a panic.
    server.reply(Reply::json(200, json!({"sandboxID": "x"})));
    let err = api.get_sandbox("iabc123").await.unwrap_err();
    assert!(
        matches!(err, ApiError::Decode { status: 200, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn timeouts_refused_connections_and_bad_keys_are_typed() {
    let server = TestServer::start().await;
    server.reply(Reply::json(200, detail("iabc123")).delay(Duration::from_secs(5)));
    let config = ConnectionConfig::default()
        .api_key(support::KEY)
        .api_url(server.url())
        .request_timeout(Duration::from_millis(300));
    let api = e2b_api::ApiClient::new(config).unwrap();
    let err = api.get_sandbox("iabc123").await.unwrap_err();
    assert!(matches!(err, ApiError::Timeout(_)), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");

    // Nothing listens on a port we just closed.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let api = e2b_api::ApiClient::new(
        ConnectionConfig::default()
            .api_key(support::KEY)
            .api_url(format!("http://{closed}")),
    )
    .unwrap();
    let err = api.get_sandbox("iabc123").await.unwrap_err();
    assert!(matches!(err, ApiError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("E2B_API_URL"), "{err}");

    // A key that is not e2b_<hex> never leaves the process; none at all neither.
    let quiet = TestServer::start().await;
    let bad = e2b_api::ApiClient::new(
        ConnectionConfig::default()
            .api_key("sk-not-e2b")
            .api_url(quiet.url()),
    )
    .unwrap();
    assert!(matches!(
        bad.get_sandbox("x").await.unwrap_err(),
        ApiError::InvalidApiKey
    ));
    let none = e2b_api::ApiClient::new(ConnectionConfig::default().api_url(quiet.url())).unwrap();
    let err = none.kill_sandbox("x").await.unwrap_err();
    assert!(matches!(err, ApiError::MissingApiKey), "{err:?}");
    assert!(err.to_string().contains("E2B_API_KEY"));
    assert!(
        quiet.recorded().is_empty(),
        "nothing may be sent without a valid key"
    );
    // ... unless the check is turned off, as with E2B_VALIDATE_API_KEY=false.
    quiet.reply(Reply::json(200, detail("x")));
    let unchecked = e2b_api::ApiClient::new(
        ConnectionConfig::default()
            .api_key("sk-not-e2b")
            .api_url(quiet.url())
            .validate_api_key(false),
    )
    .unwrap();
    unchecked.get_sandbox("x").await.unwrap();
    assert_eq!(quiet.recorded()[0].header("x-api-key"), Some("sk-not-e2b"));
}

#[tokio::test]
async fn sandbox_ids_are_path_segments() {
    let server = TestServer::start().await;
    server.reply(Reply::error(400, "Invalid sandbox ID"));
    let api = client(&server);
    let err = api.get_sandbox("../teams").await.unwrap_err();
    assert!(matches!(err, ApiError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(server.recorded()[0].path, "/sandboxes/..%2Fteams");
}

#[test]
fn the_contract_checker_catches_what_it_should() {
    // The checker itself must be able to fail: a misspelled field, a repeated `state`, an
    // unknown path and a body missing a required field are all refused.
    let rec = |method: &str, path: &str, query: &[(&str, &str)], body: serde_json::Value| {
        support::Recorded {
            method: method.into(),
            path: path.into(),
            query: query
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            raw_query: None,
            headers: vec![
                ("x-api-key".into(), support::KEY.into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: if body.is_null() {
                vec![]
            } else {
                serde_json::to_vec(&body).unwrap()
            },
            status: 201,
            response_body: serde_json::to_vec(&cloud_sandbox("i1")).unwrap(),
        }
    };
    let ok = rec("POST", "/sandboxes", &[], json!({"templateID": "base"}));
    support::check_contract(&ok).unwrap();
    let camel = rec(
        "POST",
        "/sandboxes",
        &[],
        json!({"templateID": "base", "allowInternetAccess": true}),
    );
    assert!(support::check_contract(&camel).is_err());
    let missing = rec("POST", "/sandboxes", &[], json!({"timeout": 5}));
    assert!(support::check_contract(&missing).is_err());
    let mut list = rec(
        "GET",
        "/v2/sandboxes",
        &[("state", "running"), ("state", "paused")],
        json!(null),
    );
    list.status = 200;
    list.response_body = b"[]".to_vec();
    assert!(
        support::check_contract(&list)
            .unwrap_err()
            .contains("repeated")
    );
    let mut bad_state = rec(
        "GET",
        "/v2/sandboxes",
        &[("state", "running,sleeping")],
        json!(null),
    );
    bad_state.status = 200;
    bad_state.response_body = b"[]".to_vec();
    assert!(support::check_contract(&bad_state).is_err());
    assert!(
        support::check_contract(&rec("POST", "/sandboxes/x/explode", &[], json!(null))).is_err()
    );
    // A response that misses a required field fails too.
    let mut short = ok.clone();
    short.response_body = serde_json::to_vec(&json!({"sandboxID": "x"})).unwrap();
    assert!(support::check_contract(&short).is_err());
    // Every recorded cloud response used above satisfies its schema.
    support::validate_named("Sandbox", &cloud_sandbox("i1")).unwrap();
    support::validate_named("SandboxDetail", &detail("i1")).unwrap();
    support::validate_named(
        "ListedSandbox",
        &listed("i1", "2026-12-01T10:00:00Z", "paused"),
    )
    .unwrap();
    assert!(
        support::validate_named("ListedSandbox", &listed("i1", "yesterday", "paused")).is_err()
    );
}
