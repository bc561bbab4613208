//! Byte-level newline framing with a per-message size limit.
//!
//! [`LineSplitter`] turns arbitrary chunks of bytes into lines:
//!
//! - it splits on bytes (`\n`), never on decoded text, so a UTF-8 character split across chunks
//!   arrives whole;
//! - a `\r` right before the `\n` is removed (CRLF), also when the two arrive in different chunks;
//! - blank and whitespace-only lines are skipped;
//! - the final unterminated line is delivered by [`LineSplitter::finish`] at EOF;
//! - the limit counts the line's bytes without the line ending: a line of exactly `max` bytes
//!   passes, `max + 1` fails; a line that never ends fails as soon as the pending tail passes the
//!   limit, so memory stays within `max` plus one chunk;
//! - lines completed earlier in the same chunk as an oversized one are delivered first;
//! - it is linear in the bytes received however many chunks a line spans: the pending tail is kept
//!   in one buffer and only the bytes that arrived since the last scan are searched.

use bytes::{Bytes, BytesMut};

use crate::error::{AcpError, Direction};

/// Reassembles newline-delimited messages from chunks of bytes.
///
/// Push a chunk with [`push_bytes`](Self::push_bytes) (zero-copy) or [`push`](Self::push), then
/// call [`next_line`](Self::next_line) until it returns `None`; at EOF call
/// [`finish`](Self::finish).
///
/// A line that lies within one chunk is returned as a slice of that chunk (no copy). A line that
/// spans chunks is kept as the list of its pieces and copied once, into an allocation of its exact
/// size, when its end arrives.
#[derive(Debug)]
pub struct LineSplitter {
    /// Pieces of the pending (unterminated, already scanned) line, in order.
    parts: Vec<Bytes>,
    parts_len: usize,
    /// The chunk being split, and where its unconsumed bytes start.
    cur: Bytes,
    pos: usize,
    max: usize,
    failed: bool,
    scanned_total: u64,
    direction: Direction,
}

impl LineSplitter {
    /// A splitter that accepts lines of at most `max_message_bytes` (without the line ending).
    ///
    /// # Errors
    ///
    /// [`AcpError::InvalidOptions`] when the limit is zero.
    pub fn new(max_message_bytes: usize) -> Result<Self, AcpError> {
        validate_limit(max_message_bytes)?;
        Ok(Self {
            parts: Vec::new(),
            parts_len: 0,
            cur: Bytes::new(),
            pos: 0,
            max: max_message_bytes,
            failed: false,
            scanned_total: 0,
            direction: Direction::FromAgent,
        })
    }

    /// The same, reporting oversize errors for messages going the given way (the bridge splits
    /// the editor's input with [`Direction::ToAgent`]).
    pub fn with_direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// The configured limit.
    pub fn max_message_bytes(&self) -> usize {
        self.max
    }

    /// Bytes currently held for an unterminated line.
    pub fn pending_len(&self) -> usize {
        self.parts_len + (self.cur.len() - self.pos)
    }

    /// Total bytes searched for line endings so far (a linear-time guard for tests: stays ≤ the
    /// bytes received).
    pub fn bytes_scanned(&self) -> u64 {
        self.scanned_total
    }

    /// Append a chunk (copied). Call [`next_line`](Self::next_line) until it returns `None`
    /// afterwards.
    pub fn push(&mut self, chunk: &[u8]) {
        self.push_bytes(Bytes::copy_from_slice(chunk));
    }

    /// Append a chunk without copying it. Call [`next_line`](Self::next_line) until it returns
    /// `None` afterwards.
    pub fn push_bytes(&mut self, chunk: Bytes) {
        if self.failed {
            return;
        }
        if self.pos < self.cur.len() {
            // Not drained with next_line: keep the rest (scanned on the next call).
            let rest = self.cur.slice(self.pos..);
            self.cur = rest;
            self.pos = 0;
            let mut joined = BytesMut::with_capacity(self.cur.len() + chunk.len());
            joined.extend_from_slice(&self.cur);
            joined.extend_from_slice(&chunk);
            self.cur = joined.freeze();
        } else {
            self.cur = chunk;
            self.pos = 0;
        }
    }

