//! The HTTP semantics of a download, as Go's `http.ServeContent` (which envd uses) applies
//! them: `Accept-Encoding`, `Range` (one or several ranges), `If-Range`, the
//! `multipart/byteranges` layout and `Content-Disposition`.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};

use super::io::Segment;

/// Parsed `Accept-Encoding`: the q-values of gzip and identity.
pub(crate) fn accept_encoding(headers: &HeaderMap) -> (f32, f32) {
    let Some(v) = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
    else {
        return (0.0, 1.0);
    };
    let (mut gzip, mut identity, mut star) = (None, None, None);
    for part in v.split(',') {
        let mut it = part.split(';');
        let coding = it.next().unwrap_or("").trim().to_ascii_lowercase();
        if coding.is_empty() {
            continue;
        }
        let mut q = 1.0f32;
        for p in it {
            if let Some(val) = p
                .trim()
                .strip_prefix("q=")
                .or_else(|| p.trim().strip_prefix("Q="))
            {
                // RFC 9110 q-values lie in 0..=1; anything else (NaN, inf, 7) is clamped or 0.
                q = val
                    .trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|q| q.is_finite())
                    .map_or(0.0, |q| q.clamp(0.0, 1.0));
            }
        }
        match coding.as_str() {
            "gzip" | "x-gzip" => gzip = Some(q),
            "identity" => identity = Some(q),
            "*" => star = Some(q),
            _ => {}
        }
    }
    (
        gzip.or(star).unwrap_or(0.0),
        identity.or(star).unwrap_or(1.0),
    )
}

/// One satisfiable byte range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteRange {
    /// First byte.
    pub(crate) start: u64,
    /// Number of bytes (at least 1).
    pub(crate) len: u64,
}

impl ByteRange {
    /// The `Content-Range` value for this range of a file of `size` bytes.
    pub(crate) fn content_range(&self, size: u64) -> String {
        format!("bytes {}-{}/{size}", self.start, self.start + self.len - 1)
    }
}

/// Why a `Range` header cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeError {
    /// Not a `bytes=` range set, or a range in it is malformed (416 without `Content-Range`,
    /// as Go's `http.ServeContent`, which envd uses, answers).
    Invalid,
    /// Well-formed, but no range overlaps the file (416 with `Content-Range: bytes */SIZE`).
    NoOverlap,
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses a `Range` header against a file of `size` bytes, as Go's `http.ServeContent` does
/// (envd serves `GET /files` with it): the unit must be `bytes`, each comma-separated range is
/// `first-last`, `first-` or `-suffix` (empty elements are skipped); a malformed range fails
/// the whole header; ranges starting at or past the end are dropped, and if nothing is left
/// the header does not overlap. `Ok` with no ranges = serve the whole file. Unlike Go, a
/// suffix of zero (`-0`) never overlaps, and a suffix range of an empty file leaves the
/// whole (empty) file to be served: a zero-length part has no valid `Content-Range`.
pub(crate) fn parse_ranges(value: &str, size: u64) -> Result<Vec<ByteRange>, RangeError> {
    let value = value.trim();
    let spec = match value.split_once('=') {
        Some((unit, spec)) if unit.trim().eq_ignore_ascii_case("bytes") => spec,
        _ => return Err(RangeError::Invalid),
    };
    let mut ranges = Vec::new();
    let (mut no_overlap, mut empty_suffix) = (false, false);
    for part in spec.split(',') {
        let part = part.trim_matches([' ', '\t']);
        if part.is_empty() {
            continue;
        }
        let Some((first, last)) = part.split_once('-') else {
            return Err(RangeError::Invalid);
        };
        let (first, last) = (
            first.trim_matches([' ', '\t']),
            last.trim_matches([' ', '\t']),
        );
        if first.is_empty() {
            let n = digits(last).ok_or(RangeError::Invalid)?;
            if n == 0 {
                no_overlap = true;
            } else if size == 0 {
                empty_suffix = true;
            } else {
                let n = n.min(size);
                ranges.push(ByteRange {
                    start: size - n,
                    len: n,
                });
            }
            continue;
        }
        let start = digits(first).ok_or(RangeError::Invalid)?;
        if start >= size {
            no_overlap = true;
            continue;
        }
        let end = if last.is_empty() {
            size - 1
        } else {
            match digits(last) {
                Some(e) if e >= start => e.min(size - 1),
                _ => return Err(RangeError::Invalid),
            }
        };
        ranges.push(ByteRange {
            start,
            len: end - start + 1,
        });
    }
    if ranges.is_empty() && no_overlap && !empty_suffix {
        return Err(RangeError::NoOverlap);
    }
    Ok(ranges)
}

/// Whether an `If-Range` precondition lets the `Range` header apply (Go's `checkIfRange`):
/// no header, or a date equal to the file's `Last-Modified` (to the second). We send no
/// `ETag`, so an entity tag never matches and the whole file is served.
pub(crate) fn if_range_allows(headers: &HeaderMap, modified: Option<SystemTime>) -> bool {
    let Some(v) = headers.get(header::IF_RANGE) else {
        return true;
    };
    let Some(v) = v.to_str().ok().map(str::trim) else {
        return false;
    };
    if v.starts_with('"') || v.starts_with("W/") {
        return false;
    }
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .ok()
    };
    match (httpdate::parse_http_date(v).ok(), modified) {
        (Some(since), Some(m)) => secs(since).is_some() && secs(since) == secs(m),
        _ => false,
    }
}

