//! `GET /files` (download), `POST /files` (upload) and `POST /files/compose`, as envd serves
//! them (`internal/api/{download,upload,compose}.go`), streamed both ways.
//!
//! Downloads follow Go's `http.ServeContent`, which envd uses: `HEAD` gets GET's status and
//! headers without a body; `Range` with one range gets a 206 with `Content-Range`, with several
//! a 206 `multipart/byteranges` body read range by range from disk; see [`parse_ranges`] for
//! the 416 cases and when the whole file is sent instead.
//!
//! Uploads go to a hidden temporary file in the target's directory (created, chowned to the
//! user, written, given its metadata) that is renamed over the target once complete, so a
//! failed upload leaves no partial file. Watchers see envd's CREATE, CHMOD, WRITE for it (see
//! `filesystem::watch`).
//!
//! One file per concept: [`http_range`] (Range, If-Range, Accept-Encoding: HTTP semantics of
//! a download), [`download`], [`upload`], [`compose`]; [`auth`] checks the token or URL
//! signature, [`io`] streams bytes to and from disk, [`multipart_guard`] bounds multipart
//! bodies before the parser sees them. Handlers return `Result<Response, FilesError>`.

mod auth;
mod compose;
mod download;
pub(crate) mod http_range;
pub(crate) mod io;
pub(crate) mod multipart_guard;
mod upload;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Query;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use http::{HeaderValue, Response, StatusCode, header};

pub(crate) use auth::FilesQuery;

use super::json_error;
use crate::filesystem::paths::{self, PathError};
use crate::state::{State, User};

/// A `/files` failure: the status and envd-style JSON message, plus the `Content-Range` of a
/// 416 that does not overlap the file.
#[derive(Debug)]
pub(crate) struct FilesError {
    status: StatusCode,
    message: String,
    content_range: Option<String>,
}

impl FilesError {
    /// A failure with `status` and `message`.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            content_range: None,
        }
    }

    /// 400 with `message`.
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// Adds a `Content-Range` header to the answer.
    pub(crate) fn with_content_range(mut self, value: String) -> Self {
        self.content_range = Some(value);
        self
    }
}

impl IntoResponse for FilesError {
    fn into_response(self) -> Response<Body> {
        let mut r = json_error(self.status, &self.message);
        if let Some(v) = self
            .content_range
            .and_then(|v| HeaderValue::from_str(&v).ok())
        {
            r.headers_mut().insert(header::CONTENT_RANGE, v);
        }
        r
    }
}

/// The `/files` routes, merged into the REST router.
pub(crate) fn router() -> Router<Arc<State>> {
    Router::new()
        .route("/files", get(download::download).post(upload::upload))
        .route("/files/compose", post(compose::compose))
}

impl From<auth::Refusal> for FilesError {
    fn from((status, message): auth::Refusal) -> Self {
        Self::new(status, message)
    }
}

/// The query parameters of a `/files` request.
pub(crate) fn query(req_uri: &http::Uri) -> Result<FilesQuery, FilesError> {
    match Query::<FilesQuery>::try_from_uri(req_uri) {
        Ok(Query(q)) => Ok(q),
        Err(e) => Err(FilesError::bad(format!("invalid query parameters: {e}"))),
    }
}

/// The first steps of `GET`/`HEAD` and `POST /files`: the query, the token or URL signature
/// for `op` (see `auth::check`), and the user the query names.
pub(crate) fn authorize(
    state: &State,
    req: &http::Request<axum::body::Body>,
    op: e2b_envd_proto::wire::FileOperation,
) -> Result<(FilesQuery, User), FilesError> {
    let q = query(req.uri())?;
    auth::check(state, req.headers(), &q, op)?;
    let user = lookup_user(state, q.username.as_deref())?;
    Ok((q, user))
}

/// The user a request names (`None` = the default user); 401 with envd's message if unknown.
pub(crate) fn lookup_user(state: &State, name: Option<&str>) -> Result<User, FilesError> {
    state.resolve_user(name).map_err(|e| {
        let shown = name
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| state.default_user_name());
        FilesError::new(
            StatusCode::UNAUTHORIZED,
            format!("error looking up user '{shown}': {e}"),
        )
    })
}

/// Resolves a path parameter for `user` (400 if invalid, 403 outside the configured root).
pub(crate) fn resolve(state: &State, user: &User, path: &str) -> Result<PathBuf, FilesError> {
    paths::resolve(state, user, path).map_err(|e| match e {
        PathError::Invalid(m) => FilesError::bad(m),
        PathError::OutsideRoot(m) => FilesError::new(StatusCode::FORBIDDEN, m),
    })
}

/// Runs `f` on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, FilesError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        FilesError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("file task failed: {e}"),
        )
    })
}
