//! The API port: E2B's sandbox endpoints (`openapi/e2b.yml`), authenticated with `X-API-Key`.

// Helpers return the error response itself; they run once per request, off any hot loop.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post, put};
use base64::Engine as _;
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq as _;

use crate::sandboxes::{self, Failure, Registry, Sandbox, View};
use crate::util;
use crate::wire;

/// Shared state of the API handlers.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) registry: Arc<Registry>,
    pub(crate) api_key: Arc<str>,
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    let text = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json(
        status,
        &wire::ApiError {
            code: i32::from(status.as_u16()),
            error_code: None,
            message: message.into(),
        },
    )
}

fn failure(f: Failure) -> Response {
    error(f.status, f.message)
}

impl From<Failure> for Response {
    fn from(f: Failure) -> Self {
        failure(f)
    }
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// Parses a JSON body; a missing or malformed one is a 400 naming what is wrong.
fn body<T: DeserializeOwned>(bytes: &Bytes, what: &str) -> Result<T, Response> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("request body is missing: send a JSON {what}"),
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid {what} body: {e}")))
}

/// A body that may be left out (`T::default()` then).
fn optional_body<T: DeserializeOwned + Default>(bytes: &Bytes, what: &str) -> Result<T, Response> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        body(bytes, what)
    }
}

/// The answer of a connect: 201 when it resumed a paused sandbox, else 200.
fn connected(api: &Api, (s, resumed): (Arc<Sandbox>, bool)) -> Answer {
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json(status, &s.wire(&api.registry.settings)))
}

impl Api {
    /// The sandbox `id`, or E2B's 404.
    fn sandbox(&self, id: &str) -> Result<Arc<Sandbox>, Failure> {
        self.registry.get(id).ok_or_else(|| Failure::not_found(id))
    }

    /// The sandboxes `keep` accepts, each with its state now, in E2B's list order: startedAt
    /// descending, then id ascending.
    fn newest_first(&self, keep: impl Fn(&Sandbox, &View) -> bool) -> Vec<(Arc<Sandbox>, View)> {
        let mut items: Vec<_> = self
            .registry
            .all()
            .into_iter()
            .map(|s| {
                let v = s.view();
                (s, v)
            })
            .filter(|(s, v)| keep(s, v))
            .collect();
        items.sort_by(|a, b| {
            b.1.started_at
                .cmp(&a.1.started_at)
                .then(a.0.id.cmp(&b.0.id))
        });
        items
    }
}

/// Whether the sandbox's metadata has every `(key, value)` of a list filter.
fn metadata_matches(s: &Sandbox, filter: &[(String, String)]) -> bool {
    filter.iter().all(|(k, val)| s.metadata.get(k) == Some(val))
}

/// The query string's `(name, value)` pairs, decoded: a malformed one is a 400.
struct QueryPairs(Vec<(String, String)>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for QueryPairs {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut http::request::Parts, _: &S) -> Result<Self, Response> {
        util::query_pairs(parts.uri.query())
            .map(Self)
            .ok_or_else(|| error(StatusCode::BAD_REQUEST, "malformed query string"))
    }
}

/// A handler's answer: `Err` is an error response (E2B's error body) returned early with `?`.
type Answer = Result<Response, Response>;

/// The `{id}` of a sandbox route, checked: a malformed id is a 400 before any handler runs.
struct SandboxId(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for SandboxId {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &S,
    ) -> Result<Self, Response> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| e.into_response())?;
        if util::valid_id(&id) {
            Ok(Self(id))
        } else {
            Err(error(
                StatusCode::BAD_REQUEST,
                format!("Invalid sandbox ID: {id:?} (expected lowercase letters and digits)"),
            ))
        }
    }
}

/// The API router.
pub(crate) fn router(api: Api) -> Router {
    let authed = Router::new()
        .route("/sandboxes", post(create).get(list_v1))
        .route("/v2/sandboxes", get(list_v2).post(create_v2))
        .route("/sandboxes/metrics", get(batch_metrics))
        .route("/sandboxes/{id}", get(info).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/network", put(update_network))
        .route("/sandboxes/{id}/metrics", get(metrics))
        .route("/sandboxes/{id}/logs", get(logs_v1))
        .route("/v2/sandboxes/{id}/logs", get(logs_v2))
        .route("/v2/sandboxes/{id}/connect", post(connect_v2))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(api.clone(), auth));
    Router::new()
        .route("/health", get(health))
        .merge(authed)
        .with_state(api)
}

