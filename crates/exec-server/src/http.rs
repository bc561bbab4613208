//! Streamable HTTP at `/mcp` (and `/mcp/legacy`, `/mcp/json`, `/mcp/session-json`), `GET /health`, auth, allowed
//! hosts and origins, body limit.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::error::ExecServerError;
use crate::server::{ExecServer, VERSION};

/// HTTP options.
#[derive(Debug, Clone)]
pub(crate) struct HttpOptions {
    pub(crate) api_key: Option<String>,
    /// `None`: no Host validation.
    pub(crate) allowed_hosts: Option<Vec<String>>,
    pub(crate) max_body_bytes: usize,
    /// Stateless mode with plain `application/json` responses (no sessions) at `/mcp`.
    pub(crate) json_response: bool,
    /// `/mcp` and `/mcp/legacy` answer session requests in JSON when they can (as
    /// `/mcp/session-json` always does).
    pub(crate) session_json: bool,
    /// The look-ahead bounds of those JSON answers.
    pub(crate) session_json_limits: crate::session_json::Limits,
    /// Browser origins allowed to call; any other `Origin` is refused.
    pub(crate) allowed_origins: Vec<String>,
}

/// One MCP endpoint: its service and its sessions.
struct Endpoint {
    service: StreamableHttpService<ExecServer, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
}

struct AppState {
    /// `/mcp`: sessions (or stateless JSON with `--json-response`), the server's text format.
    main: Endpoint,
    /// `/mcp/legacy`: as `/mcp`, with exec results in the Node server's text format.
    legacy: Endpoint,
    /// `/mcp/json`: stateless, plain `application/json` answers.
    json: Endpoint,
    sandbox_id: String,
    api_key_hash: Option<[u8; 32]>,
    max_body_bytes: usize,
    allowed_origins: Vec<String>,
    session_json: bool,
    session_json_limits: crate::session_json::Limits,
}

/// `scheme://host[:port]`, lower-cased, without a trailing slash.
fn normalize_origin(o: &str) -> String {
    o.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// Whether the request's `Origin` (if any) is allowed: requests without one (non-browser
/// clients) pass; a browser's must be configured.
fn origin_allowed(allowed: &[String], headers: &HeaderMap) -> bool {
    let Some(v) = headers.get(http::header::ORIGIN) else {
        return true;
    };
    let Ok(v) = v.to_str() else {
        return false;
    };
    let v = normalize_origin(v);
    allowed.contains(&v)
}

fn hash(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

/// Whether the request carries the API key (`x-api-key` or `Authorization: Bearer`), compared
/// in constant time (both sides hashed first, so the length does not leak either).
fn authorized(expected: &[u8; 32], headers: &HeaderMap) -> bool {
    let mut ok = subtle::Choice::from(0u8);
    if let Some(v) = headers.get("x-api-key") {
        ok |= hash(v.as_bytes()).ct_eq(expected);
    }
    if let Some(v) = headers.get(http::header::AUTHORIZATION) {
        let v = v.as_bytes();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
            ok |= hash(&v[7..]).ct_eq(expected);
        }
    }
    bool::from(ok)
}

fn json_error(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(json!({"error": msg}))).into_response()
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    let sessions = st.main.sessions.sessions.read().await.len()
        + st.legacy.sessions.sessions.read().await.len();
    axum::Json(json!({
        "status": "ok",
        "sandbox_id": st.sandbox_id,
        "sessions": sessions,
        "version": VERSION,
    }))
    .into_response()
}

/// Whether a JSON-RPC body is an `initialize` request.
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Probe<'_>>(body)
        .ok()
        .and_then(|p| p.method)
        .is_some_and(|m| m == "initialize")
}

