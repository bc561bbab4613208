//! Message codecs: proto3 JSON (pbjson serde) and binary protobuf (prost).

use std::marker::PhantomData;

use bytes::{Buf as _, Bytes};
use tonic::Status;

/// A message the Connect layer can carry: prost for binary, serde (pbjson) for JSON.
pub(crate) trait ConnectMessage:
    prost::Message + Default + serde::Serialize + serde::de::DeserializeOwned + Send + 'static
{
}
impl<T> ConnectMessage for T where
    T: prost::Message + Default + serde::Serialize + serde::de::DeserializeOwned + Send + 'static
{
}

/// The message codec of a request (and its response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Codec {
    /// Canonical proto3 JSON.
    Json,
    /// Binary protobuf.
    Proto,
}

/// Parses a Content-Type into (streaming?, codec). `None` = not a Connect content type.
pub(crate) fn parse_content_type(ct: &str) -> Option<(bool, Codec)> {
    let base = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        "application/json" => Some((false, Codec::Json)),
        "application/proto" => Some((false, Codec::Proto)),
        "application/connect+json" => Some((true, Codec::Json)),
        "application/connect+proto" => Some((true, Codec::Proto)),
        _ => None,
    }
}

impl Codec {
    /// Decodes a message. Errors are `invalid_argument`.
    pub(crate) fn decode<T: ConnectMessage>(self, bytes: &[u8]) -> Result<T, Status> {
        match self {
            Codec::Json => {
                // An empty unary body is the empty message.
                if bytes.iter().all(|b| b.is_ascii_whitespace()) {
                    return Ok(T::default());
                }
                serde_json::from_slice(bytes)
                    .map_err(|e| Status::invalid_argument(format!("unmarshal JSON message: {e}")))
            }
            Codec::Proto => T::decode(bytes)
                .map_err(|e| Status::invalid_argument(format!("unmarshal protobuf message: {e}"))),
        }
    }

    /// Encodes a message.
    pub(crate) fn encode<T: ConnectMessage>(self, msg: &T) -> Result<Bytes, Status> {
        match self {
            Codec::Json => serde_json::to_vec(msg)
                .map(Bytes::from)
                .map_err(|e| Status::internal(format!("marshal JSON message: {e}"))),
            Codec::Proto => Ok(Bytes::from(msg.encode_to_vec())),
        }
    }

    /// Content-Type of unary messages in this codec.
    pub(crate) fn unary_content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        }
    }

    /// Content-Type of streams in this codec.
    pub(crate) fn stream_content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/connect+json",
            Codec::Proto => "application/connect+proto",
        }
    }
}

/// A tonic decoder for enveloped Connect request streams (client streaming).
pub(crate) struct ConnectDecoder<T> {
    codec: Codec,
    _m: PhantomData<fn() -> T>,
}

impl<T> ConnectDecoder<T> {
    pub(crate) fn new(codec: Codec) -> Self {
        Self {
            codec,
            _m: PhantomData,
        }
    }
}

impl<T: ConnectMessage> tonic::codec::Decoder for ConnectDecoder<T> {
    type Item = T;
    type Error = Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<T>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        self.codec.decode(&bytes).map(Some)
    }
}
