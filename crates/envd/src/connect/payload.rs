//! Streamed messages written without copying their payload.
//!
//! A process's output chunk is the last field of a chain of single-field messages
//! (`StartResponse.event` → `ProcessEvent.data` → `DataEvent.stdout`), so its binary protobuf
//! encoding is a few bytes of tags and lengths followed by the chunk itself. Writing that prefix
//! and then the chunk's own `Bytes` as a separate body frame keeps the chunk from being copied
//! into an encode buffer on its way from the pipe read to the socket.

use bytes::{BufMut as _, Bytes, BytesMut};
use prost::encoding::{encode_varint, encoded_len_varint};

use super::ConnectMessage;

/// A server-stream message for the Connect router. [`split_payload`](Self::split_payload)
/// may expose a trailing bytes payload to write without a copy; the default exposes none.
pub(crate) trait StreamMessage: ConnectMessage {
    /// `Some((prefix, payload))` when the message's protobuf encoding is exactly
    /// `prefix ++ payload`.
    fn split_payload(&self) -> Option<(Bytes, Bytes)> {
        None
    }
}

/// One encoded message: `head` followed by the optional `payload`.
#[derive(Debug, Clone)]
pub(crate) struct Encoded {
    pub(crate) head: Bytes,
    pub(crate) payload: Option<Bytes>,
}

impl Encoded {
    pub(crate) fn whole(head: Bytes) -> Self {
        Self {
            head,
            payload: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.payload.as_ref().map_or(0, Bytes::len)
    }

    /// The message in an envelope (`flags`, 4-byte big-endian length), as body frames: the
    /// envelope header and head together, then the payload untouched.
    pub(crate) fn into_frames(self, flags: u8) -> impl Iterator<Item = Bytes> {
        let mut first = BytesMut::with_capacity(5 + self.head.len());
        first.put_u8(flags);
        first.put_u32(u32::try_from(self.len()).unwrap_or(u32::MAX));
        first.put_slice(&self.head);
        std::iter::once(first.freeze()).chain(self.payload)
    }
}

/// The encoding prefix of `payload` as the length-delimited field path `fields` (outermost
/// first), each level a message holding only the next: tag and length per level, innermost
/// last. `prefix ++ payload` is what prost writes for the same nesting.
pub(crate) fn nested_bytes_prefix(fields: &[u32], payload_len: usize) -> Bytes {
    let mut lens = Vec::with_capacity(fields.len());
    let mut len = payload_len as u64;
    for &field in fields.iter().rev() {
        lens.push(len);
        len += (encoded_len_varint(u64::from(field << 3 | 2)) + encoded_len_varint(len)) as u64;
    }
    let mut buf = BytesMut::with_capacity(fields.len() * 6);
    for (&field, &len) in fields.iter().zip(lens.iter().rev()) {
        encode_varint(u64::from(field << 3 | 2), &mut buf);
        encode_varint(len, &mut buf);
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_frames() {
        let e = Encoded {
            head: Bytes::from_static(b"ab"),
            payload: Some(Bytes::from_static(b"cde")),
        };
        let frames: Vec<Bytes> = e.into_frames(0).collect();
        assert_eq!(frames.len(), 2);
        assert_eq!(&frames[0][..], &[0, 0, 0, 0, 5, b'a', b'b']);
        assert_eq!(&frames[1][..], b"cde");
    }
}
