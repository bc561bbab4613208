//! The HTTP client for the sandbox endpoints.

use std::collections::BTreeMap;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::ConnectionConfig;
use crate::error::ApiError;
use crate::models::{
    ConnectSandbox, ListedSandbox, LogLevel, LogsDirection, NewSandbox, OrderDirection, Sandbox,
    SandboxDetail, SandboxLogs, SandboxLogsV2Response, SandboxMetric, SandboxPauseRequest,
    SandboxState, SandboxTimeoutRequest, SandboxesWithMetrics,
};

/// The API key header (`components.securitySchemes.ApiKeyAuth`).
pub const API_KEY_HEADER: &str = "X-API-Key";
/// The list response header with the cursor of the next page (absent on the last page).
pub const NEXT_TOKEN_HEADER: &str = "X-Next-Token";
/// The list response header with the number of running sandboxes matching the filters.
pub const TOTAL_RUNNING_HEADER: &str = "X-Total-Running";
/// The largest response body the client reads; bigger answers fail with [`ApiError::Decode`].
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// `encodeURIComponent`'s set: everything but `A-Z a-z 0-9 - _ . ! ~ * ' ( )`.
const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// A path segment: everything but the unreserved characters.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The HTTP client every [`ApiClient`] of this process shares: one connection pool (as the
/// SDKs keep one per process), and the TLS roots are loaded once rather than for each client
/// (about a millisecond each). Per-request settings (the request timeout) go on each request.
fn shared_http() -> Result<reqwest::Client, ApiError> {
    static SHARED: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(c) = SHARED.get() {
        return Ok(c.clone());
    }
    let built = reqwest::Client::builder()
        .user_agent(concat!("e2b-rs/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| ApiError::Config(format!("cannot build the HTTP client: {e}")))?;
    Ok(SHARED.get_or_init(|| built).clone())
}

/// A client for the E2B API's sandbox endpoints. Cheap to clone; every client of a process
/// shares one connection pool.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    config: ConnectionConfig,
}

/// The answer of [`ApiClient::connect_sandbox`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Connected {
    /// The sandbox (id, envd version, access token, domain).
    pub sandbox: Sandbox,
    /// `true` when the sandbox was paused and has been resumed (201), `false` when it was
    /// already running (200).
    pub resumed: bool,
}

/// Filters and paging for `GET /v2/sandboxes` ([`ApiClient::list_sandboxes`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ListQuery {
    /// Only sandboxes whose metadata has every one of these pairs (exact match).
    metadata: BTreeMap<String, String>,
    /// Only sandboxes in one of these states; empty = running and paused.
    state: Vec<SandboxState>,
    /// Order by start time; the server's default is newest first.
    order: Option<OrderDirection>,
    /// Only sandboxes started at or after this RFC 3339 time.
    started_after: Option<String>,
    /// Only sandboxes of this template (id or alias).
    template: Option<String>,
    /// Page size, 1..=100 (server default 100).
    limit: Option<u32>,
    /// The cursor from a previous page's `X-Next-Token`.
    next_token: Option<String>,
}

impl ListQuery {
    /// An empty query: every sandbox, running and paused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata pair to match.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds a state to match.
    pub fn state(mut self, state: SandboxState) -> Self {
        if !self.state.contains(&state) {
            self.state.push(state);
        }
        self
    }

    /// Sets the order.
    pub fn order(mut self, order: OrderDirection) -> Self {
        self.order = Some(order);
        self
    }

    /// Sets the earliest start time (RFC 3339).
    pub fn started_after(mut self, time: impl Into<String>) -> Self {
        self.started_after = Some(time.into());
        self
    }

