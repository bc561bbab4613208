//! Server-streaming RPCs decoded without copying payloads.
//!
//! tonic's own decoder copies every body frame into one buffer before it decodes a message. For
//! process output that is a copy of every byte a command prints. [`ServerStream`] keeps the
//! received frames as they are (`Bytes`) and decodes each message straight from them: a
//! `bytes` field that lies within one frame (a whole output chunk from our daemon, which sends
//! a chunk's few header bytes and the chunk itself as separate frames) is handed out as a slice
//! of that frame. Fields that straddle frames are gathered with one copy, as tonic would,
//! unless the stream was told which `bytes` fields it may deliver in pieces
//! ([`ServerStream::split_payloads`]): such a field is then handed out as one message per
//! received frame it spans, each a slice of that frame, as soon as the frame is in.
//!
//! Status handling follows tonic's client: `grpc-status` in the response headers
//! (trailers-only), an HTTP status other than 200 mapped as gRPC specifies, `grpc-status` in
//! the trailers, and a stream that ends without one is `unknown`.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut as _, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, TE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body as _;
use tonic::body::Body;
use tonic::{Code, Status};
use tower::ServiceExt as _;

use crate::channel::EnvdChannel;

/// Largest message a [`ServerStream`] accepts (envd sends output in chunks of at most 1 MiB).
pub const MAX_STREAM_MESSAGE_BYTES: usize = 64 << 20;

/// A server-streaming RPC's messages, decoded from the received frames without copying them.
/// Ends after the final status; a non-OK status is the last item.
pub struct ServerStream<M> {
    body: Body,
    frames: Frames,
    /// The response ended (trailers seen, an error returned, or the body finished).
    done: bool,
    /// Which field paths hold a `bytes` payload that may be delivered in pieces.
    split: Option<fn(&[u32]) -> bool>,
    /// The payload being delivered in pieces, when one is.
    piece: Option<Piece>,
    /// gRPC-Web framing: the status comes in a flagged frame of the body.
    web: bool,
    /// The status of a gRPC-Web trailers frame, once decoded.
    web_status: Option<Status>,
    _message: PhantomData<fn() -> M>,
}

/// Deepest field path [`ServerStream::split_payloads`] looks at.
const MAX_SPLIT_DEPTH: usize = 4;
/// How many bytes of a message's start are enough to find a split payload's field path.
const SPLIT_PEEK: usize = 5 + MAX_SPLIT_DEPTH * 15;

/// A payload delivered in pieces: its field path and the bytes of it still to come.
#[derive(Debug, Clone, Copy)]
struct Piece {
    path: [u32; MAX_SPLIT_DEPTH],
    depth: usize,
    remaining: usize,
}

/// What the start of a buffered message says about splitting it.
enum Prefix {
    /// Not a splittable payload message: decode it whole.
    No,
    /// Too few bytes buffered to tell.
    NeedMore,
    /// A splittable payload: `header` bytes (envelope and field tags and lengths) before it.
    Payload { piece: Piece, header: usize },
}

impl<M> std::fmt::Debug for ServerStream<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerStream")
            .field("buffered", &self.frames.len)
            .field("done", &self.done)
            .field("piece", &self.piece)
            .finish_non_exhaustive()
    }
}

/// How a call's messages and final status are framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// gRPC over HTTP/2: the status in HTTP trailers.
    Grpc,
    /// gRPC-Web (binary) over HTTP/1.1: the status in a last, flagged frame of the body.
    GrpcWeb,
}

/// gRPC-Web's flag for the frame that carries the trailers.
const WEB_TRAILERS_FLAG: u8 = 0x80;

