//! Streamable HTTP at `/mcp`, `GET /health`, auth, allowed hosts, body limit.

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
    /// Stateless mode with plain `application/json` responses (no sessions).
    pub(crate) json_response: bool,
}

struct AppState {
    service: StreamableHttpService<ExecServer, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    sandbox_id: String,
    api_key_hash: Option<[u8; 32]>,
    max_body_bytes: usize,
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
    let sessions = st.sessions.sessions.read().await.len();
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
    let resp = st
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
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(ct)
        // Our own limit runs first; keep rmcp's out of the way.
        .with_max_request_body_bytes(opts.max_body_bytes.saturating_add(1024));
    config = match &opts.allowed_hosts {
        Some(hosts) => config.with_allowed_hosts(hosts.clone()),
        None => config.disable_allowed_hosts(),
    };
    if opts.json_response {
        config = config
            .with_legacy_session_mode(false)
            .with_json_response(true);
    }
    let sessions = Arc::new(LocalSessionManager::default());
    let sandbox_id = server.sandbox_id().to_owned();
    let factory_server = server.clone();
    let service =
        StreamableHttpService::new(move || Ok(factory_server.clone()), sessions.clone(), config);
    let state = Arc::new(AppState {
        service,
        sessions,
        sandbox_id,
        api_key_hash: opts.api_key.as_deref().map(|k| hash(k.as_bytes())),
        max_body_bytes: opts.max_body_bytes,
    });
    axum::Router::new()
        .route("/health", get(health))
        .route("/mcp", any(mcp))
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
