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
const WEB_CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc-web+proto");
/// gRPC-Web's flag for the body frame that carries the trailers.
const WEB_TRAILERS_FLAG: u8 = 0x80;

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

/// How a server stream's response is framed: gRPC over HTTP/2 (trailers as HTTP trailers) or
/// binary gRPC-Web over HTTP/1.1 (trailers as the body's last frame, flag `0x80`, as tonic-web
/// writes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Grpc,
    Web,
}

impl Framing {
    fn content_type(self) -> HeaderValue {
        match self {
            Self::Grpc => CONTENT_TYPE,
            Self::Web => WEB_CONTENT_TYPE,
        }
    }

    /// The frame that ends the stream with `status`.
    fn end_frame(self, status: &Status) -> Frame<Bytes> {
        match self {
            Self::Grpc => Frame::trailers(status_headers(status)),
            Self::Web => Frame::data(web_trailers_frame(status)),
        }
    }

    /// A trailers-only response carrying `status` (both framings carry it in the headers).
    pub(super) fn error_response(self, status: &Status) -> Response<Body> {
        let mut resp = Response::new(Body::empty());
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, self.content_type());
        resp.headers_mut().extend(status_headers(status));
        resp
    }

    /// The streamed response: every message enveloped (payloads as their own frames,
    /// uncopied), then the end of the stream.
    pub(super) fn stream_response(self, inner: ByteStream) -> Response<Body> {
        let frames = stream_items(inner, None).flat_map(move |item| {
            let frames: Vec<Frame<Bytes>> = match item {
                StreamItem::Message(msg) => msg.into_frames(0).map(Frame::data).collect(),
                StreamItem::End(result) => {
                    vec![self.end_frame(&result.err().unwrap_or_else(|| Status::ok("")))]
                }
            };
            futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>))
        });
        let mut resp = Response::new(Body::new(http_body_util::StreamBody::new(frames)));
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, self.content_type());
        resp
    }
}

/// The trailers as gRPC-Web's last body frame: flag `0x80`, length, `name:value\r\n` lines
/// (what tonic-web writes).
fn web_trailers_frame(status: &Status) -> Bytes {
    let mut block = Vec::new();
    for (name, value) in &status_headers(status) {
        block.extend_from_slice(name.as_str().as_bytes());
        block.push(b':');
        block.extend_from_slice(value.as_bytes());
        block.extend_from_slice(b"\r\n");
    }
    super::encode_envelope(WEB_TRAILERS_FLAG, &block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_trailers_frames_are_tonic_webs() {
        let ok = web_trailers_frame(&Status::ok(""));
        assert_eq!(&ok[..], b"\x80\0\0\0\x0fgrpc-status:0\r\n");
        let err = web_trailers_frame(&Status::not_found("no such process"));
        let text = std::str::from_utf8(&err[5..]).unwrap_or_default();
        assert_eq!(err[0], WEB_TRAILERS_FLAG);
        assert_eq!(err.len() - 5, text.len());
        assert!(text.contains("grpc-status:5\r\n"), "{text}");
        assert!(
            text.contains("grpc-message:no%20such%20process\r\n"),
            "{text}"
        );
    }
}