/// Calls `path` with `request` on `channel` and returns its message stream once the response
/// headers are in (an error status in them, or a transport failure, is the `Err`).
pub(crate) async fn server_streaming<Req, Resp>(
    channel: EnvdChannel,
    framing: Framing,
    path: &'static str,
    request: tonic::Request<Req>,
) -> Result<ServerStream<Resp>, Status>
where
    Req: prost::Message,
    Resp: prost::Message + Default,
{
    let (metadata, _extensions, message) = request.into_parts();
    let len = message.encoded_len();
    let len32 = u32::try_from(len)
        .map_err(|_| Status::invalid_argument(format!("request of {len} bytes is too large")))?;
    let mut body = BytesMut::with_capacity(5 + len);
    body.put_u8(0);
    body.put_u32(len32);
    message
        .encode(&mut body)
        .map_err(|e| Status::internal(format!("cannot encode the request: {e}")))?;
    let mut req = Request::new(Body::new(http_body_util::Full::new(body.freeze())));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = http::Uri::from_static(path);
    *req.headers_mut() = metadata.into_headers();
    let (version, content_type) = match framing {
        Framing::Grpc => (http::Version::HTTP_2, "application/grpc"),
        Framing::GrpcWeb => (http::Version::HTTP_11, "application/grpc-web+proto"),
    };
    *req.version_mut() = version;
    let headers = req.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(TE, HeaderValue::from_static("trailers"));

    let resp = channel
        .oneshot(req)
        .await
        .map_err(|e| Status::from_error(Box::new(e)))?;
    let mut stream = ServerStream::from_response(resp)?;
    stream.web = framing == Framing::GrpcWeb;
    Ok(stream)
}

impl<M: prost::Message + Default> ServerStream<M> {
    fn from_response(resp: Response<Body>) -> Result<Self, Status> {
        let (parts, body) = resp.into_parts();
        let mut done = false;
        if let Some(status) = Status::from_header_map(&parts.headers) {
            if status.code() != Code::Ok {
                return Err(status);
            }
            // Trailers-only OK: nothing follows.
            done = true;
        } else if parts.status != StatusCode::OK {
            return Err(status_from_http(parts.status));
        }
        Ok(Self {
            body,
            frames: Frames::default(),
            done,
            split: None,
            piece: None,
            web: false,
            web_status: None,
            _message: PhantomData,
        })
    }

    /// Lets the stream deliver a large `bytes` field in pieces instead of gathering it with a
    /// copy when it spans several received frames (an HTTP/2 flow-control window or frame
    /// limit cut it): `is_payload` is given a field path (outermost field number first) and
    /// says whether the field there is such a payload.
    ///
    /// Only a message made of exactly one length-delimited field at every level of that path
    /// (as envd's output events are: `StartResponse.event` → `ProcessEvent.data` →
    /// `DataEvent.stdout`) is split, into messages of the same shape whose payloads, in order,
    /// are the original one; each piece is a slice of one received frame and is handed out as
    /// soon as that frame is in. Use it only where consecutive pieces mean the same as their
    /// concatenation (process output, whose chunk boundaries carry no meaning). Other messages
    /// are decoded whole, as before.
    #[must_use]
    pub fn split_payloads(mut self, is_payload: fn(&[u32]) -> bool) -> Self {
        self.split = Some(is_payload);
        self
    }

    /// Reads the field path at the start of a `len`-byte message whose envelope starts the
    /// buffered bytes.
    fn prefix(&self, len: usize, is_payload: fn(&[u32]) -> bool) -> Prefix {
        let want = (5 + len).min(SPLIT_PEEK);
        let (peeked, filled) = self.frames.peek_upto::<SPLIT_PEEK>(want);
        let head = &peeked[..filled];
        let end = 5 + len;
        let mut pos = 5;
        let mut piece = Piece {
            path: [0; MAX_SPLIT_DEPTH],
            depth: 0,
            remaining: 0,
        };
        while piece.depth < MAX_SPLIT_DEPTH {
            let mut rest = &head[pos.min(head.len())..];
            let before = rest.len();
            let (Ok(tag), Ok(field_len)) = (
                prost::encoding::decode_varint(&mut rest),
                prost::encoding::decode_varint(&mut rest),
            ) else {
                // A varint cut off by the end of what was peeked: more may tell, unless the
                // whole message (or all we look at) is here.
                return if head.len() < want {
                    Prefix::NeedMore
                } else {
                    Prefix::No
                };
            };
            pos += before - rest.len();
            let (Ok(field), Ok(field_len)) = (u32::try_from(tag >> 3), usize::try_from(field_len))
            else {
                return Prefix::No;
            };
            // Length-delimited and reaching exactly to the end of the message.
            if tag & 7 != 2 || field == 0 || pos.checked_add(field_len) != Some(end) {
                return Prefix::No;
            }
            piece.path[piece.depth] = field;
            piece.depth += 1;
            if is_payload(&piece.path[..piece.depth]) {
                piece.remaining = field_len;
                return Prefix::Payload { piece, header: pos };
            }
        }
        Prefix::No
    }

