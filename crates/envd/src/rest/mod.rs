//! envd's plain HTTP API: `GET /health`, `GET /envs`, `GET /metrics`, `POST /init`.
//!
//! [`router`] returns an axum router over the shared [`State`]; another part of the daemon (the
//! Filesystem service's `/files`) merges its own routes into it (see `docs/envd.md`). The
//! access-token check happens before routing, in the top-level dispatcher.

mod files;
mod files_auth;
mod files_io;
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

async fn health() -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn envs(AxState(state): AxState<Arc<State>>) -> Response<Body> {
    let mut resp = Response::new(Body::from(
        serde_json::to_string(&state.env_vars()).unwrap_or_else(|_| "{}".into()),
    ));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitBody {
    env_vars: Option<HashMap<String, String>>,
    access_token: Option<String>,
    default_user: Option<String>,
    default_workdir: Option<String>,
}

async fn init(
    AxState(state): AxState<Arc<State>>,
    headers: http::HeaderMap,
    body: Bytes,
) -> Response<Body> {
    // Deviation from envd (which checks a Firecracker MMDS hash): once a token is set, only a
    // caller that presents it may re-initialise the daemon.
    if !state.token_ok(&headers) {
        return json_error(StatusCode::UNAUTHORIZED, UNAUTHORIZED_MESSAGE);
    }
    let parsed: InitBody = if body.iter().all(|b| b.is_ascii_whitespace()) {
        InitBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => {
                return json_error(StatusCode::BAD_REQUEST, &format!("invalid /init body: {e}"));
            }
        }
    };
    if let Some(vars) = parsed.env_vars {
        state.set_env_vars(vars);
    }
    if let Some(token) = parsed.access_token {
        state.set_access_token(Some(token));
    }
    if let Some(user) = parsed.default_user.filter(|u| !u.is_empty()) {
        state.set_default_user(user);
    }
    if let Some(dir) = parsed.default_workdir.filter(|d| !d.is_empty()) {
        state.set_default_workdir(PathBuf::from(dir));
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