/// A random `multipart/byteranges` boundary (32 hex digits).
pub(crate) fn boundary() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The body of a `multipart/byteranges` response, as segments produced lazily: for each range,
/// its delimiter and headers (`Content-Range`, `Content-Type`) then its bytes from the file;
/// then the closing delimiter.
pub(crate) fn multipart_segments(
    ranges: Vec<ByteRange>,
    boundary: String,
    mime: String,
    size: u64,
) -> impl Iterator<Item = Segment> + Send + 'static {
    let closing = Segment::Literal(Bytes::from(format!("\r\n--{boundary}--\r\n")));
    ranges
        .into_iter()
        .enumerate()
        .flat_map(move |(i, r)| {
            let lead = if i == 0 { "" } else { "\r\n" };
            let head = format!(
                "{lead}--{boundary}\r\nContent-Range: {}\r\nContent-Type: {mime}\r\n\r\n",
                r.content_range(size)
            );
            [
                Segment::Literal(Bytes::from(head)),
                Segment::File {
                    offset: r.start,
                    len: r.len,
                },
            ]
        })
        .chain(std::iter::once(closing))
}

pub(crate) fn content_disposition(name: &str) -> HeaderValue {
    let escaped: String = name
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    HeaderValue::from_str(&format!("inline; filename=\"{escaped}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("inline"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, len: u64) -> ByteRange {
        ByteRange { start, len }
    }

    #[test]
    fn ranges() {
        use RangeError::{Invalid, NoOverlap};
        assert_eq!(parse_ranges("bytes=0-9", 100), Ok(vec![r(0, 10)]));
        assert_eq!(parse_ranges("bytes=90-", 100), Ok(vec![r(90, 10)]));
        assert_eq!(parse_ranges("bytes=-10", 100), Ok(vec![r(90, 10)]));
        assert_eq!(parse_ranges("bytes=-200", 100), Ok(vec![r(0, 100)]));
        assert_eq!(parse_ranges("bytes=95-200", 100), Ok(vec![r(95, 5)]));
        assert_eq!(parse_ranges("Bytes = 1-1", 100), Ok(vec![r(1, 1)]));
        assert_eq!(parse_ranges("bytes=100-", 100), Err(NoOverlap));
        assert_eq!(parse_ranges("bytes=-0", 100), Err(NoOverlap));
        assert_eq!(parse_ranges("bytes=0-", 0), Err(NoOverlap));
        // A suffix of an empty file: the whole (empty) file.
        assert_eq!(parse_ranges("bytes=-5", 0), Ok(vec![]));
        assert_eq!(
            parse_ranges("bytes=0-1, 3-4,,-2", 100),
            Ok(vec![r(0, 2), r(3, 2), r(98, 2)])
        );
        // Ranges past the end are dropped; only when none is left is it a failure.
        assert_eq!(parse_ranges("bytes=0-1,200-300", 100), Ok(vec![r(0, 2)]));
        assert_eq!(parse_ranges("bytes=200-300,150-", 100), Err(NoOverlap));
        assert_eq!(parse_ranges("bytes=", 100), Ok(vec![]));
        for bad in [
            "items=0-1",
            "0-1",
            "bytes=5-2",
            "bytes=a-b",
            "bytes=1",
            "bytes=-",
            "bytes=--1",
            "bytes=+1-2",
            "bytes=0-1,x",
        ] {
            assert_eq!(parse_ranges(bad, 100), Err(Invalid), "{bad}");
        }
    }

    #[test]
    fn multipart_body_layout() {
        let segs: Vec<_> = multipart_segments(
            vec![r(0, 2), r(5, 5)],
            "XYZ".into(),
            "text/plain".into(),
            10,
        )
        .collect();
        let lit = |s: &str| Segment::Literal(Bytes::from(s.to_string()));
        assert_eq!(
            segs,
            vec![
                lit("--XYZ\r\nContent-Range: bytes 0-1/10\r\nContent-Type: text/plain\r\n\r\n"),
                Segment::File { offset: 0, len: 2 },
                lit("\r\n--XYZ\r\nContent-Range: bytes 5-9/10\r\nContent-Type: text/plain\r\n\r\n"),
                Segment::File { offset: 5, len: 5 },
                lit("\r\n--XYZ--\r\n"),
            ]
        );
        let b = boundary();
        assert_eq!(b.len(), 32);
        assert_ne!(b, boundary());
    }

    #[test]
    fn if_range() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let mut h = HeaderMap::new();
        assert!(if_range_allows(&h, Some(t)));
        h.insert(
            header::IF_RANGE,
            HeaderValue::from_str(&httpdate::fmt_http_date(t)).unwrap(),
        );
        assert!(if_range_allows(&h, Some(t)));
        assert!(!if_range_allows(
            &h,
            Some(t + std::time::Duration::from_secs(1))
        ));
        h.insert(header::IF_RANGE, HeaderValue::from_static("\"abc\""));
        assert!(!if_range_allows(&h, Some(t)));
    }

    #[test]
    fn encodings() {
        let mut h = HeaderMap::new();
        assert_eq!(accept_encoding(&h), (0.0, 1.0));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, deflate"),
        );
        assert_eq!(accept_encoding(&h), (1.0, 1.0));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0.5, identity;q=0"),
        );
        assert_eq!(accept_encoding(&h), (0.5, 0.0));
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("*;q=0"));
        assert_eq!(accept_encoding(&h), (0.0, 0.0));
        // Found by the files_range fuzz target's seeds: NaN and infinite q-values are invalid
        // (0); values past 1 are clamped.
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=NaN, identity;q=inf"),
        );
        assert_eq!(accept_encoding(&h), (0.0, 0.0));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=7, identity;q=-1"),
        );
        assert_eq!(accept_encoding(&h), (1.0, 0.0));
    }
}
