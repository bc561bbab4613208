//! Connect (and gRPC) message envelopes: 1 flag byte, 4-byte big-endian length, message.

use bytes::{BufMut, Bytes, BytesMut};
use tonic::Status;

/// Envelope flag: end of stream (the message is an `EndStreamResponse`).
pub(crate) use e2b_envd_proto::wire::envelope::END_STREAM as END_STREAM_FLAG;
use e2b_envd_proto::wire::envelope::{COMPRESSED, HEADER_LEN};

/// Frames `message` in an envelope with `flags`.
pub(crate) fn encode_envelope(flags: u8, message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + message.len());
    b.put_u8(flags);
    // Messages over 4 GiB cannot be framed; the limit keeps them far smaller.
    b.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    b.put_slice(message);
    b.freeze()
}

/// Parses the body of a server-streaming request: exactly one envelope with flags 0 and a
/// message of at most `max` bytes.
pub(crate) fn parse_single_envelope(body: &Bytes, max: usize) -> Result<Bytes, Status> {
    if body.len() < HEADER_LEN {
        return Err(Status::invalid_argument(format!(
            "protocol error: incomplete envelope: {} bytes, a header needs {HEADER_LEN}",
            body.len()
        )));
    }
    let flags = body[0];
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if len > max {
        return Err(Status::resource_exhausted(format!(
            "message size {len} is larger than the {max} byte limit"
        )));
    }
    if flags & COMPRESSED != 0 {
        return Err(Status::internal(
            "protocol error: received a compressed message, but no compression was negotiated",
        ));
    }
    if flags != 0 {
        return Err(Status::invalid_argument(format!(
            "protocol error: invalid envelope flags {flags:#04x} in a request"
        )));
    }
    let end = HEADER_LEN + len;
    if body.len() < end {
        return Err(Status::invalid_argument(format!(
            "protocol error: promised {len} bytes in enveloped message, got {} bytes",
            body.len() - HEADER_LEN
        )));
    }
    if body.len() > end {
        return Err(Status::invalid_argument(
            "protocol error: a server-streaming request must carry exactly one message",
        ));
    }
    Ok(body.slice(HEADER_LEN..end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let e = encode_envelope(0, b"{}");
        assert_eq!(&e[..], &[0, 0, 0, 0, 2, b'{', b'}']);
        assert_eq!(
            parse_single_envelope(&e, 10).ok().as_deref(),
            Some(&b"{}"[..])
        );
        assert!(parse_single_envelope(&e.slice(..4), 10).is_err());
        assert!(parse_single_envelope(&e.slice(..6), 10).is_err());
        assert!(parse_single_envelope(&e, 1).is_err());
    }
}
