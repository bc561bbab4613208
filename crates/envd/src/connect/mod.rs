//! A small server for the [Connect protocol](https://connectrpc.com/docs/protocol) on top of
//! axum/hyper, calling **tonic service implementations**.
//!
//! Each RPC is registered once in a [`ConnectRouter`] with a closure that calls the tonic
//! service trait method. The router decodes the request (JSON via pbjson serde, or binary
//! protobuf), builds a [`tonic::Request`] whose metadata holds the HTTP headers, calls the
//! closure and encodes the answer in Connect framing:
//!
//! - unary: bare bodies, `application/json` or `application/proto`; errors are non-2xx JSON
//!   `{"code","message"}` with the status from the Connect spec;
//! - server streaming and client streaming: `application/connect+json` or
//!   `application/connect+proto`, 5-byte envelopes, a final end-stream envelope (flag `0x02`)
//!   holding `{}` or `{"error":{...}}`, HTTP 200 even for errors;
//! - `Connect-Timeout-Ms` bounds the call (the stream ends with `deadline_exceeded`);
//! - unsupported content types get 415, compressed messages `unimplemented`, messages over the
//!   configured limit `resource_exhausted`.
//!
//! Registering another service takes a few lines; see [`ConnectRouter::unary`] and
//! `docs/envd.md`.

mod codec;
mod envelope;
mod errors;
mod grpc;
pub(crate) use grpc::Framing;
mod payload;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use tokio::time::Instant;
use tonic::Status;
use tonic::metadata::MetadataMap;

pub(crate) use codec::{Codec, ConnectMessage};
pub(crate) use envelope::{END_STREAM_FLAG, encode_envelope, parse_single_envelope};
pub(crate) use errors::{error_json, http_status};
use payload::Encoded;
pub(crate) use payload::StreamMessage;
pub(crate) use payload::nested_bytes_prefix;

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type ByteStream = BoxStream<'static, Result<Encoded, Status>>;
type UnaryFn =
    Arc<dyn Fn(MetadataMap, Bytes, Codec) -> BoxFut<Result<Bytes, Status>> + Send + Sync>;
type ServerStreamFn =
    Arc<dyn Fn(MetadataMap, Bytes, Codec) -> BoxFut<Result<ByteStream, Status>> + Send + Sync>;
type ClientStreamFn =
    Arc<dyn Fn(MetadataMap, Body, Codec, usize) -> BoxFut<Result<Bytes, Status>> + Send + Sync>;

#[derive(Clone)]
enum Method {
    Unary(UnaryFn),
    ServerStream(ServerStreamFn),
    ClientStream(ClientStreamFn),
}

/// A table of Connect procedures (`/package.Service/Method` → handler).
///
/// Cheap to clone (the handlers are `Arc`s).
#[derive(Clone)]
pub(crate) struct ConnectRouter {
    methods: HashMap<String, Method>,
    max_message_bytes: usize,
}

impl std::fmt::Debug for ConnectRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.methods.keys().collect();
        names.sort();
        f.debug_struct("ConnectRouter")
            .field("methods", &names)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

fn make_request<T>(metadata: MetadataMap, message: T) -> tonic::Request<T> {
    tonic::Request::from_parts(metadata, tonic::Extensions::new(), message)
}