    /// Sets the template filter.
    pub fn template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }

    /// Sets the page size (1..=100).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Starts at the page a previous page's cursor (`X-Next-Token`) names. [`Paginator`]
    /// follows the cursors by itself.
    pub fn next_token(mut self, token: impl Into<String>) -> Self {
        self.next_token = Some(token.into());
        self
    }

    /// The query pairs as sent: `state` comma-joined (`style: form, explode: false`), and
    /// `metadata` as the SDKs encode it: each key and value percent-encoded, the pairs
    /// form-encoded into one string (`a%2520b=c%2526d` for `{"a b": "c&d"}`), which the query
    /// encoding then escapes once more.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if !self.metadata.is_empty() {
            pairs.push(("metadata", encode_metadata(&self.metadata)));
        }
        if !self.state.is_empty() {
            let states: Vec<&str> = self.state.iter().map(|s| s.as_str()).collect();
            pairs.push(("state", states.join(",")));
        }
        if let Some(o) = self.order {
            pairs.push(("order", o.as_str().to_owned()));
        }
        if let Some(t) = &self.started_after {
            pairs.push(("startedAfter", t.clone()));
        }
        if let Some(t) = &self.template {
            pairs.push(("template", t.clone()));
        }
        if let Some(t) = &self.next_token {
            pairs.push(("nextToken", t.clone()));
        }
        if let Some(l) = self.limit {
            pairs.push(("limit", l.to_string()));
        }
        pairs
    }
}

/// Encodes a metadata filter as the SDKs do (see [`ListQuery::to_pairs`]); the result is the
/// `metadata` query value before the URL's own query encoding.
pub fn encode_metadata(metadata: &BTreeMap<String, String>) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in metadata {
        form.append_pair(
            &utf8_percent_encode(k, URI_COMPONENT).to_string(),
            &utf8_percent_encode(v, URI_COMPONENT).to_string(),
        );
    }
    form.finish()
}

/// One page of `GET /v2/sandboxes`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ListPage {
    /// The sandboxes on this page.
    pub sandboxes: Vec<ListedSandbox>,
    /// The cursor for the next page (`X-Next-Token`), `None` on the last page.
    pub next_token: Option<String>,
    /// `X-Total-Running`, when the server sent it.
    pub total_running: Option<u64>,
}

/// Filters for `GET /v2/sandboxes/{id}/logs` ([`ApiClient::sandbox_logs`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LogsQuery {
    /// Start at this time, in milliseconds since the epoch.
    cursor: Option<i64>,
    /// At most this many entries (0..=1000, server default 1000).
    limit: Option<u32>,
    /// Read forward or backward from the cursor (server default backward).
    direction: Option<LogsDirection>,
    /// Minimum level.
    level: Option<LogLevel>,
    /// Case-sensitive substring of the message (at most 256 characters).
    search: Option<String>,
}

impl LogsQuery {
    /// An empty query: the server's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts at this time, in milliseconds since the epoch.
    pub fn cursor(mut self, millis: i64) -> Self {
        self.cursor = Some(millis);
        self
    }

    /// At most this many entries (0..=1000).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Reads forward or backward from the cursor.
    pub fn direction(mut self, direction: LogsDirection) -> Self {
        self.direction = Some(direction);
        self
    }

    /// The minimum level.
    pub fn level(mut self, level: LogLevel) -> Self {
        self.level = Some(level);
        self
    }

    /// A case-sensitive substring of the message (at most 256 characters).
    pub fn search(mut self, text: impl Into<String>) -> Self {
        self.search = Some(text.into());
        self
    }
}

impl ApiClient {
    /// A client for the API that `config` points at.
    ///
    /// # Errors
    ///
    /// [`ApiError::Config`] when the API URL is not a valid `http(s)` URL or the HTTP client
    /// cannot be built.
    pub fn new(config: ConnectionConfig) -> Result<Self, ApiError> {
        let base = config.resolved_api_url();
        let parsed = url::Url::parse(&base).map_err(|e| {
            ApiError::Config(format!(
                "the API URL {base:?} is not a URL ({e}): fix E2B_API_URL or E2B_DOMAIN"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ApiError::Config(format!(
                "the API URL {base:?} must start with http:// or https://"
            )));
        }
        Ok(Self {
            http: shared_http()?,
            base,
            config,
        })
    }

    /// A client configured from the environment ([`ConnectionConfig::from_env`]).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn from_env() -> Result<Self, ApiError> {
        Self::new(ConnectionConfig::from_env())
    }

    /// The settings this client uses (also for envd URLs, see
    /// [`ConnectionConfig::envd_url`]).
    pub fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// The API base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn sandbox_path(&self, id: &str, rest: &str) -> String {
        format!(
            "{}/sandboxes/{}{rest}",
            self.base,
            utf8_percent_encode(id, PATH_SEGMENT)
        )
    }

