//! envd's wire contract beyond the protobuf messages: header names, the default port, the
//! `/files` query parameters and URL signature, the Basic-auth user encoding and the Connect
//! envelope flags.
//!
//! Client and daemon both use these items, so the two sides cannot drift apart.
//!
//! ```
//! use e2b_envd_proto::wire::{self, FileOperation};
//!
//! // The user header: HTTP Basic with an empty password.
//! let value = wire::basic_auth_value("user");
//! assert_eq!(value, "Basic dXNlcjo=");
//! assert_eq!(wire::basic_auth_user(&value).unwrap().as_deref(), Some("user"));
//!
//! // A `/files` URL signature, valid for reads of `/a.txt` by `user` with token `tok`.
//! let sig = wire::file_signature("/a.txt", FileOperation::Read, "user", "tok", None);
//! assert!(sig.starts_with(wire::SIGNATURE_PREFIX));
//! ```

use base64::Engine as _;
use sha2::Digest as _;

/// The port envd listens on inside a sandbox.
pub const DEFAULT_PORT: u16 = 49983;

/// Header names envd reads (lower case, as HTTP/2 sends them; HTTP/1.1 matches any case).
pub mod headers {
    /// The access token (`X-Access-Token`).
    pub const ACCESS_TOKEN: &str = "x-access-token";
    /// The sandbox id, for E2B's shared proxy host (`E2b-Sandbox-Id`).
    pub const SANDBOX_ID: &str = "e2b-sandbox-id";
    /// The envd port behind the proxy (`E2b-Sandbox-Port`).
    pub const SANDBOX_PORT: &str = "e2b-sandbox-port";
    /// Seconds between keepalive events on a stream with no data (`Keepalive-Ping-Interval`).
    pub const KEEPALIVE_PING_INTERVAL: &str = "keepalive-ping-interval";
    /// The deadline in milliseconds (`Connect-Timeout-Ms`); on `Start` it is also the process
    /// lifetime.
    pub const CONNECT_TIMEOUT_MS: &str = "connect-timeout-ms";
    /// The user, as HTTP Basic with an empty password (see [`basic_auth_value`](super::basic_auth_value)).
    pub const AUTHORIZATION: &str = "authorization";
}

/// Query parameters of envd's `/files` route.
pub mod files_query {
    /// The file path (absolute, or relative to the user's home).
    pub const PATH: &str = "path";
    /// The user the file is read or written as.
    pub const USERNAME: &str = "username";
    /// The URL signature (see [`file_signature`](super::file_signature)).
    pub const SIGNATURE: &str = "signature";
    /// The signature's expiry, unix seconds.
    pub const SIGNATURE_EXPIRATION: &str = "signature_expiration";
}

/// Flags of the 5-byte Connect/gRPC message envelope (1 flag byte, 4-byte big-endian length).
pub mod envelope {
    /// The envelope header length in bytes.
    pub const HEADER_LEN: usize = 5;
    /// Flag: the message is compressed.
    pub const COMPRESSED: u8 = 0x01;
    /// Flag: end of stream (the message is a Connect `EndStreamResponse`).
    pub const END_STREAM: u8 = 0x02;
}

/// The prefix of every `/files` URL signature (the signature scheme's version).
pub const SIGNATURE_PREFIX: &str = "v1_";

/// What a `/files` URL signature allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileOperation {
    /// `GET` (download).
    Read,
    /// `POST` (upload).
    Write,
}

impl FileOperation {
    /// The name used in the signed payload: `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileOperation::Read => "read",
            FileOperation::Write => "write",
        }
    }
}

/// envd's `/files` URL signature:
/// `"v1_" + base64_std_nopad(sha256("<path>:<operation>:<user>:<token>[:<expiration>]"))`,
/// with `expiration` in unix seconds.
pub fn file_signature(
    path: &str,
    operation: FileOperation,
    user: &str,
    token: &str,
    expiration: Option<i64>,
) -> String {
    let mut payload = format!("{path}:{}:{user}:{token}", operation.as_str());
    if let Some(exp) = expiration {
        payload.push(':');
        payload.push_str(&exp.to_string());
    }
    let digest = sha2::Sha256::digest(payload.as_bytes());
    format!(
        "{SIGNATURE_PREFIX}{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// `Basic base64("<user>:")`, the [`headers::AUTHORIZATION`] value envd reads the user from.
pub fn basic_auth_value(user: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:"));
    format!("Basic {encoded}")
}

/// The user name in an `Authorization` value: `Ok(None)` when the value is not Basic
/// credentials or names no user, `Err` when it is Basic but does not decode.
///
/// # Errors
///
/// [`WireError::InvalidBasicAuth`] when the credentials are not base64 or not UTF-8.
pub fn basic_auth_user(value: &str) -> Result<Option<String>, WireError> {
    let value = value.trim();
    let Some(rest) = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))
    else {
        // envd's authn middleware only looks at Basic credentials.
        return Ok(None);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .map_err(|_| WireError::InvalidBasicAuth)?;
    let text = String::from_utf8(decoded).map_err(|_| WireError::InvalidBasicAuth)?;
    let name = text.split_once(':').map(|(n, _)| n).unwrap_or(&text);
    Ok((!name.is_empty()).then(|| name.to_owned()))
}

/// A wire value that does not follow envd's contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// An `Authorization: Basic` value that is not base64 of UTF-8 `user:password`.
    #[error("invalid basic authorization header")]
    InvalidBasicAuth,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_round_trips() {
        assert_eq!(
            basic_auth_user(&basic_auth_value("user")).unwrap(),
            Some("user".into())
        );
        assert_eq!(basic_auth_user(&basic_auth_value("")).unwrap(), None);
        assert_eq!(basic_auth_user("Bearer x").unwrap(), None);
        assert_eq!(
            basic_auth_user("Basic !!!"),
            Err(WireError::InvalidBasicAuth)
        );
    }

    #[test]
    fn signature_matches_the_reference_digest() {
        // Computed independently: base64(sha256(payload)) without padding, in Python.
        assert_eq!(
            file_signature("/a.txt", FileOperation::Read, "user", "tok", None),
            "v1_XWtxPEXQ32YosE/vTtefo243c2C5X+tZLB5JIEwmFHI"
        );
        assert_eq!(
            file_signature(
                "/a.txt",
                FileOperation::Write,
                "user",
                "tok",
                Some(1_700_000_000)
            ),
            "v1_5Zkrl/lAVkIIvgMqoHVmsB7aiu3Hi7btteiHbr6yzrU"
        );
    }

    #[test]
    fn signature_depends_on_every_field() {
        let s = file_signature("/a.txt", FileOperation::Read, "user", "tok", None);
        assert!(s.starts_with("v1_"));
        // sha256 is 32 bytes: 43 base64 characters without padding.
        assert_eq!(s.len(), 3 + 43);
        assert_eq!(
            s,
            file_signature("/a.txt", FileOperation::Read, "user", "tok", None)
        );
        assert_ne!(
            s,
            file_signature("/a.txt", FileOperation::Write, "user", "tok", None)
        );
        assert_ne!(
            s,
            file_signature("/a.txt", FileOperation::Read, "user", "tok", Some(1))
        );
        assert_ne!(
            s,
            file_signature("/b.txt", FileOperation::Read, "user", "tok", None)
        );
    }
}
