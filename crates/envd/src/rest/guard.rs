//! The browser guard, checked before anything else on every request that arrives on the port:
//! `Host` (DNS rebinding) and `Origin` (cross-site requests).
//!
//! A web page the user visits can make the browser send requests to `127.0.0.1:49983`; it
//! cannot choose the `Origin` header the browser adds, nor (after rebinding its own name to
//! 127.0.0.1) the `Host` header, which stays the page's name. So a request is served only when
//! its `Host` is a loopback name, an IP literal the daemon may be reached at, or a configured
//! name, and when it carries no `Origin` or a configured one. The SDKs and our clients send no
//! `Origin` and a loopback or configured `Host`.

use std::net::{IpAddr, SocketAddr};

use http::{HeaderMap, StatusCode, Uri, header};

/// What a request may carry in `Host` and `Origin`.
#[derive(Debug, Clone)]
pub(crate) struct BrowserGuard {
    bind: SocketAddr,
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl BrowserGuard {
    /// A guard for a daemon bound to `bind`, accepting the configured extra `hosts` (a leading
    /// `*.` matches subdomains) and `origins`.
    pub(crate) fn new(bind: SocketAddr, hosts: &[String], origins: &[String]) -> Self {
        Self {
            bind,
            hosts: hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            origins: origins
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
                .filter(|o| !o.is_empty())
                .collect(),
        }
    }

    /// The configured origins (for CORS).
    pub(crate) fn origins(&self) -> &[String] {
        &self.origins
    }

    /// `Ok` when the request may be served, else the status and a message saying what to
    /// configure.
    pub(crate) fn check(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), (StatusCode, String)> {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let shown = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            let o = shown.trim().trim_end_matches('/').to_ascii_lowercase();
            if !self.origins.contains(&o) {
                return Err((
                    StatusCode::FORBIDDEN,
                    format!(
                        "requests from origin '{shown}' are refused: this daemon serves browsers only from the origins given with --allow-origin (none by default)"
                    ),
                ));
            }
        }
        let host = match headers.get(header::HOST) {
            Some(h) => Some(String::from_utf8_lossy(h.as_bytes()).into_owned()),
            None => uri.authority().map(|a| a.as_str().to_string()),
        };
        if let Some(host) = host
            && !self.host_allowed(&host)
        {
            return Err((
                StatusCode::FORBIDDEN,
                format!(
                    "requests for host '{host}' are refused (DNS rebinding protection): use a loopback address or the bind address, or allow the name with --allow-host"
                ),
            ));
        }
        Ok(())
    }

    /// Whether `host` (a `Host` value, with or without a port) names this daemon.
    pub(crate) fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        let name = name.trim_end_matches('.');
        if name.is_empty() {
            return false;
        }
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            // An IP literal cannot be rebound to another address by DNS.
            return ip.is_loopback() || ip == self.bind.ip() || self.bind.ip().is_unspecified();
        }
        self.hosts.iter().any(|allowed| {
            if let Some(suffix) = allowed.strip_prefix("*.") {
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix)
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
            } else {
                allowed == name
            }
        })
    }
}

/// The host part of a `Host` value: `[::1]:80` → `::1`, `a.b:80` → `a.b`, `::1` → `::1`.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        // More than one colon and no brackets: a bare IPv6 address.
        Some((name, _)) if !name.contains(':') => name,
        Some(_) => host,
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(bind: &str, hosts: &[&str]) -> BrowserGuard {
        let hosts: Vec<String> = hosts.iter().map(|s| s.to_string()).collect();
        BrowserGuard::new(
            bind.parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 1))),
            &hosts,
            &[],
        )
    }

    #[test]
    fn hosts() {
        let g = guard("127.0.0.1:49983", &["*.sbx.local", "box.example"]);
        for ok in [
            "localhost",
            "localhost:49983",
            "LOCALHOST.",
            "127.0.0.1",
            "127.8.9.1:80",
            "[::1]:49983",
            "::1",
            "49983-abc.sbx.local",
            "box.example:1",
        ] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.com",
            "sbx.local",
            "xsbx.local",
            "10.0.0.1",
            "",
            "localhost.evil.com",
            "box.example.evil",
        ] {
            assert!(!g.host_allowed(bad), "{bad}");
        }
        let any = guard("0.0.0.0:49983", &[]);
        assert!(any.host_allowed("10.0.0.1:49983"));
        assert!(!any.host_allowed("evil.com"));
    }
}