    fn request(&self, method: Method, url: &str) -> Result<RequestBuilder, ApiError> {
        let key = self.config.checked_api_key()?;
        let req = self.http.request(method, url).header(API_KEY_HEADER, key);
        Ok(match self.config.request_timeout {
            Some(t) => req.timeout(t),
            None => req,
        })
    }

    async fn send(&self, req: RequestBuilder) -> Result<Response, ApiError> {
        req.send().await.map_err(|e| self.wire_error(e))
    }

    fn wire_error(&self, e: reqwest::Error) -> ApiError {
        if e.is_timeout() {
            ApiError::Timeout(self.config.request_timeout.unwrap_or_default())
        } else if e.is_connect() {
            ApiError::Connect {
                url: self.base.clone(),
                source: e,
            }
        } else {
            ApiError::Http(e)
        }
    }

    async fn body(&self, mut resp: Response) -> Result<Vec<u8>, ApiError> {
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.wire_error(e))? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(ApiError::Decode {
                    status,
                    detail: format!("the body is larger than {MAX_RESPONSE_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    async fn error(&self, resp: Response) -> ApiError {
        let status = resp.status().as_u16();
        match self.body(resp).await {
            Ok(body) => ApiError::from_response(status, &body),
            Err(e) => e,
        }
    }

    async fn json<T: DeserializeOwned>(&self, resp: Response) -> Result<T, ApiError> {
        let status = resp.status().as_u16();
        let body = self.body(resp).await?;
        serde_json::from_slice(&body).map_err(|e| ApiError::Decode {
            status,
            detail: e.to_string(),
        })
    }

    async fn call<B: Serialize>(
        &self,
        method: Method,
        url: &str,
        body: Option<&B>,
        query: &[(&str, String)],
    ) -> Result<Response, ApiError> {
        let mut req = self.request(method, url)?;
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(self.error(resp).await)
        }
    }

    /// `POST /sandboxes`: creates a sandbox from `body.template_id` and returns its id, envd
    /// version and envd access token.
    ///
    /// # Errors
    ///
    /// [`ApiError`] as the server answers (400 bad template or timeout, 401, 429 too many
    /// sandboxes, 5xx), or on the wire.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave a sandbox created on the server that this client never
    /// learns about; it expires after its timeout.
    pub async fn create_sandbox(&self, body: &NewSandbox) -> Result<Sandbox, ApiError> {
        let url = format!("{}/sandboxes", self.base);
        let resp = self.call(Method::POST, &url, Some(body), &[]).await?;
        self.json(resp).await
    }

    /// `GET /v2/sandboxes`: one page of sandboxes. See [`list`](Self::list) for all pages.
    ///
    /// # Errors
    ///
    /// [`ApiError`] (400 for a bad filter or next token, 401), or on the wire.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn list_sandboxes(&self, query: &ListQuery) -> Result<ListPage, ApiError> {
        let url = format!("{}/v2/sandboxes", self.base);
        let resp = self
            .call::<()>(Method::GET, &url, None, &query.to_pairs())
            .await?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let next_token = header(NEXT_TOKEN_HEADER);
        let total_running = header(TOTAL_RUNNING_HEADER).and_then(|v| v.parse().ok());
        let sandboxes = self.json(resp).await?;
        Ok(ListPage {
            sandboxes,
            next_token,
            total_running,
        })
    }

    /// A paginator over `GET /v2/sandboxes` that follows `X-Next-Token`.
    pub fn list(&self, query: ListQuery) -> Paginator {
        Paginator {
            client: self.clone(),
            query,
            done: false,
        }
    }

    /// `GET /sandboxes/{id}`: the sandbox's details (state, start and end time, resources).
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn get_sandbox(&self, sandbox_id: &str) -> Result<SandboxDetail, ApiError> {
        let url = self.sandbox_path(sandbox_id, "");
        let resp = self.call::<()>(Method::GET, &url, None, &[]).await?;
        self.json(resp).await
    }

