//! envd's plain HTTP API: `GET /health`, `GET /envs`, `GET /metrics`, `POST /init`.
//!
//! [`router`] returns an axum router over the shared [`State`]; another part of the daemon (the
//! Filesystem service's `/files`) merges its own routes into it (see `docs/envd.md`). The
//! access-token check happens before routing, in the top-level dispatcher.

pub(crate) mod files;
pub(crate) mod guard;
mod metrics;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State as AxState;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::state::State;

/// The message of a 401 answer when the access token is missing or wrong (envd's exact text).
pub(crate) const UNAUTHORIZED_MESSAGE: &str =
    "unauthorized access, please provide a valid access token or method signing if supported";

/// A 200 answer with a JSON body (`application/json`).
pub(crate) fn json_response(body: String) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A REST error: `{"code": <http status>, "message": "..."}` as envd writes it.
pub(crate) fn json_error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "code": status.as_u16(), "message": message });
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    resp
}

/// The REST routes (without `/files`).
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/envs", get(envs))
        .route("/metrics", get(metrics::metrics))
        .route("/init", post(init))
        .merge(files::router())
        .fallback(not_found)
        .with_state(state)
}

async fn not_found() -> Response<Body> {
    json_error(StatusCode::NOT_FOUND, "not found")
}

/// 204 No Content, as envd (the SDKs check only for success). When the sandbox's limits are
/// weaker than asked, 200 with `{"limits": "<why>"}`: still a success for the SDKs, and the
/// note for whoever looks.
async fn health(AxState(state): AxState<Arc<State>>) -> Response<Body> {
    let mut resp = match state.limits_note() {
        None => {
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::NO_CONTENT;
            resp
        }
        Some(note) => json_response(serde_json::json!({ "limits": note }).to_string()),
    };
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn envs(AxState(state): AxState<Arc<State>>) -> Response<Body> {
    json_response(serde_json::to_string(&state.env_vars()).unwrap_or_else(|_| "{}".into()))
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitBody {
    env_vars: Option<HashMap<String, String>>,
    access_token: Option<String>,
    default_user: Option<String>,
    default_workdir: Option<String>,
}

/// A request's `Content-Type` as sent (`""` when absent or not text).
pub(crate) fn content_type(headers: &http::HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The base media type of a request (`application/json; charset=utf-8` → `application/json`).
pub(crate) fn media_type(headers: &http::HeaderMap) -> String {
    content_type(headers)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Reads a JSON request body of at most `limit` bytes: 415 unless the content type is
/// `application/json` (so a browser cannot send it as a "simple" cross-site request), 413 when
/// larger than the limit.
pub(crate) async fn json_body(
    headers: &http::HeaderMap,
    body: Body,
    limit: usize,
    route: &str,
) -> Result<Bytes, (StatusCode, String)> {
    let mime = media_type(headers);
    if mime != "application/json" {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("{route} takes a JSON body with Content-Type: application/json (got '{mime}')"),
        ));
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the {route} body is larger than the {limit} byte limit"),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                format!("reading the request body failed: {e}"),
            )
        }
    })
}

/// Why `POST /init` may not change the daemon (envd's rules, `init.go`).
#[derive(Debug, PartialEq, Eq)]
enum InitRefusal {
    /// A token is set and the body carries none.
    ResetNotAuthorized,
    /// A token is set and the body carries another one.
    Mismatch,
}

/// envd's rule for `/init`: allowed when no token is set (first-time setup) or the body's
/// `accessToken` equals the current one. Deviation: a caller presenting the current token in
/// `X-Access-Token` may also change it (envd authorises a change through a hash in the
/// Firecracker metadata service, which a local daemon does not have).
fn init_allowed(
    current: Option<&str>,
    body_token: Option<&str>,
    header_ok: bool,
) -> Result<(), InitRefusal> {
    let Some(current) = current else {
        return Ok(());
    };
    if header_ok {
        return Ok(());
    }
    match body_token {
        None => Err(InitRefusal::ResetNotAuthorized),
        Some(t) if crate::state::constant_time_eq(t.as_bytes(), current.as_bytes()) => Ok(()),
        Some(_) => Err(InitRefusal::Mismatch),
    }
}

async fn init(
    AxState(state): AxState<Arc<State>>,
    headers: http::HeaderMap,
    body: Body,
) -> Response<Body> {
    let bytes = match json_body(
        &headers,
        body,
        state.limits().max_json_body_bytes,
        "POST /init",
    )
    .await
    {
        Ok(b) => b,
        Err((status, message)) => return json_error(status, &message),
    };
    let parsed: InitBody = if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        InitBody::default()
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(b) => b,
            Err(e) => {
                return json_error(StatusCode::BAD_REQUEST, &format!("invalid /init body: {e}"));
            }
        }
    };
    let header_ok = state.token_presented(&headers);
    let applied = state.with_init_lock(|| {
        let current = state.access_token();
        init_allowed(
            current.as_deref(),
            parsed.access_token.as_deref(),
            header_ok,
        )?;
        if let Some(vars) = parsed.env_vars {
            state.set_env_vars(vars);
        }
        // envd sets the token to the body's (absent = cleared); a caller authorised by the
        // header who sends none keeps the current one.
        match parsed.access_token {
            Some(token) => state.set_access_token(Some(token)),
            None if header_ok => {}
            None => state.set_access_token(None),
        }
        if let Some(user) = parsed.default_user.filter(|u| !u.is_empty()) {
            state.set_default_user(user);
        }
        if let Some(dir) = parsed.default_workdir.filter(|d| !d.is_empty()) {
            state.set_default_workdir(PathBuf::from(dir));
        }
        Ok(())
    });
    match applied {
        Ok(()) => {}
        Err(InitRefusal::ResetNotAuthorized) => {
            return json_error(
                StatusCode::UNAUTHORIZED,
                "access token reset not authorized: an access token is set; send it as accessToken in the body (or in X-Access-Token to change it)",
            );
        }
        Err(InitRefusal::Mismatch) => {
            return json_error(
                StatusCode::UNAUTHORIZED,
                "access token validation failed: the body's accessToken is not the current token",
            );
        }
    }
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    if let Ok(v) = HeaderValue::from_str(state.envd_version()) {
        resp.headers_mut().insert("x-envd-version", v);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_rules() {
        use InitRefusal::*;
        assert_eq!(init_allowed(None, None, false), Ok(()));
        assert_eq!(init_allowed(None, Some("a"), false), Ok(()));
        assert_eq!(init_allowed(Some("a"), Some("a"), false), Ok(()));
        assert_eq!(
            init_allowed(Some("a"), None, false),
            Err(ResetNotAuthorized)
        );
        assert_eq!(init_allowed(Some("a"), Some("b"), false), Err(Mismatch));
        assert_eq!(init_allowed(Some("a"), Some("b"), true), Ok(()));
    }
}