/// `GET /health`: 204 and no body, as the spec says.
async fn health() -> Response {
    no_content()
}

async fn not_found(method: http::Method, uri: http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "e2b serve has no endpoint {method} {}: it serves E2B's sandbox lifecycle (create, \
             list, info, kill, timeout, connect, pause, resume, metrics, logs), not templates, \
             snapshots, forks or teams",
            uri.path()
        ),
    )
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "this method is not allowed on this endpoint",
    )
}

async fn auth(State(api): State<Api>, req: Request, next: Next) -> Response {
    let given = req.headers().get("x-api-key").map(|v| v.as_bytes());
    match given {
        None => error(
            StatusCode::UNAUTHORIZED,
            "missing X-API-Key header: set E2B_API_KEY to the key e2b serve printed",
        ),
        Some(k) if !bool::from(k.ct_eq(api.api_key.as_bytes())) => error(
            StatusCode::UNAUTHORIZED,
            "Invalid API key: use the key e2b serve printed at start (E2B_API_KEY)",
        ),
        Some(_) => next.run(req).await,
    }
}

async fn create(State(api): State<Api>, bytes: Bytes) -> Answer {
    let s = api.registry.create(body(&bytes, "NewSandbox")?).await?;
    Ok(json(StatusCode::CREATED, &s.wire(&api.registry.settings)))
}

/// `POST /v2/sandboxes` (`NewSandboxV2`, what the SDKs from 2.6x call): always secured, and an
/// `Idempotency-Key` repeated by a retry answers with the sandbox the first request created.
async fn create_v2(State(api): State<Api>, headers: http::HeaderMap, bytes: Bytes) -> Answer {
    let mut req: wire::NewSandbox = body(&bytes, "NewSandboxV2")?;
    req.secure = Some(true);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 256)
        .map(str::to_owned);
    if let Some(s) = key
        .as_deref()
        .and_then(|k| api.registry.by_idempotency_key(k))
    {
        return Ok(json(StatusCode::CREATED, &s.wire(&api.registry.settings)));
    }
    let s = api.registry.create(req).await?;
    if let Some(k) = key {
        api.registry.remember_idempotency_key(k, &s.id);
    }
    Ok(json(StatusCode::CREATED, &s.wire(&api.registry.settings)))
}

/// `POST /v2/sandboxes/{id}/connect`: the body is optional, an omitted timeout is 300 s.
async fn connect_v2(State(api): State<Api>, SandboxId(id): SandboxId, bytes: Bytes) -> Answer {
    #[derive(serde::Deserialize, Default)]
    struct ConnectV2 {
        timeout: Option<i32>,
    }
    let req: ConnectV2 = optional_body(&bytes, "ConnectSandboxV2")?;
    connected(&api, api.registry.connect(&id, req.timeout.unwrap_or(300))?)
}

async fn info(State(api): State<Api>, SandboxId(id): SandboxId) -> Answer {
    let s = api.sandbox(&id)?;
    Ok(json(StatusCode::OK, &s.detail(&api.registry.settings)))
}

async fn kill(State(api): State<Api>, SandboxId(id): SandboxId) -> Answer {
    if api.registry.kill(&id).await {
        Ok(no_content())
    } else {
        Err(Failure::not_found(&id).into())
    }
}

async fn set_timeout(State(api): State<Api>, SandboxId(id): SandboxId, bytes: Bytes) -> Answer {
    let req: wire::SandboxTimeoutRequest = body(&bytes, "SandboxTimeoutRequest")?;
    api.registry.set_timeout(&id, req.timeout)?;
    Ok(no_content())
}

/// The longest refresh the spec allows (`SandboxRefreshRequest.duration`, one hour).
const MAX_REFRESH_SECS: i32 = 3600;

async fn refresh(State(api): State<Api>, SandboxId(id): SandboxId, bytes: Bytes) -> Answer {
    #[derive(serde::Deserialize, Default)]
    struct Refresh {
        duration: Option<i32>,
    }
    let req: Refresh = optional_body(&bytes, "SandboxRefreshRequest")?;
    let duration = req.duration.unwrap_or(15);
    if !(0..=MAX_REFRESH_SECS).contains(&duration) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("duration must be 0 to {MAX_REFRESH_SECS} seconds, not {duration}"),
        ));
    }
    api.registry.refresh(&id, duration)?;
    Ok(no_content())
}

async fn connect(State(api): State<Api>, SandboxId(id): SandboxId, bytes: Bytes) -> Answer {
    let req: wire::ConnectSandbox = body(&bytes, "ConnectSandbox")?;
    connected(&api, api.registry.connect(&id, req.timeout)?)
}