    /// `DELETE /sandboxes/{id}`: kills the sandbox (running or paused). `false` when there is no
    /// such sandbox (404), as in the SDKs.
    ///
    /// # Errors
    ///
    /// [`ApiError`] for other failures.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have killed the sandbox; calling again is safe.
    pub async fn kill_sandbox(&self, sandbox_id: &str) -> Result<bool, ApiError> {
        let url = self.sandbox_path(sandbox_id, "");
        match self.call::<()>(Method::DELETE, &url, None, &[]).await {
            Ok(_) => Ok(true),
            Err(ApiError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `POST /sandboxes/{id}/timeout`: the sandbox now expires `timeout` from now (this may
    /// shorten its life; zero expires it at once).
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not have applied the timeout; calling again is safe.
    pub async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), ApiError> {
        let url = self.sandbox_path(sandbox_id, "/timeout");
        let body = SandboxTimeoutRequest {
            timeout: seconds(timeout),
        };
        self.call(Method::POST, &url, Some(&body), &[]).await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/connect`: resumes a paused sandbox, or returns a running one; its
    /// time to live is only ever extended to `timeout` from now.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, [`ApiError::Conflict`] while it is being
    /// killed, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the sandbox resumed; calling again is safe.
    pub async fn connect_sandbox(
        &self,
        sandbox_id: &str,
        timeout: Duration,
    ) -> Result<Connected, ApiError> {
        let url = self.sandbox_path(sandbox_id, "/connect");
        let body = ConnectSandbox {
            timeout: seconds(timeout),
        };
        let resp = self.call(Method::POST, &url, Some(&body), &[]).await?;
        let resumed = resp.status() == StatusCode::CREATED;
        let sandbox = self.json(resp).await?;
        Ok(Connected { sandbox, resumed })
    }

    /// `POST /sandboxes/{id}/pause`: pauses the sandbox (with its memory when `keep_memory`).
    /// `false` when it was already paused (409), as in the SDKs.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the sandbox paused; [`connect_sandbox`](Self::connect_sandbox)
    /// resumes it.
    pub async fn pause_sandbox(
        &self,
        sandbox_id: &str,
        keep_memory: bool,
    ) -> Result<bool, ApiError> {
        let url = self.sandbox_path(sandbox_id, "/pause");
        let body = SandboxPauseRequest {
            memory: Some(keep_memory),
        };
        match self.call(Method::POST, &url, Some(&body), &[]).await {
            Ok(_) => Ok(true),
            Err(ApiError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Resumes a paused sandbox, as the SDKs and E2B's CLI do: through
    /// [`connect_sandbox`](Self::connect_sandbox) (`POST /sandboxes/{id}/connect`; the older
    /// `/resume` endpoint is deprecated).
    ///
    /// # Errors
    ///
    /// As [`connect_sandbox`](Self::connect_sandbox).
    ///
    /// # Cancel safety
    ///
    /// As [`connect_sandbox`](Self::connect_sandbox).
    pub async fn resume_sandbox(
        &self,
        sandbox_id: &str,
        timeout: Duration,
    ) -> Result<Connected, ApiError> {
        self.connect_sandbox(sandbox_id, timeout).await
    }

    /// `GET /sandboxes/{id}/metrics`: CPU, memory and disk samples between `start` and `end`
    /// (Unix seconds; `None` = the sandbox's whole life). An empty range gives an empty list.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn sandbox_metrics(
        &self,
        sandbox_id: &str,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<Vec<SandboxMetric>, ApiError> {
        let url = self.sandbox_path(sandbox_id, "/metrics");
        let mut query = Vec::new();
        if let Some(s) = start {
            query.push(("start", s.to_string()));
        }
        if let Some(e) = end {
            query.push(("end", e.to_string()));
        }
        let resp = self.call::<()>(Method::GET, &url, None, &query).await?;
        self.json(resp).await
    }

    /// `GET /sandboxes/metrics?sandbox_ids=…`: the latest sample of each sandbox (at most 100
    /// ids).
    ///
    /// # Errors
    ///
    /// [`ApiError::InvalidArgument`] for more than 100 ids, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn sandboxes_metrics(
        &self,
        sandbox_ids: &[&str],
    ) -> Result<SandboxesWithMetrics, ApiError> {
        let url = format!("{}/sandboxes/metrics", self.base);
        let query = [("sandbox_ids", sandbox_ids.join(","))];
        let resp = self.call::<()>(Method::GET, &url, None, &query).await?;
        self.json(resp).await
    }

    /// `GET /v2/sandboxes/{id}/logs`: structured log entries.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn sandbox_logs(
        &self,
        sandbox_id: &str,
        query: &LogsQuery,
    ) -> Result<SandboxLogsV2Response, ApiError> {
        let url = format!(
            "{}/v2/sandboxes/{}/logs",
            self.base,
            utf8_percent_encode(sandbox_id, PATH_SEGMENT)
        );
        let mut q = Vec::new();
        if let Some(c) = query.cursor {
            q.push(("cursor", c.to_string()));
        }
        if let Some(l) = query.limit {
            q.push(("limit", l.to_string()));
        }
        if let Some(d) = query.direction {
            q.push(("direction", d.as_str().to_owned()));
        }
        if let Some(l) = query.level {
            q.push(("level", l.as_str().to_owned()));
        }
        if let Some(s) = &query.search {
            q.push(("search", s.clone()));
        }
        let resp = self.call::<()>(Method::GET, &url, None, &q).await?;
        self.json(resp).await
    }

    /// `GET /sandboxes/{id}/logs` (v1, deprecated; E2B's CLI still uses it): log lines from
    /// `start_ms` (milliseconds since the epoch), at most `limit`.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] for an unknown id, or as for any call.
    ///
    /// # Cancel safety
    ///
    /// Safe: a read.
    pub async fn sandbox_logs_v1(
        &self,
        sandbox_id: &str,
        start_ms: Option<i64>,
        limit: Option<u32>,
    ) -> Result<SandboxLogs, ApiError> {
        let url = self.sandbox_path(sandbox_id, "/logs");
        let mut q = Vec::new();
        if let Some(s) = start_ms {
            q.push(("start", s.to_string()));
        }
        if let Some(l) = limit {
            q.push(("limit", l.to_string()));
        }
        let resp = self.call::<()>(Method::GET, &url, None, &q).await?;
        self.json(resp).await
    }
}

/// A duration as the API's int32 seconds, rounded up (as the JS SDK's `Math.ceil(ms / 1000)`),
/// saturating at `i32::MAX`.
pub fn seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// Pages through `GET /v2/sandboxes`, following `X-Next-Token` ([`ApiClient::list`]).
#[derive(Debug)]
pub struct Paginator {
    client: ApiClient,
    query: ListQuery,
    done: bool,
}

impl Paginator {
    /// Whether another page may follow (`false` once a page came without `X-Next-Token`).
    pub fn has_next(&self) -> bool {
        !self.done
    }

    /// The cursor the next request sends (`None` before the first page).
    pub fn next_token(&self) -> Option<&str> {
        self.query.next_token.as_deref()
    }

    /// The next page, or `None` after the last one.
    ///
    /// # Errors
    ///
    /// As [`ApiClient::list_sandboxes`]; the paginator stays where it was, so the call can be
    /// retried.
    ///
    /// # Cancel safety
    ///
    /// Safe: the cursor only moves once a page has arrived.
    pub async fn next_page(&mut self) -> Result<Option<Vec<ListedSandbox>>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let page = self.client.list_sandboxes(&self.query).await?;
        self.done = page.next_token.is_none();
        self.query.next_token = page.next_token;
        Ok(Some(page.sandboxes))
    }

    /// Every remaining sandbox, up to `max` of them (`None` = no bound).
    ///
    /// # Errors
    ///
    /// As [`next_page`](Self::next_page).
    ///
    /// # Cancel safety
    ///
    /// Safe; the sandboxes of pages already read are lost with the future.
    pub async fn collect(mut self, max: Option<usize>) -> Result<Vec<ListedSandbox>, ApiError> {
        let mut all = Vec::new();
        while let Some(page) = self.next_page().await? {
            all.extend(page);
            if let Some(m) = max
                && all.len() >= m
            {
                all.truncate(m);
                break;
            }
        }
        Ok(all)
    }
}