impl ConnectRouter {
    /// An empty router accepting messages up to `max_message_bytes`.
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        Self {
            methods: HashMap::new(),
            max_message_bytes,
        }
    }

    /// Whether any procedure of the service prefix of `path` (`/process.Process/`) is registered.
    pub(crate) fn serves_service_of(&self, path: &str) -> bool {
        let Some(idx) = path.rfind('/') else {
            return false;
        };
        let prefix = &path[..=idx];
        idx > 0 && self.methods.keys().any(|k| k.starts_with(prefix))
    }

    /// Registers a unary procedure. `f` is typically a call of the tonic service trait method:
    ///
    /// ```ignore
    /// let svc = Arc::new(MyService::new());
    /// router.unary("/pkg.Svc/Method", move |req| {
    ///     let svc = svc.clone();
    ///     async move { pkg::svc_server::Svc::method(&*svc, req).await }
    /// })
    /// ```
    pub(crate) fn unary<Req, Resp, F, Fut>(mut self, path: &str, f: F) -> Self
    where
        Req: ConnectMessage,
        Resp: ConnectMessage,
        F: Fn(tonic::Request<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler: UnaryFn = Arc::new(move |md, body, codec| {
            let f = f.clone();
            Box::pin(async move {
                let msg: Req = codec.decode(&body)?;
                let resp = f(make_request(md, msg)).await?;
                codec.encode(resp.get_ref())
            })
        });
        self.methods
            .insert(path.to_string(), Method::Unary(handler));
        self
    }

    /// Registers a server-streaming procedure (`f` returns a tonic streaming response). It is
    /// served over Connect and, for `application/grpc` requests, over gRPC too (see
    /// [`handle_grpc`](Self::handle_grpc)).
    pub(crate) fn server_stream<Req, Resp, S, F, Fut>(mut self, path: &str, f: F) -> Self
    where
        Req: ConnectMessage,
        Resp: StreamMessage,
        S: futures::Stream<Item = Result<Resp, Status>> + Send + 'static,
        F: Fn(tonic::Request<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<tonic::Response<S>, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler: ServerStreamFn = Arc::new(move |md, body, codec| {
            let f = f.clone();
            Box::pin(async move {
                let msg: Req = codec.decode(&body)?;
                let resp = f(make_request(md, msg)).await?;
                let stream = resp
                    .into_inner()
                    .map(move |item| item.and_then(|m| encode_stream(codec, &m)));
                Ok(stream.boxed())
            })
        });
        self.methods
            .insert(path.to_string(), Method::ServerStream(handler));
        self
    }

    /// Registers a client-streaming procedure (`f` receives a [`tonic::Streaming`] of requests).
    pub(crate) fn client_stream<Req, Resp, F, Fut>(mut self, path: &str, f: F) -> Self
    where
        Req: ConnectMessage,
        Resp: ConnectMessage,
        F: Fn(tonic::Request<tonic::Streaming<Req>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler: ClientStreamFn = Arc::new(move |md, body, codec, max| {
            let f = f.clone();
            Box::pin(async move {
                let streaming = tonic::Streaming::new_request(
                    codec::ConnectDecoder::<Req>::new(codec),
                    body,
                    None,
                    Some(max),
                );
                let resp = f(make_request(md, streaming)).await?;
                codec.encode(resp.get_ref())
            })
        });
        self.methods
            .insert(path.to_string(), Method::ClientStream(handler));
        self
    }

    /// Serves one HTTP request addressed to a registered procedure. Never panics on input;
    /// every failure becomes a Connect error response.
    pub(crate) async fn handle(&self, req: Request<Body>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let parsed = codec::parse_content_type(crate::rest::content_type(req.headers()));
        let Some(method) = self.methods.get(&path).cloned() else {
            let status = Status::unimplemented(format!("{path} is not implemented"));
            return match parsed {
                Some((true, codec)) => stream_error_response(codec, &status),
                _ => unary_error_response(StatusCode::NOT_FOUND, &status),
            };
        };
        if req.method() != http::Method::POST {
            let mut resp = unary_error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                &Status::unimplemented("Connect procedures only accept POST"),
            );
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            return resp;
        }
        let streaming_kind = !matches!(method, Method::Unary(_));
        let codec = match parsed {
            Some((streaming, codec)) if streaming == streaming_kind => codec,
            _ => return unsupported_media_type(streaming_kind),
        };
        let (parts, body) = req.into_parts();
        let headers = parts.headers;
        if let Err(status) = check_compression(&headers, streaming_kind) {
            return self.error_for(streaming_kind, codec, status);
        }
        let deadline = match parse_timeout(&headers) {
            Ok(d) => d.map(|d| Instant::now() + d),
            Err(status) => return self.error_for(streaming_kind, codec, status),
        };
        let metadata = MetadataMap::from_headers(headers);
        match method {
            Method::Unary(f) => {
                let result = async {
                    let bytes = read_body(body, self.max_message_bytes).await?;
                    with_deadline(deadline, f(metadata, bytes, codec)).await
                }
                .await;
                match result {
                    Ok(bytes) => {
                        let mut resp = Response::new(Body::from(bytes));
                        resp.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(codec.unary_content_type()),
                        );
                        resp
                    }
                    Err(status) => unary_error_response(http_status(status.code()), &status),
                }
            }
            Method::ServerStream(f) => {
                let call = self.call_server_stream(&f, metadata, body, codec);
                match with_deadline(deadline, call).await {
                    Ok(stream) => stream_response(codec, stream, deadline),
                    Err(status) => stream_error_response(codec, &status),
                }
            }
            Method::ClientStream(f) => {
                let result =
                    with_deadline(deadline, f(metadata, body, codec, self.max_message_bytes)).await;
                let frames: Vec<Result<Bytes, Infallible>> = match result {
                    Ok(msg) => vec![Ok(encode_envelope(0, &msg)), Ok(end_stream_ok())],
                    Err(status) => vec![Ok(end_stream_error(&status))],
                };
                streaming_http_response(codec, Body::from_stream(futures::stream::iter(frames)))
            }
        }
    }

    /// Whether `path` is a server-streaming procedure, which [`handle_grpc`](Self::handle_grpc)
    /// serves.
    pub(crate) fn is_server_stream(&self, path: &str) -> bool {
        matches!(self.methods.get(path), Some(Method::ServerStream(_)))
    }

    /// Serves a gRPC (HTTP/2, `application/grpc`) or binary gRPC-Web (HTTP/1.1,
    /// `application/grpc-web[+proto]`) request for a server-streaming procedure, as `framing`
    /// says. Same handler as Connect; output payloads go to the socket without being copied
    /// into an encode buffer (see [`StreamMessage`]). Other gRPC calls (and gRPC-Web's text
    /// encoding) are left to tonic and tonic-web.
    pub(crate) async fn handle_grpc(
        &self,
        req: Request<Body>,
        framing: grpc::Framing,
    ) -> Response<Body> {
        let Some(Method::ServerStream(f)) = self.methods.get(req.uri().path()).cloned() else {
            return framing.error_response(&Status::unimplemented(format!(
                "{} is not a server-streaming procedure",
                req.uri().path()
            )));
        };
        let (parts, body) = req.into_parts();
        if let Err(status) = grpc::check_request(&parts) {
            return framing.error_response(&status);
        }
        let metadata = MetadataMap::from_headers(parts.headers);
        match self
            .call_server_stream(&f, metadata, body, Codec::Proto)
            .await
        {
            Ok(stream) => framing.stream_response(stream),
            Err(status) => framing.error_response(&status),
        }
    }

    /// Reads a server-streaming request (exactly one enveloped message) and calls `f` with it.
    async fn call_server_stream(
        &self,
        f: &ServerStreamFn,
        metadata: MetadataMap,
        body: Body,
        codec: Codec,
    ) -> Result<ByteStream, Status> {
        let bytes = read_body(body, self.max_message_bytes.saturating_add(5)).await?;
        let message = parse_single_envelope(&bytes, self.max_message_bytes)?;
        f(metadata, message, codec).await
    }

    fn error_for(&self, streaming: bool, codec: Codec, status: Status) -> Response<Body> {
        if streaming {
            stream_error_response(codec, &status)
        } else {
            unary_error_response(http_status(status.code()), &status)
        }
    }
}