async fn resume(State(api): State<Api>, SandboxId(id): SandboxId, bytes: Bytes) -> Answer {
    let req: wire::ResumedSandbox = optional_body(&bytes, "ResumedSandbox")?;
    let s = api.registry.resume(&id, req.timeout.unwrap_or(15))?;
    Ok(json(StatusCode::CREATED, &s.wire(&api.registry.settings)))
}

/// `PUT /sandboxes/{id}/network` (the SDKs' `update_network`): egress rules cannot be changed
/// here, so an existing sandbox gets a 400 that says so (never a silent 204).
async fn update_network(State(api): State<Api>, SandboxId(id): SandboxId) -> Answer {
    api.sandbox(&id)?;
    Err(error(
        StatusCode::BAD_REQUEST,
        "e2b serve cannot change a sandbox's egress rules: create it with \
         allow_internet_access=false for no internet, or use E2B's cloud",
    ))
}

async fn pause(State(api): State<Api>, SandboxId(id): SandboxId, bytes: Bytes) -> Answer {
    // The body is optional and checked, but pausing has no options here.
    let _: wire::SandboxPauseRequest = optional_body(&bytes, "SandboxPauseRequest")?;
    api.registry.pause(&id)?;
    Ok(no_content())
}

fn int_param(pairs: &[(String, String)], name: &str) -> Result<Option<i64>, Response> {
    match pairs.iter().rev().find(|(k, _)| k == name) {
        None => Ok(None),
        Some((_, v)) => v.parse::<i64>().map(Some).map_err(|_| {
            error(
                StatusCode::BAD_REQUEST,
                format!("query parameter {name} must be an integer, not {v:?}"),
            )
        }),
    }
}

async fn metrics(
    State(api): State<Api>,
    SandboxId(id): SandboxId,
    QueryPairs(p): QueryPairs,
) -> Answer {
    let start = int_param(&p, "start")?;
    let end = int_param(&p, "end")?;
    if let Some((name, v)) = [("start", start), ("end", end)]
        .into_iter()
        .find_map(|(n, v)| v.filter(|v| *v < 0).map(|v| (n, v)))
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("{name} must be unix seconds (0 or more), not {v}"),
        ));
    }
    let s = api.sandbox(&id)?;
    Ok(json(StatusCode::OK, &s.metrics(start, end)))
}

async fn batch_metrics(State(api): State<Api>, QueryPairs(p): QueryPairs) -> Answer {
    let ids: Vec<String> = p
        .iter()
        .filter(|(k, _)| k == "sandbox_ids")
        .flat_map(|(_, v)| v.split(',').map(str::to_owned))
        .filter(|s| !s.is_empty())
        .collect();
    if ids.is_empty() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "sandbox_ids is required: a comma-separated list of up to 100 sandbox ids",
        ));
    }
    if ids.len() > 100 {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Too many sandboxes requested, maximum is 100",
        ));
    }
    let mut sandboxes = std::collections::BTreeMap::new();
    for id in ids {
        if let Some(m) = api.registry.get(&id).and_then(|s| s.latest_metric()) {
            sandboxes.insert(id, m);
        }
    }
    Ok(json(
        StatusCode::OK,
        &wire::SandboxesWithMetrics { sandboxes },
    ))
}

fn log_line(level: wire::LogLevel, message: &str, id: &str) -> String {
    serde_json::json!({
        "level": level.as_str(),
        "logger": "e2b-serve",
        "message": message,
        "sandboxID": id,
    })
    .to_string()
}

async fn logs_v1(
    State(api): State<Api>,
    SandboxId(id): SandboxId,
    QueryPairs(p): QueryPairs,
) -> Answer {
    let start = int_param(&p, "start")?;
    let limit = int_param(&p, "limit")?.unwrap_or(1000).clamp(0, 1000) as usize;
    let s = api.sandbox(&id)?;
    let entries = s.logs(start, limit);
    let logs: Vec<wire::SandboxLog> = entries
        .iter()
        .map(|(at, level, msg)| wire::SandboxLog {
            timestamp: util::rfc3339(*at),
            line: log_line(*level, msg, &id),
        })
        .collect();
    let log_entries: Vec<wire::SandboxLogEntry> = entries.into_iter().map(log_entry).collect();
    Ok(json(
        StatusCode::OK,
        &wire::SandboxLogs { logs, log_entries },
    ))
}

