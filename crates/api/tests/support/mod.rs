//! Contract-test support: the vendored spec as JSON Schema validators, and a loopback HTTP
//! server that records every request and answers with scripted responses.

#![allow(clippy::expect_used, clippy::unwrap_used, dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The vendored spec, parsed.
pub(crate) fn spec() -> &'static Value {
    static SPEC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../openapi/e2b.yml");
        let text = std::fs::read_to_string(path).expect("read openapi/e2b.yml");
        serde_yaml_ng::from_str(&text).expect("openapi/e2b.yml parses")
    })
}

/// OpenAPI 3.0 → JSON Schema: `nullable: true` adds `null` to `type`; objects with
/// `properties` and no `additionalProperties` get `additionalProperties: false`, so a misspelled
/// field fails the contract (stricter than the spec, which allows extra fields).
fn to_json_schema(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, child) in map {
                if matches!(
                    k.as_str(),
                    "nullable" | "deprecated" | "x-enum-varnames" | "example"
                ) {
                    continue;
                }
                out.insert(k.clone(), to_json_schema(child));
            }
            if map.get("nullable").and_then(Value::as_bool) == Some(true) {
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".into(), json!([t, "null"]));
                    }
                    None if out.contains_key("$ref") => {
                        let inner = Value::Object(std::mem::take(&mut out));
                        out.insert("anyOf".into(), json!([inner, {"type": "null"}]));
                    }
                    _ => {}
                }
                if let Some(Value::Array(e)) = out.get_mut("enum") {
                    e.push(Value::Null);
                }
            }
            if out.contains_key("properties") && !out.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

/// Validates `instance` against an OpenAPI schema object of the spec (inline or `$ref`).
pub(crate) fn validate(schema: &Value, instance: &Value) -> Result<(), String> {
    let components = to_json_schema(&spec()["components"]);
    let mut root = to_json_schema(schema);
    let root_obj = root.as_object_mut().expect("a schema is an object");
    if root_obj.contains_key("$ref") {
        // Draft 7 ignores siblings of `$ref`: wrap it.
        let r = root_obj.remove("$ref").unwrap();
        root_obj.insert("allOf".into(), json!([{"$ref": r}]));
    }
    root_obj.insert("components".into(), components);
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(true)
        .build(&root)
        .map_err(|e| format!("schema does not compile: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Validates against `#/components/schemas/<name>`.
pub(crate) fn validate_named(name: &str, instance: &Value) -> Result<(), String> {
    validate(
        &json!({"$ref": format!("#/components/schemas/{name}")}),
        instance,
    )
}

fn resolve(v: &Value) -> &Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let mut cur = spec();
            for part in r.trim_start_matches("#/").split('/') {
                cur = &cur[part];
            }
            cur
        }
        None => v,
    }
}

/// The spec's operation for a method and a concrete path, with the path template.
pub(crate) fn operation(method: &str, path: &str) -> Option<(&'static str, &'static Value)> {
    let paths = spec()["paths"].as_object()?;
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut best: Option<(&'static str, &'static Value, usize)> = None;
    for (template, item) in paths {
        let tsegs: Vec<&str> = template.split('/').collect();
        if tsegs.len() != segs.len() {
            continue;
        }
        let mut literal = 0;
        let ok = tsegs.iter().zip(&segs).all(|(t, s)| {
            if t.starts_with('{') {
                !s.is_empty()
            } else {
                literal += 1;
                t == s
            }
        });
        if !ok {
            continue;
        }
        if let Some(op) = item.get(method.to_ascii_lowercase()) {
            // Prefer the most literal match (`/sandboxes/metrics` over `/sandboxes/{id}`).
            if best.is_none_or(|(_, _, l)| literal > l) {
                best = Some((template.as_str(), op, literal));
            }
        }
    }
    best.map(|(t, op, _)| (t, op))
}

/// One request the test server received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub raw_query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// What the server answered.
    pub status: u16,
    pub response_body: Vec<u8>,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// Checks a recorded request and its response against the spec: the operation exists, every
