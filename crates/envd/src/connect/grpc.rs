//! gRPC framing for server-streaming procedures: the request is one enveloped protobuf
//! message, the response a sequence of enveloped messages followed by trailers carrying
//! `grpc-status` (and `grpc-message`). Errors before the first message are a trailers-only
//! response, as tonic sends.

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt as _;
use http::{HeaderMap, HeaderValue, Response, header};
use http_body::Frame;
use tonic::Status;

use super::{ByteStream, StreamItem, stream_items};

const CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc");

/// Refuses what this path does not serve: non-POST methods and compressed requests.
pub(super) fn check_request(parts: &http::request::Parts) -> Result<(), Status> {
    if parts.method != http::Method::POST {
        return Err(Status::unimplemented("gRPC procedures only accept POST"));
    }
    match parts
        .headers
        .get("grpc-encoding")
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
    {
        None => Ok(()),
        Some(v) if v.is_empty() || v == "identity" => Ok(()),
        Some(v) => Err(Status::unimplemented(format!(
            "Content is compressed with `{v}` which isn't supported"
        ))),
    }
}

fn status_headers(status: &Status) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if status.add_header(&mut headers).is_err() {
        // The message cannot be a header value even percent-encoded; keep the code.
        headers.insert("grpc-status", HeaderValue::from(status.code() as i32));
    }
    headers
}

/// A trailers-only response carrying `status`.
pub(super) fn error_response(status: &Status) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, CONTENT_TYPE);
    resp.headers_mut().extend(status_headers(status));
    resp
}

/// The streamed response: every message enveloped (payloads as their own frames, uncopied),
/// then the trailers.
pub(super) fn stream_response(inner: ByteStream) -> Response<Body> {
    let frames = stream_items(inner, None).flat_map(|item| {
        let frames: Vec<Frame<Bytes>> = match item {
            StreamItem::Message(msg) => msg.into_frames(0).map(Frame::data).collect(),
            StreamItem::End(result) => {
                let status = result.err().unwrap_or_else(|| Status::ok(""));
                vec![Frame::trailers(status_headers(&status))]
            }
        };
        futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>))
    });
    let mut resp = Response::new(Body::new(http_body_util::StreamBody::new(frames)));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, CONTENT_TYPE);
    resp
}