/// A log line of the sandbox as the structured entry of both log endpoints.
fn log_entry(
    (at, level, message): (time::OffsetDateTime, wire::LogLevel, String),
) -> wire::SandboxLogEntry {
    wire::SandboxLogEntry {
        timestamp: util::rfc3339(at),
        level,
        message,
        fields: Default::default(),
    }
}

fn level_rank(level: wire::LogLevel) -> u8 {
    match level {
        wire::LogLevel::Debug => 0,
        wire::LogLevel::Info => 1,
        wire::LogLevel::Warn => 2,
        wire::LogLevel::Error => 3,
    }
}

async fn logs_v2(
    State(api): State<Api>,
    SandboxId(id): SandboxId,
    QueryPairs(p): QueryPairs,
) -> Answer {
    let cursor = int_param(&p, "cursor")?;
    let limit = int_param(&p, "limit")?.unwrap_or(1000);
    if !(0..=1000).contains(&limit) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "limit must be between 0 and 1000",
        ));
    }
    let get = |name: &str| {
        p.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let forward = match get("direction") {
        None | Some("backward") => false,
        Some("forward") => true,
        Some(d) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("direction must be forward or backward, not {d:?}"),
            ));
        }
    };
    let min_level = match get("level") {
        None => 0,
        Some("debug") => level_rank(wire::LogLevel::Debug),
        Some("info") => level_rank(wire::LogLevel::Info),
        Some("warn") => level_rank(wire::LogLevel::Warn),
        Some("error") => level_rank(wire::LogLevel::Error),
        Some(l) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("level must be debug, info, warn or error, not {l:?}"),
            ));
        }
    };
    let search = get("search").unwrap_or("");
    let s = api.sandbox(&id)?;
    let mut entries: Vec<_> = s
        .logs(None, usize::MAX)
        .into_iter()
        .filter(|(_, level, msg)| level_rank(*level) >= min_level && msg.contains(search))
        .filter(|(at, _, _)| {
            let ms = (at.unix_timestamp_nanos() / 1_000_000) as i64;
            match cursor {
                None => true,
                Some(c) if forward => ms >= c,
                Some(c) => ms <= c,
            }
        })
        .collect();
    if !forward {
        entries.reverse();
    }
    let logs: Vec<wire::SandboxLogEntry> = entries
        .into_iter()
        .take(limit as usize)
        .map(log_entry)
        .collect();
    Ok(json(StatusCode::OK, &wire::SandboxLogsV2Response { logs }))
}

/// Deprecated `GET /sandboxes`: running sandboxes, optional metadata filter.
async fn list_v1(State(api): State<Api>, QueryPairs(p): QueryPairs) -> Answer {
    let filter = match p.iter().find(|(k, _)| k == "metadata") {
        Some((_, v)) => parse_metadata_filter(v)?,
        None => Vec::new(),
    };
    let items = api
        .newest_first(|s, v| v.state == sandboxes::State::Running && metadata_matches(s, &filter));
    let out: Vec<_> = items.iter().map(|(s, v)| s.listed(v)).collect();
    Ok(json(StatusCode::OK, &out))
}

/// infra's `parseFilters`: unescape the whole value, split on `&`, each pair on `=` (exactly
/// two parts), unescape key and value.
fn parse_metadata_filter(value: &str) -> Result<Vec<(String, String)>, Response> {
    let bad = |why: &str| {
        error(
            StatusCode::BAD_REQUEST,
            format!("invalid metadata filter {value:?}: {why}"),
        )
    };
    let whole = util::query_unescape(value).ok_or_else(|| bad("bad percent-encoding"))?;
    let mut out = Vec::new();
    for pair in whole.split('&').filter(|p| !p.is_empty()) {
        let parts: Vec<&str> = pair.split('=').collect();
        if parts.len() != 2 {
            return Err(bad("each filter must be key=value"));
        }
        let k = util::query_unescape(parts[0]).ok_or_else(|| bad("bad percent-encoding"))?;
        let v = util::query_unescape(parts[1]).ok_or_else(|| bad("bad percent-encoding"))?;
        out.push((k, v));
    }
    Ok(out)
}

fn next_token(started: time::OffsetDateTime, id: &str, asc: bool) -> String {
    let raw = format!(
        "{}__{id}{}",
        util::rfc3339_nano(started),
        if asc { "__asc" } else { "" }
    );
    base64::engine::general_purpose::URL_SAFE.encode(raw)
}

