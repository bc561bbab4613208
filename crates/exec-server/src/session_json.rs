//! Sessions with JSON responses: a layer in front of rmcp's Streamable HTTP service.
//!
//! rmcp answers every request POSTed inside a session with a `text/event-stream` body, even
//! when that stream carries only the one JSON-RPC response. For a client that accepts
//! `application/json`, [`to_json`] reads that stream up to its first data event: when it is
//! the JSON-RPC response, the answer becomes `application/json` with that response as its
//! body (headers such as `Mcp-Session-Id` kept); when it is anything else (a progress
//! notification, a server request), or the stream ends, errs, grows past the buffer bound or
//! stays silent past the wait, the buffered bytes are replayed ahead of the rest of the
//! stream, so the client gets the plain SSE answer it would have got without this layer and
//! no message is lost.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::HeaderMap;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};

/// Bounds of the look-ahead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The most bytes buffered while looking for the first data event; past it, SSE.
    pub(crate) max_buffer: usize,
    /// The longest wait for the first data event; past it, SSE.
    pub(crate) wait: Duration,
}

/// Whether the client's `Accept` names `application/json`.
pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|m| {
            m.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        })
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The length of the first complete event in `buf` (through its blank line), if any.
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|p| p + 2);
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|p| p + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The `data` of one SSE event (its data lines joined by `\n`); comments and other fields are
/// skipped. Empty for keep-alive comments and priming events.
fn event_data(event: &[u8]) -> Vec<u8> {
    let mut data: Vec<u8> = Vec::new();
    let mut first = true;
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let value = if line == b"data" {
            &b""[..]
        } else if let Some(v) = line.strip_prefix(b"data:") {
            v.strip_prefix(b" ").unwrap_or(v)
        } else {
            continue;
        };
        if !first {
            data.push(b'\n');
        }
        first = false;
        data.extend_from_slice(value);
    }
    data
}

/// Whether `data` is one JSON-RPC response (a `result` or an `error`, no `method`).
fn is_response(data: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        id: Option<serde::de::IgnoredAny>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(data).is_ok_and(|p| {
        p.method.is_none() && p.id.is_some() && (p.result.is_some() ^ p.error.is_some())
    })
}

/// What the look-ahead found.
enum Found {
    /// The first data event is the response: its data.
    Response(Vec<u8>),
    /// Anything else: answer SSE.
    Sse,
}