    /// The next piece of the payload being split, if a frame holds some of it.
    fn next_piece(&mut self, mut piece: Piece) -> Result<Option<M>, Status> {
        let Some(front) = self.frames.chunks.front() else {
            self.piece = Some(piece);
            return Ok(None);
        };
        let n = piece.remaining.min(front.len());
        let data = self.frames.copy_to_bytes(n);
        piece.remaining -= n;
        self.piece = (piece.remaining > 0).then_some(piece);
        let head = nested_bytes_prefix(&piece.path[..piece.depth], n);
        M::decode(head.chain(data))
            .map(Some)
            .map_err(|e| Status::internal(format!("cannot decode envd's message: {e}")))
    }

    /// Decodes the next complete message from the buffered frames, if there is one.
    fn decode_next(&mut self) -> Result<Option<M>, Status> {
        if let Some(piece) = self.piece.take() {
            return self.next_piece(piece);
        }
        let Some(header) = self.frames.peek::<5>() else {
            return Ok(None);
        };
        if header[0] & 1 != 0 {
            return Err(Status::internal(
                "envd sent a compressed message, which was not asked for",
            ));
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > MAX_STREAM_MESSAGE_BYTES {
            return Err(Status::resource_exhausted(format!(
                "envd sent a {len}-byte message; the limit is {MAX_STREAM_MESSAGE_BYTES}"
            )));
        }
        if self.web && header[0] & WEB_TRAILERS_FLAG != 0 {
            if self.frames.len < 5 + len {
                return Ok(None);
            }
            self.frames.advance(5);
            let block = self.frames.copy_to_bytes(len);
            self.web_status = Some(web_trailers_status(&block)?);
            return Ok(None);
        }
        if let Some(is_payload) = self.split {
            match self.prefix(len, is_payload) {
                Prefix::Payload { piece, header } if piece.remaining > 0 => {
                    self.frames.advance(header);
                    return self.next_piece(piece);
                }
                Prefix::NeedMore => return Ok(None),
                Prefix::Payload { .. } | Prefix::No => {}
            }
        }
        if self.frames.len < 5 + len {
            return Ok(None);
        }
        self.frames.advance(5);
        let mut message = (&mut self.frames).take(len);
        let decoded = M::decode(&mut message)
            .map_err(|e| Status::internal(format!("cannot decode envd's message: {e}")));
        // Whatever the decoder left of this message (only after an error) is dropped with it.
        let rest = message.remaining();
        self.frames.advance(rest);
        decoded.map(Some)
    }
}

impl<M: prost::Message + Default> futures_core::Stream for ServerStream<M> {
    type Item = Result<M, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match this.decode_next() {
                Ok(Some(m)) => return Poll::Ready(Some(Ok(m))),
                Ok(None) => {}
                Err(status) => {
                    this.done = true;
                    this.frames = Frames::default();
                    this.piece = None;
                    return Poll::Ready(Some(Err(status)));
                }
            }
            if let Some(status) = this.web_status.take() {
                this.done = true;
                if let Some(item) = this.end(status) {
                    return Poll::Ready(Some(item));
                }
            }
            if this.done {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.frames.push(data),
                    Err(frame) => {
                        this.done = true;
                        let status = frame
                            .into_trailers()
                            .ok()
                            .and_then(|t| Status::from_header_map(&t))
                            .unwrap_or_else(|| Status::unknown(MISSING_STATUS));
                        if let Some(item) = this.end(status) {
                            return Poll::Ready(Some(item));
                        }
                    }
                },
                Some(Err(status)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(status)));
                }
                None => {
                    this.done = true;
                    if let Some(item) = this.end(Status::unknown(MISSING_STATUS)) {
                        return Poll::Ready(Some(item));
                    }
                }
            }
        }
    }
}

const MISSING_STATUS: &str = "envd ended the stream without a grpc-status";