fn check_compression(headers: &HeaderMap, streaming: bool) -> Result<(), Status> {
    let name = if streaming {
        "connect-content-encoding"
    } else {
        "content-encoding"
    };
    match headers
        .get(name)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
    {
        None => Ok(()),
        Some(v) if v.is_empty() || v == "identity" => Ok(()),
        Some(v) => Err(Status::unimplemented(format!(
            "unsupported compression \"{v}\": this server only accepts identity"
        ))),
    }
}

/// Parses `Connect-Timeout-Ms` (≤ 10 ASCII digits). `0` or absent = none.
pub(crate) fn parse_timeout(headers: &HeaderMap) -> Result<Option<Duration>, Status> {
    let Some(v) = headers.get(e2b_envd_proto::wire::headers::CONNECT_TIMEOUT_MS) else {
        return Ok(None);
    };
    let s = v.to_str().unwrap_or("").trim();
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Status::invalid_argument(format!(
            "invalid Connect-Timeout-Ms header {s:?}: want up to 10 digits"
        )));
    }
    let ms: u64 = s
        .parse()
        .map_err(|_| Status::invalid_argument("invalid Connect-Timeout-Ms header"))?;
    Ok(if ms == 0 {
        None
    } else {
        Some(Duration::from_millis(ms))
    })
}

