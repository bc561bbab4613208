//! Small helpers: timestamps, ids, tokens, query decoding.

use rand::Rng as _;
use time::OffsetDateTime;

/// Now, in UTC, truncated to microseconds (the precision E2B's API returns).
pub(crate) fn now() -> OffsetDateTime {
    truncate_us(OffsetDateTime::now_utc())
}

/// `t` truncated to whole microseconds.
pub(crate) fn truncate_us(t: OffsetDateTime) -> OffsetDateTime {
    let ns = t.nanosecond();
    t.replace_nanosecond(ns - ns % 1000).unwrap_or(t)
}

/// RFC 3339 in UTC with microseconds, e.g. `2026-12-01T10:00:00.123456Z`.
pub(crate) fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    rfc3339_utc(t, t.microsecond(), 6)
}

/// RFC 3339 with nanoseconds (pagination tokens, as infra writes them).
pub(crate) fn rfc3339_nano(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    rfc3339_utc(t, t.nanosecond(), 9)
}

/// `t` (in UTC) with `fraction` as its `digits`-digit fraction of a second.
fn rfc3339_utc(t: OffsetDateTime, fraction: u32, digits: usize) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{fraction:0digits$}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    )
}

/// Parses an RFC 3339 date-time with any offset.
pub(crate) fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// A sandbox id as E2B makes them: `i` + 20 characters of `[a-z0-9]`.
pub(crate) fn sandbox_id() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut id = String::with_capacity(21);
    id.push('i');
    for _ in 0..20 {
        id.push(CHARS[rng.random_range(0..CHARS.len())] as char);
    }
    id
}

/// `n` random bytes as lowercase hex.
pub(crate) fn random_hex(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

/// Bytes used and total of a filesystem, from its `statvfs`.
#[allow(clippy::unnecessary_cast)] // statvfs field types differ between targets
pub(crate) fn fs_usage(v: &nix::sys::statvfs::Statvfs) -> (u64, u64) {
    let frag = v.fragment_size() as u64;
    let total = (v.blocks() as u64).saturating_mul(frag);
    let free = (v.blocks_free() as u64).saturating_mul(frag);
    (total.saturating_sub(free), total)
}

/// Whether `id` is a well-formed sandbox id (`^[a-z0-9]+$`).
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Go's `url.QueryUnescape`: `+` is a space, `%XX` a byte; a malformed escape is an error.
pub(crate) fn query_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The `key=value` pairs of a raw query string, each decoded once.
pub(crate) fn query_pairs(raw: Option<&str>) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        out.push((query_unescape(k)?, query_unescape(v)?));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_like_go() {
        assert_eq!(query_unescape("a%2520b").as_deref(), Some("a%20b"));
        assert_eq!(query_unescape("a+b%26").as_deref(), Some("a b&"));
        assert_eq!(query_unescape("%zz"), None);
        assert_eq!(query_unescape("%2"), None);
    }

    #[test]
    fn timestamps_are_microseconds_utc() {
        let t = parse_rfc3339("2026-12-01T10:00:00.123456789+01:00");
        let t = t.map(truncate_us).map(rfc3339);
        assert_eq!(t.as_deref(), Some("2026-12-01T09:00:00.123456Z"));
        assert!(valid_id("iabc123"));
        assert!(!valid_id("I-bad"));
        assert_eq!(sandbox_id().len(), 21);
    }
}