impl<M> ServerStream<M> {
    /// The stream's final status: `None` when it is OK and every message was complete.
    fn end(&mut self, status: Status) -> Option<Result<M, Status>> {
        if status.code() != Code::Ok {
            return Some(Err(status));
        }
        if self.frames.len > 0 || self.piece.is_some() {
            let left = self.frames.len + self.piece.take().map_or(0, |p| p.remaining);
            self.frames = Frames::default();
            return Some(Err(Status::internal(format!(
                "envd's stream ended inside a message ({left} bytes left over)"
            ))));
        }
        None
    }
}

/// The status in a gRPC-Web trailers block (`name: value` lines ended by CRLF); a block without
/// `grpc-status` is `unknown`.
fn web_trailers_status(block: &[u8]) -> Result<Status, Status> {
    let bad = |what: &str| Status::internal(format!("envd sent a bad gRPC-Web trailer: {what}"));
    let mut map = http::HeaderMap::new();
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| bad("a line without ':'"))?;
        let name = http::HeaderName::from_bytes(line[..colon].trim_ascii())
            .map_err(|_| bad("an invalid name"))?;
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii())
            .map_err(|_| bad("an invalid value"))?;
        map.append(name, value);
    }
    Ok(Status::from_header_map(&map).unwrap_or_else(|| Status::unknown(MISSING_STATUS)))
}