async fn with_deadline<T>(
    deadline: Option<Instant>,
    fut: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match deadline {
        None => fut.await,
        Some(d) => match tokio::time::timeout_at(d, fut).await {
            Ok(r) => r,
            Err(_) => Err(Status::deadline_exceeded(
                "the Connect-Timeout-Ms deadline expired",
            )),
        },
    }
}

/// Reads a whole request body, refusing more than `limit` bytes.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, Status> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(Status::resource_exhausted(format!(
                    "request message larger than the {limit} byte limit"
                )))
            } else {
                Err(Status::internal(format!(
                    "reading the request body failed: {e}"
                )))
            }
        }
    }
}

/// Encodes one streamed message, exposing its payload when the codec is binary.
fn encode_stream<T: StreamMessage>(codec: Codec, msg: &T) -> Result<Encoded, Status> {
    if codec == Codec::Proto
        && let Some((head, payload)) = msg.split_payload()
    {
        return Ok(Encoded {
            head,
            payload: Some(payload),
        });
    }
    codec.encode(msg).map(Encoded::whole)
}

fn end_stream_ok() -> Bytes {
    encode_envelope(END_STREAM_FLAG, b"{}")
}

fn end_stream_error(status: &Status) -> Bytes {
    let body = serde_json::json!({ "error": error_json(status) });
    encode_envelope(END_STREAM_FLAG, body.to_string().as_bytes())
}

fn streaming_http_response(codec: Codec, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(codec.stream_content_type()),
    );
    resp
}

fn stream_error_response(codec: Codec, status: &Status) -> Response<Body> {
    streaming_http_response(codec, Body::from(end_stream_error(status)))
}

fn unary_error_response(http: StatusCode, status: &Status) -> Response<Body> {
    let mut resp = Response::new(Body::from(error_json(status).to_string()));
    *resp.status_mut() = http;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn unsupported_media_type(streaming: bool) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
    let accept = if streaming {
        "application/connect+json, application/connect+proto"
    } else {
        "application/json, application/proto"
    };
    resp.headers_mut()
        .insert("accept-post", HeaderValue::from_static(accept));
    resp
}

/// A server stream's messages, then its end (`Ok` or the error that ended it).
#[derive(Debug)]
enum StreamItem {
    Message(Encoded),
    End(Result<(), Status>),
}

/// Polls `inner` until its end, bounded by `deadline` (which ends it with `deadline_exceeded`).
fn stream_items(
    inner: ByteStream,
    deadline: Option<Instant>,
) -> impl futures::Stream<Item = StreamItem> + Send {
    futures::stream::unfold(Some(inner), move |inner| async move {
        let mut inner = inner?;
        let next = match deadline {
            None => inner.next().await,
            Some(d) => tokio::select! {
                biased;
                n = inner.next() => n,
                _ = tokio::time::sleep_until(d) => Some(Err(Status::deadline_exceeded(
                    "the Connect-Timeout-Ms deadline expired",
                ))),
            },
        };
        Some(match next {
            Some(Ok(msg)) => (StreamItem::Message(msg), Some(inner)),
            Some(Err(status)) => (StreamItem::End(Err(status)), None),
            None => (StreamItem::End(Ok(())), None),
        })
    })
}

fn stream_response(codec: Codec, inner: ByteStream, deadline: Option<Instant>) -> Response<Body> {
    let frames = stream_items(inner, deadline).flat_map(|item| {
        let frames: Vec<Bytes> = match item {
            StreamItem::Message(msg) => msg.into_frames(0).collect(),
            StreamItem::End(Ok(())) => vec![end_stream_ok()],
            StreamItem::End(Err(status)) => vec![end_stream_error(&status)],
        };
        futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>))
    });
    streaming_http_response(codec, Body::from_stream(frames))
}
