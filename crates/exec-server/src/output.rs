//! Bounded output capture: the head and the tail of a byte stream, with a marker in between.

use std::collections::VecDeque;

/// Keeps the first `cap / 2` and the last `cap - cap / 2` bytes of everything pushed into it,
/// and counts what it dropped. Memory stays at `cap` bytes however much is pushed.
#[derive(Debug)]
pub(crate) struct HeadTail {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    /// A buffer that keeps at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    fn head_cap(&self) -> usize {
        self.cap / 2
    }

    fn tail_cap(&self) -> usize {
        self.cap - self.head_cap()
    }

    /// Appends bytes.
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_cap().saturating_sub(self.head.len());
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        let tail_cap = self.tail_cap();
        if tail_cap == 0 {
            return;
        }
        if data.len() >= tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(data);
    }

    /// How many bytes were pushed in all.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The first bytes kept (everything when nothing was dropped and it fits the head).
    pub(crate) fn head(&self) -> &[u8] {
        &self.head
    }

    /// Whether bytes were dropped.
    pub(crate) fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The kept bytes: everything when nothing was dropped, else head, marker, tail.
    pub(crate) fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + self.tail.len() + 64);
        out.extend_from_slice(&self.head);
        if self.truncated() {
            let dropped = self.total - (self.head.len() + self.tail.len()) as u64;
            out.extend_from_slice(truncation_marker(dropped).as_bytes());
        }
        let (a, b) = self.tail.as_slices();
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        out
    }
}

/// The in-band marker put between head and tail.
pub(crate) fn truncation_marker(dropped: u64) -> String {
    format!("\n[... exec-server: output truncated, {dropped} bytes omitted ...]\n")
}

/// The most bytes the text of one tool result may take as a JSON string: with the rest of the
/// result it stays under the 1 MiB SSE event limit of the official MCP Python SDK.
pub(crate) const MAX_RESULT_JSON_TEXT: usize = 960 * 1024;

/// The length of `s` as a JSON string (quotes and escapes included).
fn json_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// Cuts `text` (head and tail kept, a marker between) until it takes at most `budget` bytes as
/// a JSON string; returns it and whether it was cut. Control characters take six bytes each
/// when escaped, so a byte cap alone does not bound the JSON.
pub(crate) fn fit_json(text: String, budget: usize) -> (String, bool) {
    let len = json_len(&text);
    if len <= budget {
        return (text, false);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut keep = chars.len().saturating_mul(budget) / len;
    loop {
        keep = keep.saturating_sub(64);
        let head = keep / 2;
        let tail = keep - head;
        let dropped = chars.len() - keep;
        let mut out: String = chars[..head].iter().collect();
        out.push_str(&format!(
            "\n[... exec-server: {dropped} characters omitted to keep the result under the client's message size limit ...]\n"
        ));
        out.extend(&chars[chars.len() - tail..]);
        if json_len(&out) <= budget || keep == 0 {
            return (out, true);
        }
        keep = keep * 9 / 10;
    }
}

/// Decodes output as lossy UTF-8, keeping NUL bytes.
pub(crate) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut b = HeadTail::new(10);
        b.push(b"abc");
        b.push(b"de");
        assert!(!b.truncated());
        assert_eq!(b.render(), b"abcde");
        assert_eq!(b.total(), 5);
    }

    #[test]
    fn exactly_the_cap_is_not_truncated() {
        let mut b = HeadTail::new(10);
        b.push(b"0123456789");
        assert!(!b.truncated());
        assert_eq!(b.render(), b"0123456789");
    }

    #[test]
    fn keeps_head_and_tail_with_marker() {
        let mut b = HeadTail::new(10);
        for i in 0..100u8 {
            b.push(&[b'a' + (i % 26)]);
        }
        assert!(b.truncated());
        let r = String::from_utf8(b.render()).unwrap_or_default();
        assert!(r.starts_with("abcde"), "{r}");
        // last five pushed: i = 95..100 -> letters (95%26=17 => 'r') .. 'v'
        assert!(r.ends_with("rstuv"), "{r}");
        assert!(r.contains("90 bytes omitted"), "{r}");
        assert_eq!(b.total(), 100);
    }

    #[test]
    fn big_single_push() {
        let mut b = HeadTail::new(4);
        let data: Vec<u8> = (0..=255u8).collect();
        b.push(&data);
        let r = b.render();
        assert_eq!(&r[..2], &[0, 1]);
        assert_eq!(&r[r.len() - 2..], &[254, 255]);
    }

    #[test]
    fn results_fit_the_json_budget() {
        let (t, cut) = fit_json("abc".into(), 100);
        assert_eq!((t.as_str(), cut), ("abc", false));
        let nuls = "\0".repeat(10_000);
        let (t, cut) = fit_json(nuls, 1000);
        assert!(cut);
        assert!(json_len(&t) <= 1000, "{}", json_len(&t));
        assert!(t.contains("omitted"));
        assert_eq!(json_len("a\"\n\u{1}"), 2 + 1 + 2 + 2 + 6);
        assert_eq!(
            json_len("a\"\n\u{1}é"),
            serde_json::to_string("a\"\n\u{1}é")
                .unwrap_or_default()
                .len()
        );
    }

    #[test]
    fn lossy_keeps_nul_and_replaces_invalid() {
        assert_eq!(lossy(b"a\0b\xffc"), "a\0b\u{fffd}c");
        assert_eq!(lossy(b""), "");
    }
}