    /// The next complete line, an error once the limit is passed, or `None` when more bytes are
    /// needed. After an error the splitter stays failed and returns `None`.
    pub fn next_line(&mut self) -> Option<Result<Bytes, AcpError>> {
        if self.failed {
            return None;
        }
        loop {
            let fresh = &self.cur[self.pos..];
            match memchr::memchr(b'\n', fresh) {
                Some(i) => {
                    self.scanned_total += (i + 1) as u64;
                    let end = self.pos + i;
                    let mut line = if self.parts.is_empty() {
                        self.cur.slice(self.pos..end)
                    } else {
                        let total = self.parts_len + i;
                        if total > self.max + 1 {
                            return Some(Err(self.fail(Some(total))));
                        }
                        let mut b = BytesMut::with_capacity(total);
                        for p in self.parts.drain(..) {
                            b.extend_from_slice(&p);
                        }
                        b.extend_from_slice(&self.cur[self.pos..end]);
                        self.parts_len = 0;
                        b.freeze()
                    };
                    self.pos = end + 1;
                    if line.last() == Some(&b'\r') {
                        line.truncate(line.len() - 1);
                    }
                    if line.len() > self.max {
                        return Some(Err(self.fail(Some(line.len()))));
                    }
                    if is_blank(&line) {
                        continue;
                    }
                    return Some(Ok(line));
                }
                None => {
                    self.scanned_total += fresh.len() as u64;
                    if !fresh.is_empty() {
                        let rest = self.cur.slice(self.pos..);
                        self.parts_len += rest.len();
                        self.parts.push(rest);
                        self.pos = self.cur.len();
                    }
                    let mut pending = self.parts_len;
                    if self.parts.last().and_then(|p| p.last()) == Some(&b'\r') {
                        pending -= 1;
                    }
                    if pending > self.max {
                        return Some(Err(self.fail(Some(pending))));
                    }
                    return None;
                }
            }
        }
    }

    /// At EOF: the final unterminated line, if it is not blank.
    pub fn finish(&mut self) -> Option<Result<Bytes, AcpError>> {
        if self.failed {
            return None;
        }
        if self.pos < self.cur.len() {
            let rest = self.cur.slice(self.pos..);
            self.parts_len += rest.len();
            self.parts.push(rest);
            self.pos = self.cur.len();
        }
        if self.parts.is_empty() {
            return None;
        }
        let mut b = BytesMut::with_capacity(self.parts_len);
        for p in self.parts.drain(..) {
            b.extend_from_slice(&p);
        }
        self.parts_len = 0;
        if b.last() == Some(&b'\r') {
            b.truncate(b.len() - 1);
        }
        if b.len() > self.max {
            return Some(Err(self.fail(Some(b.len()))));
        }
        if is_blank(&b) {
            return None;
        }
        Some(Ok(b.freeze()))
    }

    fn fail(&mut self, size: Option<usize>) -> AcpError {
        self.failed = true;
        self.parts = Vec::new();
        self.parts_len = 0;
        self.cur = Bytes::new();
        self.pos = 0;
        AcpError::MessageTooLarge {
            direction: self.direction,
            limit: self.max,
            size,
        }
    }
}

pub(crate) fn validate_limit(max: usize) -> Result<(), AcpError> {
    if max == 0 {
        return Err(AcpError::InvalidOptions {
            reason: "max_message_bytes must be at least 1 (the default is DEFAULT_MAX_MESSAGE_BYTES, 32 MiB)".to_owned(),
        });
    }
    Ok(())
}

/// One message as a line: its bytes and a `\n`, in one allocation.
pub(crate) fn with_newline(msg: &[u8]) -> Bytes {
    let mut line = BytesMut::with_capacity(msg.len() + 1);
    line.extend_from_slice(msg);
    line.extend_from_slice(b"\n");
    line.freeze()
}

/// Write `data` whole and flush, an I/O failure reported as [`AcpError::Process`] with `action`.
pub(crate) async fn write_and_flush<W: tokio::io::AsyncWrite + Unpin + ?Sized>(
    out: &mut W,
    data: &[u8],
    action: &'static str,
) -> Result<(), AcpError> {
    use tokio::io::AsyncWriteExt as _;
    out.write_all(data)
        .await
        .map_err(|e| AcpError::process(action, e))?;
    out.flush().await.map_err(|e| AcpError::process(action, e))
}