fn parse_token(token: &str, asc: bool) -> Option<(time::OffsetDateTime, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token))
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.split("__");
    let t = util::parse_rfc3339(parts.next()?)?;
    let id = parts.next()?.to_string();
    let is_asc = match parts.next() {
        None => false,
        Some("asc") => true,
        Some(_) => return None,
    };
    (is_asc == asc && parts.next().is_none() && util::valid_id(&id)).then_some((t, id))
}

/// `GET /v2/sandboxes`.
async fn list_v2(State(api): State<Api>, QueryPairs(p): QueryPairs) -> Answer {
    let mut want_running = false;
    let mut want_paused = false;
    let mut any_state = false;
    let mut filter = Vec::new();
    let mut asc = false;
    let mut started_after = None;
    let mut template = None;
    let mut token = None;
    let mut limit = 100usize;
    for (k, v) in &p {
        match k.as_str() {
            "state" => {
                for s in v.split(',').filter(|s| !s.is_empty()) {
                    any_state = true;
                    match s {
                        "running" => want_running = true,
                        "paused" => want_paused = true,
                        other => {
                            return Err(error(
                                StatusCode::BAD_REQUEST,
                                format!("state must be running or paused, not {other:?}"),
                            ));
                        }
                    }
                }
            }
            "metadata" => filter = parse_metadata_filter(v)?,
            "order" => match v.as_str() {
                "asc" => asc = true,
                "desc" => asc = false,
                other => {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("order must be asc or desc, not {other:?}"),
                    ));
                }
            },
            "startedAfter" => match util::parse_rfc3339(v) {
                Some(t) => started_after = Some(util::truncate_us(t)),
                None => {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("startedAfter must be an RFC 3339 date-time, not {v:?}"),
                    ));
                }
            },
            "template" => {
                if v.contains(':') {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        "template filter must not contain a tag",
                    ));
                }
                template = Some(v.clone());
            }
            "nextToken" => token = Some(v.clone()),
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("limit must be an integer from 1 to 100, not {v:?}"),
                    ));
                }
            },
            _ => {}
        }
    }
    if !any_state {
        want_running = true;
        want_paused = true;
    }
    let cursor = match token.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => match parse_token(t, asc) {
            Some(c) => Some(c),
            None => return Err(error(StatusCode::BAD_REQUEST, "Invalid next token")),
        },
    };
    let mut items = api.newest_first(|s, v| {
        let state_ok = match v.state {
            sandboxes::State::Running => want_running,
            sandboxes::State::Paused => want_paused,
        };
        state_ok
            && metadata_matches(s, &filter)
            && template.as_deref().is_none_or(|t| t == sandboxes::TEMPLATE)
            && started_after.is_none_or(|t| v.started_at >= t)
    });
    // Asc is the exact reverse of desc.
    if asc {
        items.reverse();
    }
    let total_running = items
        .iter()
        .filter(|(_, v)| v.state == sandboxes::State::Running)
        .count();
    if let Some((t, id)) = cursor {
        items.retain(|(s, v)| {
            let key = (v.started_at, s.id.as_str());
            if asc {
                key.0 > t || (key.0 == t && key.1 < id.as_str())
            } else {
                key.0 < t || (key.0 == t && key.1 > id.as_str())
            }
        });
    }
    let more = items.len() > limit;
    items.truncate(limit);
    let out: Vec<_> = items.iter().map(|(s, v)| s.listed(v)).collect();
    let mut resp = json(StatusCode::OK, &out);
    if more
        && let Some((s, v)) = items.last()
        && let Ok(h) = HeaderValue::from_str(&next_token(v.started_at, &s.id, asc))
    {
        resp.headers_mut().insert("x-next-token", h);
    }
    if want_running {
        resp.headers_mut()
            .insert("x-total-running", HeaderValue::from(total_running));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_reject_the_other_order() {
        let t = util::now();
        let tok = next_token(t, "iabc", false);
        assert_eq!(parse_token(&tok, false), Some((t, "iabc".into())));
        assert_eq!(parse_token(&tok, true), None);
        let tok = next_token(t, "iabc", true);
        assert_eq!(parse_token(&tok, true), Some((t, "iabc".into())));
        assert_eq!(parse_token("!!", false), None);
    }

    #[test]
    fn metadata_filter_decodes_in_three_stages() {
        // The SDKs' encoding of {"a b": "c&d"} after the framework's own decode.
        let f = parse_metadata_filter("a%2520b=c%2526d").ok();
        assert_eq!(f, Some(vec![("a b".to_string(), "c&d".to_string())]));
        assert!(parse_metadata_filter("a=b=c").is_err());
    }
}