/// Inserts `"sandbox_id"` into a serialized `serverInfo` object inside an SSE or JSON frame.
fn inject_frame(data: &[u8], needle: &[u8], replacement: &[u8]) -> Option<Bytes> {
    let pos = data.windows(needle.len()).position(|w| w == needle)?;
    let mut out = Vec::with_capacity(data.len() + replacement.len());
    out.extend_from_slice(&data[..pos]);
    out.extend_from_slice(replacement);
    out.extend_from_slice(&data[pos + needle.len()..]);
    Some(Bytes::from(out))
}

async fn mcp(State(st): State<Arc<AppState>>, req: Request) -> Response {
    serve_mcp(&st, &st.main, req, st.session_json).await
}

async fn mcp_legacy(State(st): State<Arc<AppState>>, req: Request) -> Response {
    serve_mcp(&st, &st.legacy, req, st.session_json).await
}

async fn mcp_json(State(st): State<Arc<AppState>>, req: Request) -> Response {
    serve_mcp(&st, &st.json, req, false).await
}

/// `/mcp/session-json`: the sessions of `/mcp`, answered in JSON when possible.
async fn mcp_session_json(State(st): State<Arc<AppState>>, req: Request) -> Response {
    serve_mcp(&st, &st.main, req, true).await
}

/// Serves one MCP request; with `session_json`, a POST whose client accepts JSON goes through
/// the JSON layer ([`crate::session_json::to_json`]).
async fn serve_mcp(st: &AppState, ep: &Endpoint, req: Request, session_json: bool) -> Response {
    let to_json = session_json
        && req.method() == http::Method::POST
        && crate::session_json::accepts_json(req.headers());
    let resp = serve_mcp_inner(st, ep, req).await;
    if to_json {
        crate::session_json::to_json(resp, st.session_json_limits).await
    } else {
        resp
    }
}

async fn serve_mcp_inner(st: &AppState, ep: &Endpoint, req: Request) -> Response {
    if !origin_allowed(&st.allowed_origins, req.headers()) {
        tracing::warn!(origin = ?req.headers().get(http::header::ORIGIN), "refused a request from a browser origin that is not allowed");
        return json_error(
            StatusCode::FORBIDDEN,
            "Forbidden: this Origin is not allowed; start the server with --allowed-origin <scheme://host:port> to let that web page call it",
        );
    }
    if let Some(expected) = &st.api_key_hash
        && !authorized(expected, req.headers())
    {
        return json_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    let (parts, body) = req.into_parts();
    let bytes = match Limited::new(body, st.max_body_bytes).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return json_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "request body over {} bytes; send files in smaller chunks or raise --max-body-bytes",
                        st.max_body_bytes
                    ),
                );
            }
            return json_error(
                StatusCode::BAD_REQUEST,
                &format!("could not read body: {e}"),
            );
        }
    };
    let init = parts.method == http::Method::POST && is_initialize(&bytes);
    let delete = parts.method == http::Method::DELETE;
    let resp = ep
        .service
        .handle(http::Request::from_parts(parts, Full::new(bytes)))
        .await;
    let (mut parts, body) = resp.into_parts();
    // The Node server (and the ruska conformance check) answer a session DELETE with 200.
    if delete && parts.status == StatusCode::ACCEPTED {
        parts.status = StatusCode::OK;
    }
    if !init {
        return Response::from_parts(parts, Body::new(body));
    }
    let needle = b"\"serverInfo\":{".to_vec();
    let mut replacement = needle.clone();
    replacement.extend_from_slice(
        format!(
            "\"sandbox_id\":{},",
            serde_json::Value::String(st.sandbox_id.clone())
        )
        .as_bytes(),
    );
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let mapped = body.map_frame(move |frame| {
        frame.map_data(|d| inject_frame(&d, &needle, &replacement).unwrap_or(d))
    });
    Response::from_parts(parts, Body::new(mapped))
}