/// True when a line holds only JSON whitespace (space, tab, CR).
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn feed(s: &mut LineSplitter, chunks: &[&[u8]]) -> Vec<Result<Vec<u8>, usize>> {
        let mut out = Vec::new();
        for c in chunks {
            s.push(c);
            while let Some(r) = s.next_line() {
                out.push(r.map(|b| b.to_vec()).map_err(|e| match e {
                    AcpError::MessageTooLarge { limit, .. } => limit,
                    _ => usize::MAX,
                }));
            }
        }
        if let Some(r) = s.finish() {
            out.push(r.map(|b| b.to_vec()).map_err(|_| 0));
        }
        out
    }

    fn ok(lines: &[&str]) -> Vec<Result<Vec<u8>, usize>> {
        lines.iter().map(|l| Ok(l.as_bytes().to_vec())).collect()
    }

    // §7 item 1
    #[test]
    fn lf_crlf_and_crlf_split_across_chunks() {
        let mut s = LineSplitter::new(100).unwrap();
        assert_eq!(
            feed(&mut s, &[b"a\nb\r\nc\r", b"\nd\n"]),
            ok(&["a", "b", "c", "d"])
        );
    }

    #[test]
    fn lone_cr_inside_a_line_is_kept() {
        let mut s = LineSplitter::new(100).unwrap();
        assert_eq!(feed(&mut s, &[b"a\rb\n"]), ok(&["a\rb"]));
    }

    // §7 item 2
    #[test]
    fn line_spanning_one_byte_chunks_and_many_lines_in_one_chunk() {
        let line = "{\"x\":\"".to_owned() + &"y".repeat(1000) + "\"}";
        let data = format!("{line}\n");
        let chunks: Vec<&[u8]> = data.as_bytes().chunks(1).collect();
        let mut s = LineSplitter::new(10_000).unwrap();
        assert_eq!(feed(&mut s, &chunks), ok(&[&line]));

        let big = "z".repeat(200_000);
        let data = format!("{big}\n");
        let chunks: Vec<&[u8]> = data.as_bytes().chunks(64 * 1024).collect();
        let mut s = LineSplitter::new(1 << 20).unwrap();
        assert_eq!(feed(&mut s, &chunks), ok(&[&big]));

        let many: String = (0..500).map(|i| format!("{i}\n")).collect();
        let mut s = LineSplitter::new(100).unwrap();
        let expect: Vec<String> = (0..500).map(|i| i.to_string()).collect();
        let expect: Vec<&str> = expect.iter().map(|s| s.as_str()).collect();
        assert_eq!(feed(&mut s, &[many.as_bytes()]), ok(&expect));
    }

    // §7 item 3
    #[test]
    fn utf8_split_across_chunks_arrives_whole() {
        let text = "héllo 😀 wörld";
        let data = format!("{text}\n");
        let bytes = data.as_bytes();
        // split inside the 4-byte emoji
        let at = text.find('😀').unwrap() + 2;
        let mut s = LineSplitter::new(100).unwrap();
        let out = feed(&mut s, &[&bytes[..at], &bytes[at..]]);
        assert_eq!(out, ok(&[text]));
        assert_eq!(std::str::from_utf8(out[0].as_ref().unwrap()).unwrap(), text);
    }

    // §7 item 4
    #[test]
    fn exactly_max_passes_max_plus_one_fails_cr_not_counted() {
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(feed(&mut s, &[b"12345\n"]), ok(&["12345"]));
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(feed(&mut s, &[b"12345\r\n"]), ok(&["12345"]));
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(feed(&mut s, &[b"12345", b"\r", b"\n"]), ok(&["12345"]));
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(feed(&mut s, &[b"123456\n"]), vec![Err(5)]);
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(feed(&mut s, &[b"12345\r\r\n"]), vec![Err(5)]);
    }

    // §7 item 5
    #[test]
    fn never_ending_line_fails_once_the_tail_passes_the_limit() {
        let mut s = LineSplitter::new(10).unwrap();
        s.push(b"0123456789");
        assert!(s.next_line().is_none());
        s.push(b"a");
        assert!(matches!(
            s.next_line(),
            Some(Err(AcpError::MessageTooLarge { limit: 10, .. }))
        ));
        assert_eq!(s.pending_len(), 0);
        // stays failed
        s.push(b"\n{}\n");
        assert!(s.next_line().is_none());
        assert!(s.finish().is_none());
    }

    #[test]
    fn pending_memory_is_bounded_by_limit_plus_one_chunk() {
        let mut s = LineSplitter::new(1000).unwrap();
        let chunk = [b'x'; 300];
        let mut peak = 0;
        loop {
            s.push(&chunk);
            peak = peak.max(s.pending_len());
            match s.next_line() {
                None => continue,
                Some(Err(_)) => break,
                Some(Ok(_)) => panic!("no line expected"),
            }
        }
        assert!(peak <= 1000 + 300, "peak {peak}");
    }

    // §7 item 6
    #[test]
    fn complete_lines_before_an_oversized_one_in_the_same_chunk_come_first() {
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(
            feed(&mut s, &[b"a\nbb\n1234567\nc\n"]),
            vec![Ok(b"a".to_vec()), Ok(b"bb".to_vec()), Err(5)]
        );
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(
            feed(&mut s, &[b"a\nbb\n1234567"]),
            vec![Ok(b"a".to_vec()), Ok(b"bb".to_vec()), Err(5)]
        );
    }

    // §7 item 7
    #[test]
    fn limit_is_per_line_not_per_chunk() {
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(feed(&mut s, &[b"12345\n54321\n"]), ok(&["12345", "54321"]));
        let mut s = LineSplitter::new(5).unwrap();
        assert_eq!(
            feed(&mut s, &[b"1234", b"5\n543", b"21\n"]),
            ok(&["12345", "54321"])
        );
    }

    // §7 item 8
    #[test]
    fn linear_scan_one_mib_line_in_small_chunks() {
        let n = 1 << 20;
        let mut s = LineSplitter::new(n).unwrap();
        let chunk = vec![b'a'; 4096];
        for _ in 0..(n / 4096) {
            s.push(&chunk);
            assert!(s.next_line().is_none());
        }
        s.push(b"\n");
        assert_eq!(s.next_line().unwrap().unwrap().len(), n);
        assert!(
            s.bytes_scanned() <= (n as u64) + 1,
            "scanned {}",
            s.bytes_scanned()
        );
    }

    // §7 item 9
    #[test]
    fn final_unterminated_line_at_eof() {
        let mut s = LineSplitter::new(100).unwrap();
        assert_eq!(
            feed(&mut s, &[b"a\n", b"{\"last\":1}"]),
            ok(&["a", "{\"last\":1}"])
        );
        let mut s = LineSplitter::new(100).unwrap();
        assert_eq!(feed(&mut s, &[b"a\n", b"b\r"]), ok(&["a", "b"]));
        let mut s = LineSplitter::new(3).unwrap();
        assert_eq!(feed(&mut s, &[b"abcd"]), vec![Err(3)]);
    }

    // §7 item 10
    #[test]
    fn blank_and_whitespace_lines_are_skipped() {
        let mut s = LineSplitter::new(100).unwrap();
        assert_eq!(feed(&mut s, &[b"\n\r\n  \t \n{}\n\n", b"  "]), ok(&["{}"]));
    }

    // §7 item 11 (framing part: invalid UTF-8 is just bytes here)
    #[test]
    fn invalid_utf8_is_framed_not_rejected() {
        let mut s = LineSplitter::new(100).unwrap();
        assert_eq!(
            feed(&mut s, &[b"\xff\xfe\n{}\n"]),
            vec![Ok(vec![0xff, 0xfe]), Ok(b"{}".to_vec())]
        );
    }

    #[test]
    fn a_line_inside_one_chunk_is_not_copied() {
        let chunk = Bytes::from_static(b"{\"a\":1}\n{\"b\":2}\n");
        let mut s = LineSplitter::new(100).unwrap();
        s.push_bytes(chunk.clone());
        let l = s.next_line().unwrap().unwrap();
        assert_eq!(&l[..], b"{\"a\":1}");
        assert_eq!(l.as_ptr(), chunk.as_ptr());
    }

    #[test]
    fn pushing_without_draining_keeps_every_byte() {
        let mut s = LineSplitter::new(100).unwrap();
        s.push(b"a\nb");
        assert_eq!(&s.next_line().unwrap().unwrap()[..], b"a");
        s.push(b"c\nd\n"); // "b" was not drained with next_line() returning None
        assert_eq!(&s.next_line().unwrap().unwrap()[..], b"bc");
        assert_eq!(&s.next_line().unwrap().unwrap()[..], b"d");
        assert!(s.next_line().is_none());
    }

    // §7 item 12
    #[test]
    fn zero_limit_is_rejected_at_construction() {
        assert!(matches!(
            LineSplitter::new(0),
            Err(AcpError::InvalidOptions { .. })
        ));
        assert_eq!(LineSplitter::new(1).unwrap().max_message_bytes(), 1);
    }

    fn reference(data: &[u8], max: usize) -> Vec<Result<Vec<u8>, usize>> {
        let mut out = Vec::new();
        let mut parts: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
        let last = parts.pop().unwrap_or(&[]);
        for p in parts.iter().chain(std::iter::once(&last)) {
            let mut p = *p;
            if p.last() == Some(&b'\r') {
                p = &p[..p.len() - 1];
            }
            if p.len() > max {
                out.push(Err(max));
                return out;
            }
            if is_blank(p) {
                continue;
            }
            out.push(Ok(p.to_vec()));
        }
        out
    }

    proptest! {
        #[test]
        fn random_chunkings_give_the_same_lines(
            lines in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'\r'), Just(b' '), Just(0xe2u8), Just(0x82u8)], 0..20), 0..20),
            crlf in proptest::collection::vec(any::<bool>(), 20),
            cuts in proptest::collection::vec(0usize..400, 0..30),
            max in 1usize..25,
        ) {
            let mut data = Vec::new();
            for (i, l) in lines.iter().enumerate() {
                data.extend_from_slice(l);
                if crlf[i % crlf.len()] { data.push(b'\r'); }
                data.push(b'\n');
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut prev = 0;
            for c in cuts { chunks.push(&data[prev..c]); prev = c; }
            chunks.push(&data[prev..]);
            let mut s = LineSplitter::new(max).unwrap();
            let got = feed(&mut s, &chunks);
            let want = reference(&data, max);
            // an early failure on the pending tail may happen before the newline arrives, but the
            // sequence of lines before it is the same
            prop_assert_eq!(got, want);
        }
    }
}
