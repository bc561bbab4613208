//! `POST /files/compose`: concatenates source files into a destination, then deletes the
//! sources. Needs the access token (a URL signature does not reach it).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State as AxState;
use futures::StreamExt as _;
use http::{HeaderValue, Request, Response, StatusCode, header};

use super::io::{self as files_io, OpenError, open_regular};
use super::{FilesError, FilesQuery, blocking, lookup_user, query, resolve};
use crate::filesystem::entry::entry_info;
use crate::state::State;

#[derive(Debug, serde::Deserialize)]
struct ComposeBody {
    source_paths: Vec<String>,
    destination: String,
    #[serde(default)]
    username: Option<String>,
}

/// Query parameters of a compose request must not contradict its body: the body says what is
/// read, written and deleted, so a `path` or `username` in the query that names something else
/// is refused rather than silently ignored. Signatures are not accepted for compose.
fn compose_query_agrees(q: &FilesQuery, body: &ComposeBody) -> Result<(), String> {
    if q.signature.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(
            "POST /files/compose does not accept URL signatures (they cover one path, and compose reads and deletes several): send the access token in X-Access-Token".into(),
        );
    }
    if let Some(p) = q.path.as_deref()
        && p != body.destination
    {
        return Err(format!(
            "the query's path '{p}' differs from the body's destination '{}': send one, or the same in both",
            body.destination
        ));
    }
    if let Some(u) = q.username.as_deref()
        && Some(u) != body.username.as_deref()
    {
        return Err(format!(
            "the query's username '{u}' differs from the body's username '{}': send one, or the same in both",
            body.username.as_deref().unwrap_or("")
        ));
    }
    Ok(())
}

/// `POST /files/compose`: concatenates `source_paths` into `destination` (written like an
/// upload, so a failure keeps the original), deletes the sources, returns the entry.
pub(super) async fn compose(
    AxState(state): AxState<Arc<State>>,
    req: Request<Body>,
) -> Result<Response<Body>, FilesError> {
    // The access token was checked before routing (compose is not exempt): a `/files` URL
    // signature covers one path and operation, not the sources compose reads and deletes.
    let q = query(req.uri())?;
    let (parts, body) = req.into_parts();
    let bytes = super::super::json_body(
        &parts.headers,
        body,
        state.limits().max_json_body_bytes,
        "POST /files/compose",
    )
    .await
    .map_err(|(status, message)| FilesError::new(status, message))?;
    let parsed: ComposeBody = serde_json::from_slice(&bytes)
        .map_err(|e| FilesError::bad(format!("invalid compose body: {e}")))?;
    compose_query_agrees(&q, &parsed).map_err(FilesError::bad)?;
    if parsed.source_paths.is_empty() {
        return Err(FilesError::bad("source_paths must not be empty"));
    }
    if parsed.destination.is_empty() {
        return Err(FilesError::bad("destination must not be empty"));
    }
    let user = lookup_user(&state, parsed.username.as_deref())?;
    let destination = resolve(&state, &user, &parsed.destination)?;
    let mut sources = Vec::new();
    for s in &parsed.source_paths {
        sources.push(resolve(&state, &user, s)?);
    }
    let srcs = sources.clone();
    let opened = blocking(move || {
        let mut files = Vec::with_capacity(srcs.len());
        for p in &srcs {
            match open_regular(p) {
                Ok((f, m)) => files.push((f, m.len())),
                Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(FilesError::new(
                        StatusCode::NOT_FOUND,
                        format!("source '{}' does not exist", p.display()),
                    ));
                }
                Err(OpenError::Io(e)) => {
                    return Err(FilesError::io(
                        &e,
                        &format!("cannot open the source '{}'", p.display()),
                    ));
                }
                Err(OpenError::NotRegular(kind)) => {
                    return Err(FilesError::bad(format!(
                        "source '{}' is {kind}, not a regular file",
                        p.display()
                    )));
                }
            }
        }
        Ok(files)
    })
    .await??;
    let chunks =
        futures::stream::iter(opened).flat_map(|(f, len)| files_io::read_stream(f, 0, len));
    super::upload::write_file(&state, &user, destination.clone(), chunks).await?;
    let dest = destination.clone();
    let entry = blocking(move || {
        for s in &sources {
            if s != &dest {
                let _ = std::fs::remove_file(s);
            }
        }
        entry_info(&dest, &dest)
    })
    .await?
    .map_err(|e| {
        FilesError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot stat '{}': {e}", destination.display()),
        )
    })?;
    let body = serde_json::json!({
        "path": entry.path,
        "name": entry.name,
        "type": if entry.r#type == e2b_envd_proto::filesystem::FileType::Directory as i32 { "directory" } else { "file" },
        "size": entry.size,
        "mode": entry.mode,
        "permissions": entry.permissions,
        "owner": entry.owner,
        "group": entry.group,
    });
    let mut resp = Response::new(Body::from(body.to_string()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}