/// Builds the axum router (`/mcp`, `/health`) for `server`.
pub(crate) fn router(
    server: ExecServer,
    opts: &HttpOptions,
    ct: CancellationToken,
) -> axum::Router {
    let mut base = StreamableHttpServerConfig::default()
        .with_cancellation_token(ct)
        // Our own limit runs first; keep rmcp's out of the way.
        .with_max_request_body_bytes(opts.max_body_bytes.saturating_add(1024));
    base = match &opts.allowed_hosts {
        Some(hosts) => base.with_allowed_hosts(hosts.clone()),
        None => base.disable_allowed_hosts(),
    };
    let json =
        |c: StreamableHttpServerConfig| c.with_legacy_session_mode(false).with_json_response(true);
    let main_config = if opts.json_response {
        json(base.clone())
    } else {
        base.clone()
    };
    let endpoint = |server: ExecServer, config: StreamableHttpServerConfig| {
        let sessions = Arc::new(LocalSessionManager::default());
        let service =
            StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
        Endpoint { service, sessions }
    };
    let state = Arc::new(AppState {
        main: endpoint(server.clone(), main_config.clone()),
        legacy: endpoint(server.with_legacy_text(true), main_config),
        json: endpoint(server.clone(), json(base)),
        sandbox_id: server.sandbox_id().to_owned(),
        api_key_hash: opts.api_key.as_deref().map(|k| hash(k.as_bytes())),
        max_body_bytes: opts.max_body_bytes,
        allowed_origins: opts
            .allowed_origins
            .iter()
            .map(|o| normalize_origin(o))
            .collect(),
        session_json: opts.session_json,
        session_json_limits: opts.session_json_limits,
    });
    axum::Router::new()
        .route("/health", get(health))
        .route("/mcp", any(mcp))
        .route("/mcp/legacy", any(mcp_legacy))
        .route("/mcp/json", any(mcp_json))
        .route("/mcp/session-json", any(mcp_session_json))
        .with_state(state)
}

/// Binds `addr` and serves until `ct` is cancelled.
pub(crate) async fn serve(
    server: ExecServer,
    addr: SocketAddr,
    opts: HttpOptions,
    ct: CancellationToken,
    on_bound: impl FnOnce(SocketAddr) + Send,
) -> Result<(), ExecServerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ExecServerError::Bind { addr, source })?;
    let local = listener.local_addr()?;
    on_bound(local);
    let app = router(server, &opts, ct.child_token());
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { ct.cancelled_owned().await })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_headers() {
        let k = hash(b"secret");
        let mut h = HeaderMap::new();
        assert!(!authorized(&k, &h));
        h.insert("x-api-key", http::HeaderValue::from_static("nope"));
        assert!(!authorized(&k, &h));
        h.insert("x-api-key", http::HeaderValue::from_static("secret"));
        assert!(authorized(&k, &h));
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer secret"),
        );
        assert!(authorized(&k, &h));
    }

    #[test]
    fn origins() {
        let allowed = vec![normalize_origin("https://App.example.com:8443/")];
        let mut h = HeaderMap::new();
        assert!(
            origin_allowed(&allowed, &h),
            "no Origin: a non-browser client"
        );
        h.insert(
            http::header::ORIGIN,
            http::HeaderValue::from_static("https://app.example.com:8443"),
        );
        assert!(origin_allowed(&allowed, &h));
        h.insert(
            http::header::ORIGIN,
            http::HeaderValue::from_static("https://evil.example"),
        );
        assert!(!origin_allowed(&allowed, &h));
        assert!(!origin_allowed(&[], &h));
        h.insert(http::header::ORIGIN, http::HeaderValue::from_static("null"));
        assert!(!origin_allowed(&[], &h));
    }

    #[test]
    fn frame_injection() {
        let f = br#"data: {"result":{"serverInfo":{"name":"x"}}}"#;
        let out = inject_frame(
            f,
            b"\"serverInfo\":{",
            b"\"serverInfo\":{\"sandbox_id\":\"s\",",
        );
        assert_eq!(
            out.as_deref(),
            Some(&br#"data: {"result":{"serverInfo":{"sandbox_id":"s","name":"x"}}}"#[..])
        );
        assert!(is_initialize(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#
        ));
        assert!(!is_initialize(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
        ));
    }
}