/// Answers `resp` as `application/json` when it is an SSE stream whose first message is the
/// JSON-RPC response; otherwise returns it unchanged, or (once its stream was read from) with
/// the bytes read replayed ahead of the rest. Only for POSTs whose client accepts JSON.
///
/// # Cancel safety
///
/// Dropping the future drops the inner stream, as a client disconnect would.
pub(crate) async fn to_json(resp: Response, limits: Limits) -> Response {
    if !resp.status().is_success() || !is_event_stream(resp.headers()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    let mut scanned = 0usize;
    let deadline = tokio::time::Instant::now() + limits.wait;
    let mut tail: Option<axum::Error> = None;
    let found = 'look: loop {
        while let Some(len) = event_end(&buf[scanned..]) {
            let data = event_data(&buf[scanned..scanned + len]);
            scanned += len;
            if data.is_empty() {
                continue;
            }
            if is_response(&data) {
                break 'look Found::Response(data);
            }
            break 'look Found::Sse;
        }
        if buf.len() > limits.max_buffer {
            break Found::Sse;
        }
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => buf.extend_from_slice(&chunk),
            Ok(Some(Err(e))) => {
                tail = Some(e);
                break Found::Sse;
            }
            Ok(None) => break Found::Sse,
            Err(_) => break Found::Sse,
        }
    };
    match found {
        Found::Response(data) => {
            parts.headers.remove(CONTENT_LENGTH);
            parts.headers.remove(http::header::CACHE_CONTROL);
            parts.headers.insert(
                CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Response::from_parts(parts, Body::from(data))
        }
        Found::Sse => {
            let head: Bytes = buf.freeze();
            let head = futures::stream::iter(
                std::iter::once(Ok::<Bytes, axum::Error>(head)).chain(tail.map(Err)),
            );
            Response::from_parts(parts, Body::from_stream(head.chain(stream)))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use http_body_util::BodyExt;

    const LIMITS: Limits = Limits {
        max_buffer: 1 << 20,
        wait: Duration::from_secs(10),
    };

    /// A synthetic inner answer: SSE whose body arrives in `chunks`, then `rest` (never ends
    /// when `open`).
    fn sse(chunks: Vec<&'static str>, open: bool) -> Response {
        let s = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, axum::Error>(Bytes::from(c))),
        );
        let body = if open {
            Body::from_stream(s.chain(futures::stream::pending()))
        } else {
            Body::from_stream(s)
        };
        http::Response::builder()
            .header(CONTENT_TYPE, "text/event-stream")
            .header("mcp-session-id", "abc")
            .body(body)
            .unwrap()
    }

    async fn body_text(r: Response) -> String {
        String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn the_response_becomes_json_past_priming_and_pings() {
        // Split mid-event and mid-line; the stream stays open after the response (as rmcp's
        // may): the answer must not wait for its end.
        let r = sse(
            vec![
                "id: 0\nretry: 3000\ndata:\n\n:\n\n",
                ": ping\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,",
                "\"result\":{\"ok\":true}}\nid: 0/1\n\n",
            ],
            true,
        );
        let r = to_json(r, LIMITS).await;
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(r.headers()["mcp-session-id"], "abc");
        let v: serde_json::Value = serde_json::from_str(&body_text(r).await).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"jsonrpc":"2.0","id":7,"result":{"ok":true}})
        );
    }

    #[tokio::test]
    async fn a_notification_first_falls_back_to_sse_losing_nothing() {
        let events = vec![
            "id: 0\ndata:\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n",
        ];
        let whole: String = events.concat();
        let r = to_json(sse(events, false), LIMITS).await;
        assert!(is_event_stream(r.headers()));
        assert_eq!(body_text(r).await, whole);
    }

    #[tokio::test]
    async fn a_server_request_first_falls_back_to_sse() {
        let events = vec![
            "data: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"roots/list\"}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n",
        ];
        let whole: String = events.concat();
        let r = to_json(sse(events, false), LIMITS).await;
        assert!(is_event_stream(r.headers()));
        assert_eq!(body_text(r).await, whole);
    }

    #[tokio::test]
    async fn over_the_buffer_bound_falls_back_to_sse() {
        let events = vec![
            "data: {\"jsonrpc\":\"2.0\",\"id\":7,",
            "\"result\":{\"text\":\"0123456789012345678901234567890123456789\"}}\n\n",
        ];
        let whole: String = events.concat();
        let small = Limits {
            max_buffer: 16,
            ..LIMITS
        };
        let r = to_json(sse(events, false), small).await;
        assert!(is_event_stream(r.headers()));
        assert_eq!(body_text(r).await, whole);
    }

    #[tokio::test]
    async fn silence_past_the_wait_falls_back_to_sse_and_keeps_streaming() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, axum::Error>>();
        tx.unbounded_send(Ok(Bytes::from_static(b"id: 0\ndata:\n\n")))
            .unwrap();
        let inner = http::Response::builder()
            .header(CONTENT_TYPE, "text/event-stream")
            .body(Body::from_stream(rx))
            .unwrap();
        let short = Limits {
            wait: Duration::from_millis(50),
            ..LIMITS
        };
        let r = to_json(inner, short).await;
        assert!(is_event_stream(r.headers()));
        let late = "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n";
        tx.unbounded_send(Ok(Bytes::from_static(late.as_bytes())))
            .unwrap();
        drop(tx);
        assert_eq!(body_text(r).await, format!("id: 0\ndata:\n\n{late}"));
    }

    #[tokio::test]
    async fn json_and_accepted_answers_pass_untouched() {
        let r = http::Response::builder()
            .status(202)
            .body(Body::empty())
            .unwrap();
        assert_eq!(to_json(r, LIMITS).await.status(), 202);
        let r = http::Response::builder()
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from("{}"))
            .unwrap();
        assert_eq!(body_text(to_json(r, LIMITS).await).await, "{}");
    }

    #[test]
    fn accept_header() {
        let mut h = HeaderMap::new();
        assert!(!accepts_json(&h));
        h.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("text/event-stream"),
        );
        assert!(!accepts_json(&h));
        h.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("text/event-stream, Application/JSON;q=0.9"),
        );
        assert!(accepts_json(&h));
    }
}
