//! Incremental UTF-8 decoding of an output stream.

/// Decodes a byte stream to text chunk by chunk, the way a streaming `TextDecoder` does.
///
/// A character split across chunks is held back until its last byte arrives, so it is never
/// broken. Invalid bytes become U+FFFD, exactly as [`String::from_utf8_lossy`] would replace
/// them in the whole stream: decoding chunk by chunk and calling [`finish`](Self::finish) gives
/// the same text as decoding the concatenated bytes at once.
///
/// ```
/// use e2b_commands::Utf8Decoder;
///
/// let euro = "€".as_bytes(); // 3 bytes
/// let mut d = Utf8Decoder::new();
/// assert_eq!(d.decode(&euro[..1]), "");
/// assert_eq!(d.decode(&euro[1..]), "€");
/// assert_eq!(d.decode(&[b'a', 0xE2]), "a");
/// assert_eq!(d.finish(), "\u{FFFD}"); // an incomplete character at the end
/// ```
#[derive(Debug, Default, Clone)]
pub struct Utf8Decoder {
    /// A valid but incomplete prefix of one character (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// A decoder with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether bytes of an incomplete character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Decodes `chunk`, returning the text of every character completed so far.
    pub fn decode(&mut self, chunk: &[u8]) -> String {
        let mut out = String::with_capacity(chunk.len() + 3);
        self.decode_into(chunk, &mut out);
        out
    }

    /// Like [`decode`](Self::decode), appending to `out`.
    pub fn decode_into(&mut self, chunk: &[u8], out: &mut String) {
        let mut input = chunk;
        // Complete the held-back character first, one byte at a time.
        while !self.pending.is_empty() {
            let Some((&b, rest)) = input.split_first() else {
                return;
            };
            self.pending.push(b);
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    input = rest;
                }
                Err(e) if e.error_len().is_none() => {
                    // Still a valid prefix.
                    input = rest;
                }
                Err(_) => {
                    // The new byte cannot continue the character: the held-back prefix is one
                    // invalid sequence, and the new byte starts over.
                    out.push('\u{FFFD}');
                    self.pending.clear();
                }
            }
        }
        let mut chunks = input.utf8_chunks().peekable();
        while let Some(c) = chunks.next() {
            out.push_str(c.valid());
            let invalid = c.invalid();
            if invalid.is_empty() {
                continue;
            }
            let at_end = chunks.peek().is_none();
            let incomplete = at_end
                && std::str::from_utf8(invalid)
                    .err()
                    .is_some_and(|e| e.error_len().is_none());
            if incomplete {
                self.pending.extend_from_slice(invalid);
            } else {
                out.push('\u{FFFD}');
            }
        }
    }

    /// Ends the stream: an incomplete character still held back becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            "\u{FFFD}".to_owned()
        }
    }
}

/// Decodes a retained buffer: the complete characters, plus U+FFFD for an incomplete tail when
/// the stream has `finished`.
pub(crate) fn decode_buffer(bytes: &[u8], finished: bool) -> String {
    let mut d = Utf8Decoder::new();
    let mut out = d.decode(bytes);
    if finished {
        out.push_str(&d.finish());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(bytes: &[u8], cuts: &[usize]) -> String {
        let mut d = Utf8Decoder::new();
        let mut out = String::new();
        let mut start = 0;
        for &c in cuts {
            let c = c.min(bytes.len()).max(start);
            d.decode_into(&bytes[start..c], &mut out);
            start = c;
        }
        d.decode_into(&bytes[start..], &mut out);
        out.push_str(&d.finish());
        out
    }

    #[test]
    fn split_multibyte_is_kept_whole() {
        let s = "héllo €𝄞 wörld";
        let b = s.as_bytes();
        for i in 0..b.len() {
            for j in i..b.len() {
                assert_eq!(chunked(b, &[i, j]), s, "cuts at {i},{j}");
            }
        }
    }

    #[test]
    fn invalid_bytes_match_lossy() {
        let cases: &[&[u8]] = &[
            &[0xff],
            &[b'a', 0xE2, 0x82],
            &[0xE2, 0x82, b'A'],
            &[0xF0, 0x9D, 0x84],
            &[0xF0, 0x9D, 0x84, 0x9E, 0xC0, 0x80],
            &[0xED, 0xA0, 0x80],
            &[0xE2, 0xE2, 0x82, 0xAC],
        ];
        for &case in cases {
            let want = String::from_utf8_lossy(case).into_owned();
            for i in 0..=case.len() {
                for j in i..=case.len() {
                    assert_eq!(chunked(case, &[i, j]), want, "{case:x?} cut {i},{j}");
                }
            }
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let bytes: Vec<u8> = (0u32..2000).map(|i| (i * 37 % 256) as u8).collect();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(
            chunked(&bytes, &cuts),
            String::from_utf8_lossy(&bytes).into_owned()
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_any_cuts(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
                              mut cuts in proptest::collection::vec(0usize..200, 0..8)) {
            cuts.sort_unstable();
            proptest::prop_assert_eq!(chunked(&bytes, &cuts), String::from_utf8_lossy(&bytes).into_owned());
        }
    }

    #[test]
    fn buffer_holds_incomplete_tail_until_finished() {
        let b = "a€".as_bytes();
        assert_eq!(decode_buffer(&b[..2], false), "a");
        assert_eq!(decode_buffer(&b[..2], true), "a\u{FFFD}");
        assert_eq!(decode_buffer(b, false), "a€");
    }
}