/// gRPC's mapping for a response without `grpc-status` and an HTTP status other than 200.
fn status_from_http(code: StatusCode) -> Status {
    let grpc = match code {
        StatusCode::BAD_REQUEST => Code::Internal,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::Unimplemented,
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(
        grpc,
        format!("envd answered HTTP {} without a grpc-status", code.as_u16()),
    )
}

/// The received body frames not yet decoded, as a [`Buf`] whose `copy_to_bytes` slices a frame
/// instead of copying when the bytes lie within it.
#[derive(Debug, Default)]
struct Frames {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Frames {
    fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.len += data.len();
            self.chunks.push_back(data);
        }
    }

    /// The first `N` bytes, if buffered.
    fn peek<const N: usize>(&self) -> Option<[u8; N]> {
        if self.len < N {
            return None;
        }
        let mut out = [0u8; N];
        let mut filled = 0;
        for chunk in &self.chunks {
            let n = (N - filled).min(chunk.len());
            out[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if filled == N {
                break;
            }
        }
        Some(out)
    }

    /// The first `want` bytes (at most `N`), or all that is buffered when that is fewer, and
    /// how many that is.
    fn peek_upto<const N: usize>(&self, want: usize) -> ([u8; N], usize) {
        let want = want.min(N).min(self.len);
        let mut out = [0u8; N];
        let mut filled = 0;
        for chunk in &self.chunks {
            if filled == want {
                break;
            }
            let n = (want - filled).min(chunk.len());
            out[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
        }
        (out, filled)
    }
}

/// The encoding of the field path `fields` (outermost first) down to a `payload_len`-byte
/// length-delimited field, each level a message holding only the next: tag and length per
/// level. `prefix ++ payload` is what prost writes for the same nesting.
fn nested_bytes_prefix(fields: &[u32], payload_len: usize) -> Bytes {
    use prost::encoding::{encode_varint, encoded_len_varint};
    let mut lens = [0u64; MAX_SPLIT_DEPTH];
    let mut len = payload_len as u64;
    for (i, &field) in fields.iter().enumerate().rev() {
        lens[i] = len;
        len += (encoded_len_varint(u64::from(field) << 3 | 2) + encoded_len_varint(len)) as u64;
    }
    let mut buf = BytesMut::with_capacity(fields.len() * 15);
    for (&field, &len) in fields.iter().zip(lens.iter()) {
        encode_varint(u64::from(field) << 3 | 2, &mut buf);
        encode_varint(len, &mut buf);
    }
    buf.freeze()
}

impl Buf for Frames {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&[], |c| &c[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        while cnt > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if cnt < front.len() {
                front.advance(cnt);
                self.len -= cnt;
                break;
            }
            cnt -= front.len();
            self.len -= front.len();
            self.chunks.pop_front();
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        if let Some(front) = self.chunks.front_mut()
            && front.len() >= len
        {
            let out = front.split_to(len);
            self.len -= len;
            if front.is_empty() {
                self.chunks.pop_front();
            }
            return out;
        }
        let mut out = BytesMut::with_capacity(len.min(self.len));
        out.put(self.take(len));
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use e2b_envd_proto::process::process_event::{DataEvent, Event, data_event::Output};
    use e2b_envd_proto::process::{ProcessEvent, StartResponse};
    use futures::StreamExt as _;
    use prost::Message as _;

    fn data(payload: Bytes) -> StartResponse {
        StartResponse {
            event: Some(ProcessEvent {
                event: Some(Event::Data(DataEvent {
                    output: Some(Output::Stdout(payload)),
                })),
            }),
        }
    }

    fn framed(m: &StartResponse) -> Vec<u8> {
        let mut out = vec![0u8];
        out.extend_from_slice(&(m.encoded_len() as u32).to_be_bytes());
        m.encode(&mut out).unwrap();
        out
    }

    fn stdout(m: &StartResponse) -> Bytes {
        match m.event.as_ref().and_then(|e| e.event.as_ref()) {
            Some(Event::Data(DataEvent {
                output: Some(Output::Stdout(b)),
            })) => b.clone(),
            other => panic!("not stdout: {other:?}"),
        }
    }

    fn response(frames: Vec<Bytes>, trailers: Option<http::HeaderMap>) -> Response<Body> {
        let mut items: Vec<Result<http_body::Frame<Bytes>, Status>> = frames
            .into_iter()
            .map(|f| Ok(http_body::Frame::data(f)))
            .collect();
        if let Some(t) = trailers {
            items.push(Ok(http_body::Frame::trailers(t)));
        }
        let body = http_body_util::StreamBody::new(futures::stream::iter(items));
        Response::new(Body::new(body))
    }

    fn ok_trailers() -> http::HeaderMap {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        t
    }

    async fn collect(resp: Response<Body>) -> Vec<Result<StartResponse, Status>> {
        match ServerStream::<StartResponse>::from_response(resp) {
            Ok(s) => s.collect().await,
            Err(e) => vec![Err(e)],
        }
    }

    #[tokio::test]
    async fn a_payload_within_one_frame_is_not_copied() {
        let payload = Bytes::from(vec![7u8; 100_000]);
        let wire = framed(&data(payload.clone()));
        // As our daemon sends it: the message's head, then the payload as its own frame.
        let head = wire.len() - payload.len();
        let payload_frame = Bytes::copy_from_slice(&wire[head..]);
        let frame_ptr = payload_frame.as_ptr();
        let got = collect(response(
            vec![Bytes::copy_from_slice(&wire[..head]), payload_frame],
            Some(ok_trailers()),
        ))
        .await;
        assert_eq!(got.len(), 1);
        let out = stdout(got[0].as_ref().unwrap());
        assert_eq!(out, payload);
        assert_eq!(out.as_ptr(), frame_ptr, "sliced from the received frame");
    }

    #[tokio::test]
    async fn messages_split_at_every_byte_decode_exactly() {
        let msgs: Vec<StartResponse> = (0..3u8)
            .map(|i| data(Bytes::from(vec![i; 20 + i as usize])))
            .collect();
        let wire: Vec<u8> = msgs.iter().flat_map(framed).collect();
        for split in 1..wire.len() {
            let frames = vec![
                Bytes::copy_from_slice(&wire[..split]),
                Bytes::copy_from_slice(&wire[split..]),
            ];
            let got = collect(response(frames, Some(ok_trailers()))).await;
            let got: Vec<StartResponse> = got.into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(got, msgs, "split at {split}");
        }
        // One byte per frame.
        let frames = wire.iter().map(|b| Bytes::copy_from_slice(&[*b])).collect();
        let got = collect(response(frames, Some(ok_trailers()))).await;
        assert_eq!(
            got.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>(),
            msgs
        );
    }

    #[tokio::test]
    async fn error_trailers_end_the_stream_after_the_messages() {
        let m = data(Bytes::from_static(b"hi"));
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("5"));
        t.insert(
            "grpc-message",
            HeaderValue::from_static("no%20such%20process"),
        );
        let got = collect(response(vec![Bytes::from(framed(&m))], Some(t))).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap(), &m);
        let err = got[1].as_ref().unwrap_err();
        assert_eq!(err.code(), Code::NotFound);
        assert_eq!(err.message(), "no such process");
    }

    #[tokio::test]
    async fn trailers_only_errors_and_http_errors_fail_the_call() {
        let mut resp = response(vec![], None);
        resp.headers_mut()
            .insert("grpc-status", HeaderValue::from_static("16"));
        let got = collect(resp).await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Unauthenticated);

        let mut resp = response(vec![], None);
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let got = collect(resp).await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Unavailable);
    }

    #[tokio::test]
    async fn bad_streams_get_typed_errors() {
        // No trailers at all.
        let got = collect(response(
            vec![Bytes::from(framed(&data(Bytes::new())))],
            None,
        ))
        .await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].as_ref().unwrap_err().code(), Code::Unknown);
        // Ends inside a message.
        let wire = framed(&data(Bytes::from_static(b"abcdef")));
        let got = collect(response(
            vec![Bytes::copy_from_slice(&wire[..wire.len() - 2])],
            Some(ok_trailers()),
        ))
        .await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Internal);
        // Compressed flag.
        let mut wire = framed(&data(Bytes::from_static(b"x")));
        wire[0] = 1;
        let got = collect(response(vec![Bytes::from(wire)], Some(ok_trailers()))).await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Internal);
        // Over the size limit: refused from the header alone.
        let mut header = vec![0u8];
        header.extend_from_slice(&((MAX_STREAM_MESSAGE_BYTES + 1) as u32).to_be_bytes());
        let got = collect(response(vec![Bytes::from(header)], Some(ok_trailers()))).await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::ResourceExhausted);
        // Not protobuf.
        let mut junk = vec![0u8, 0, 0, 0, 3];
        junk.extend_from_slice(&[0xff, 0xff, 0xff]);
        let got = collect(response(vec![Bytes::from(junk)], Some(ok_trailers()))).await;
        assert_eq!(got.len(), 1, "the stream stops at the bad message");
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Internal);
    }

    fn output_path(path: &[u32]) -> bool {
        matches!(path, [1, 2, 1..=3])
    }

    async fn collect_split(resp: Response<Body>) -> Vec<Result<StartResponse, Status>> {
        match ServerStream::<StartResponse>::from_response(resp) {
            Ok(s) => s.split_payloads(output_path).collect().await,
            Err(e) => vec![Err(e)],
        }
    }

    fn start_event() -> StartResponse {
        use e2b_envd_proto::process::process_event::StartEvent;
        StartResponse {
            event: Some(ProcessEvent {
                event: Some(Event::Start(StartEvent { pid: 42 })),
            }),
        }
    }

    #[tokio::test]
    async fn split_payloads_deliver_each_frame_as_a_slice() {
        let payload: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        let msgs = [
            start_event(),
            data(Bytes::from(payload.clone())),
            data(Bytes::from_static(b"tail")),
        ];
        let wire: Vec<u8> = msgs.iter().flat_map(framed).collect();
        for a in 1..wire.len() {
            for b in [a + 1, a + 7, a + 150, wire.len()] {
                let b = b.min(wire.len());
                let frames: Vec<Bytes> = [&wire[..a], &wire[a..b], &wire[b..]]
                    .iter()
                    .filter(|f| !f.is_empty())
                    .map(|f| Bytes::copy_from_slice(f))
                    .collect();
                let ptrs: Vec<(usize, usize)> = frames
                    .iter()
                    .map(|f| (f.as_ptr() as usize, f.len()))
                    .collect();
                let got = collect_split(response(frames, Some(ok_trailers()))).await;
                let got: Vec<StartResponse> = got.into_iter().map(|r| r.unwrap()).collect();
                assert_eq!(got[0], msgs[0], "cuts {a},{b}");
                let mut joined = Vec::new();
                for m in &got[1..] {
                    let out = stdout(m);
                    assert!(!out.is_empty(), "cuts {a},{b}");
                    let p = out.as_ptr() as usize;
                    assert!(
                        ptrs.iter().any(|&(s, l)| p >= s && p + out.len() <= s + l),
                        "a piece is a slice of one frame (cuts {a},{b})"
                    );
                    joined.extend_from_slice(&out);
                }
                let mut want = payload.clone();
                want.extend_from_slice(b"tail");
                assert_eq!(joined, want, "cuts {a},{b}");
            }
        }
    }

    #[tokio::test]
    async fn split_payloads_leave_other_messages_whole() {
        // A data event with a second field is not a single-field chain: decoded whole.
        let mut wire = Vec::new();
        let m = data(Bytes::from(vec![1u8; 50]));
        let mut body = m.encode_to_vec();
        body.extend_from_slice(&[0x10, 0x01]); // field 2 varint after the event
        wire.push(0u8);
        wire.extend_from_slice(&(body.len() as u32).to_be_bytes());
        wire.extend_from_slice(&body);
        let frames = vec![
            Bytes::copy_from_slice(&wire[..20]),
            Bytes::copy_from_slice(&wire[20..]),
        ];
        let got = collect_split(response(frames, Some(ok_trailers()))).await;
        assert_eq!(got.len(), 1);
        assert_eq!(stdout(got[0].as_ref().unwrap()).len(), 50);
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_split_payload_is_an_error() {
        let wire = framed(&data(Bytes::from(vec![3u8; 100])));
        let got = collect_split(response(
            vec![Bytes::copy_from_slice(&wire[..60])],
            Some(ok_trailers()),
        ))
        .await;
        let last = got.last().unwrap().as_ref().unwrap_err();
        assert_eq!(last.code(), Code::Internal);
        assert!(
            last.message().contains("ended inside a message"),
            "{last:?}"
        );
    }

    #[test]
    fn nested_prefix_matches_prost() {
        for len in [0usize, 1, 127, 128, 16_383, 16_384, 1 << 20] {
            let m = data(Bytes::from(vec![0u8; len]));
            let enc = m.encode_to_vec();
            let head = nested_bytes_prefix(&[1, 2, 1], len);
            assert_eq!(&enc[..enc.len() - len], &head[..], "len {len}");
        }
    }

    fn web_trailers(text: &str) -> Bytes {
        let mut out = vec![WEB_TRAILERS_FLAG];
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
        Bytes::from(out)
    }

    async fn collect_web(frames: Vec<Bytes>) -> Vec<Result<StartResponse, Status>> {
        let mut s = ServerStream::<StartResponse>::from_response(response(frames, None)).unwrap();
        s.web = true;
        s.split_payloads(output_path).collect().await
    }

    #[tokio::test]
    async fn grpc_web_trailers_in_the_body_end_the_stream() {
        let m = data(Bytes::from_static(b"hello"));
        let mut wire = framed(&m);
        wire.extend_from_slice(&web_trailers("grpc-status:0\r\ngrpc-message:\r\n"));
        // Split everywhere: the trailers frame is decoded once whole.
        for cut in 1..wire.len() {
            let frames = vec![
                Bytes::copy_from_slice(&wire[..cut]),
                Bytes::copy_from_slice(&wire[cut..]),
            ];
            let got = collect_web(frames).await;
            let got: Vec<StartResponse> = got.into_iter().map(|r| r.unwrap()).collect();
            let joined: Vec<u8> = got.iter().flat_map(|m| stdout(m).to_vec()).collect();
            assert_eq!(joined, b"hello", "cut {cut}");
        }
        // An error status, with the header names in any case and spaces around values.
        let mut wire = framed(&m);
        wire.extend_from_slice(&web_trailers(
            "Grpc-Status: 5\r\ngrpc-message: no%20such%20process\r\n",
        ));
        let got = collect_web(vec![Bytes::from(wire)]).await;
        assert_eq!(got.len(), 2);
        let err = got[1].as_ref().unwrap_err();
        assert_eq!(err.code(), Code::NotFound);
        assert_eq!(err.message(), "no such process");
        // No trailers frame at all, or bytes after it.
        let got = collect_web(vec![Bytes::from(framed(&m))]).await;
        assert_eq!(got[1].as_ref().unwrap_err().code(), Code::Unknown);
        let mut wire = web_trailers("grpc-status:0\r\n").to_vec();
        wire.extend_from_slice(&framed(&m));
        let got = collect_web(vec![Bytes::from(wire)]).await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Internal);
        // A trailer line that is not `name: value`.
        let got = collect_web(vec![web_trailers("grpc-status 0\r\n")]).await;
        assert_eq!(got[0].as_ref().unwrap_err().code(), Code::Internal);
    }
}