/// query parameter is declared and valid, the body matches the request schema, the API key
/// header is there, and the response matches the schema for its status.
pub(crate) fn check_contract(r: &Recorded) -> Result<(), String> {
    let (template, op) = operation(&r.method, &r.path)
        .ok_or_else(|| format!("{} {} is not an operation of the spec", r.method, r.path))?;
    let ctx = format!("{} {template}", r.method);
    if r.header("x-api-key").is_none() {
        return Err(format!("{ctx}: no X-API-Key header"));
    }
    let params: Vec<&Value> = op
        .get("parameters")
        .and_then(Value::as_array)
        .map(|ps| ps.iter().map(resolve).collect())
        .unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in &r.query {
        let p = params
            .iter()
            .find(|p| p["in"] == "query" && p["name"] == name.as_str())
            .ok_or_else(|| format!("{ctx}: query parameter {name:?} is not in the spec"))?;
        if !seen.insert(name.clone()) {
            return Err(format!("{ctx}: query parameter {name:?} repeated"));
        }
        let schema = resolve(&p["schema"]);
        let instance = match schema.get("type").and_then(Value::as_str) {
            Some("array") => {
                let explode = p.get("explode").and_then(Value::as_bool).unwrap_or(true);
                if explode {
                    return Err(format!("{ctx}: exploded arrays are not expected"));
                }
                Value::Array(value.split(',').map(|s| Value::String(s.into())).collect())
            }
            Some("integer") => value
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{ctx}: {name}={value:?} is not an integer"))?,
            _ => Value::String(value.clone()),
        };
        validate(&p["schema"], &instance).map_err(|e| format!("{ctx}: query {name}: {e}"))?;
    }
    for p in &params {
        if p["required"] == true && p["in"] == "query" {
            let name = p["name"].as_str().unwrap_or_default();
            if !seen.contains(name) {
                return Err(format!("{ctx}: required query parameter {name} missing"));
            }
        }
    }
    match op.get("requestBody").map(resolve) {
        Some(rb) => {
            if r.body.is_empty() {
                if rb["required"] == true {
                    return Err(format!("{ctx}: the request body is required"));
                }
            } else {
                let ct = r.header("content-type").unwrap_or_default();
                if !ct.starts_with("application/json") {
                    return Err(format!(
                        "{ctx}: content-type {ct:?}, expected application/json"
                    ));
                }
                let body: Value = serde_json::from_slice(&r.body)
                    .map_err(|e| format!("{ctx}: the body is not JSON: {e}"))?;
                validate(&rb["content"]["application/json"]["schema"], &body)
                    .map_err(|e| format!("{ctx}: request body: {e}"))?;
            }
        }
        None if !r.body.is_empty() => {
            return Err(format!("{ctx}: a body on an operation without one"));
        }
        None => {}
    }
    // A status the operation does not list (429 from the rate limiter, 502 from the proxy)
    // must still be one of the spec's shared responses (`components.responses`).
    let status = r.status.to_string();
    let response = op["responses"]
        .get(&status)
        .or_else(|| spec()["components"]["responses"].get(&status))
        .map(resolve)
        .ok_or_else(|| format!("{ctx}: status {} is not a documented response", r.status))?;
    match response.get("content") {
        Some(content) => {
            let body: Value = serde_json::from_slice(&r.response_body)
                .map_err(|e| format!("{ctx}: response {} is not JSON: {e}", r.status))?;
            validate(&content["application/json"]["schema"], &body)
                .map_err(|e| format!("{ctx}: response {}: {e}", r.status))?;
        }
        None if !r.response_body.is_empty() => {
            return Err(format!("{ctx}: response {} should have no body", r.status));
        }
        None => {}
    }
    Ok(())
}

/// A scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub delay: Duration,
}

impl Reply {
    pub(crate) fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(&body).unwrap(),
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn empty(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn error(status: u16, message: &str) -> Self {
        Self::json(status, json!({"code": status, "message": message}))
    }

    pub(crate) fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub(crate) fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    recorded: Vec<Recorded>,
}

/// A loopback HTTP server that answers the scripted replies in order and records requests.
pub(crate) struct TestServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    pub(crate) async fn start() -> Self {
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let app = axum::Router::new().fallback(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: axum::http::HeaderMap,
                  body: axum::body::Bytes| {
                let st = st.clone();
                async move {
                    let reply = st.lock().unwrap().replies.pop_front().unwrap_or_else(|| {
                        Reply::error(500, "the test server has no scripted reply left")
                    });
                    let query: Vec<(String, String)> = uri
                        .query()
                        .map(|q| {
                            url::form_urlencoded::parse(q.as_bytes())
                                .into_owned()
                                .collect()
                        })
                        .unwrap_or_default();
                    let rec = Recorded {
                        method: method.to_string(),
                        path: uri.path().to_owned(),
                        query,
                        raw_query: uri.query().map(str::to_owned),
                        headers: headers
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                            .collect(),
                        body: body.to_vec(),
                        status: reply.status,
                        response_body: reply.body.clone(),
                    };
                    st.lock().unwrap().recorded.push(rec);
                    if !reply.delay.is_zero() {
                        tokio::time::sleep(reply.delay).await;
                    }
                    let mut resp = axum::response::Response::builder().status(reply.status);
                    for (k, v) in &reply.headers {
                        resp = resp.header(k, v);
                    }
                    resp.body(axum::body::Body::from(reply.body)).unwrap()
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state, task }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn reply(&self, r: Reply) -> &Self {
        self.state.lock().unwrap().replies.push_back(r);
        self
    }

    pub(crate) fn recorded(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().recorded.clone()
    }

    /// Every recorded request and response must satisfy the spec.
    pub(crate) fn assert_contract(&self) {
        let recorded = self.recorded();
        assert!(!recorded.is_empty(), "no request reached the test server");
        let failures: Vec<String> = recorded
            .iter()
            .filter_map(|r| check_contract(r).err())
            .collect();
        assert!(
            failures.is_empty(),
            "contract violations:\n{}",
            failures.join("\n")
        );
    }
}

/// A valid-looking API key.
pub(crate) const KEY: &str = "e2b_0123456789abcdef";

/// A client for the test server.
pub(crate) fn client(server: &TestServer) -> e2b_api::ApiClient {
    e2b_api::ApiClient::new(
        e2b_api::ConnectionConfig::default()
            .api_key(KEY)
            .api_url(server.url()),
    )
    .unwrap()
}
