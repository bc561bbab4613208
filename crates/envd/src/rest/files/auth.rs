//! Access control of `/files`: the access token or a `v1_` URL signature (envd's
//! `internal/api/auth.go`), with envd's exact 401 messages.

use e2b_envd_proto::wire::{self, FileOperation};

use crate::state::{State, constant_time_eq};

/// The query parameters of `/files`.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct FilesQuery {
    pub(crate) path: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) signature: Option<String>,
    pub(crate) signature_expiration: Option<String>,
}

/// Why a request was refused: status and envd's message.
pub(crate) type Refusal = (http::StatusCode, String);

/// Checks the token or signature for `operation` over the raw `path` parameter.
pub(crate) fn check(
    state: &State,
    headers: &http::HeaderMap,
    q: &FilesQuery,
    operation: FileOperation,
) -> Result<(), Refusal> {
    let unauthorized = |m: &str| (http::StatusCode::UNAUTHORIZED, m.to_string());
    let Some(token) = state.access_token() else {
        return Ok(());
    };
    if let Some(given) = headers.get(wire::headers::ACCESS_TOKEN) {
        return if constant_time_eq(given.as_bytes(), token.as_bytes()) {
            Ok(())
        } else {
            Err(unauthorized(
                "access token present in header but does not match",
            ))
        };
    }
    let Some(sig) = q.signature.as_deref().filter(|s| !s.is_empty()) else {
        return Err(unauthorized("missing signature query parameter"));
    };
    let expiration = match q.signature_expiration.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match s.trim().parse::<i64>() {
            Ok(v) => Some(v),
            Err(_) => {
                return Err((
                    http::StatusCode::BAD_REQUEST,
                    format!(
                        "invalid format for parameter signature_expiration: '{s}' is not a unix timestamp in seconds"
                    ),
                ));
            }
        },
    };
    let expected = wire::file_signature(
        q.path.as_deref().unwrap_or(""),
        operation,
        q.username.as_deref().unwrap_or(""),
        &token,
        expiration,
    );
    if !constant_time_eq(sig.as_bytes(), expected.as_bytes()) {
        return Err(unauthorized("invalid signature"));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    if let Some(exp) = expiration
        && exp < now
    {
        return Err(unauthorized("signature is already expired"));
    }
    if let Some(max) = state.limits().signature_max_age {
        let max_secs = i64::try_from(max.as_secs()).unwrap_or(i64::MAX);
        match expiration {
            None => {
                return Err(unauthorized(&format!(
                    "signed URLs without an expiration are refused by this daemon (its maximum signature age is {max_secs} s): sign with an expiration"
                )));
            }
            Some(exp) if exp.saturating_sub(now) > max_secs => {
                return Err(unauthorized(&format!(
                    "the signature expires too far in the future: this daemon accepts signatures valid for at most {max_secs} s"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_stable() {
        // sha256("/a.txt:read:user:tok") in standard base64 without padding.
        let sig = |op, exp| wire::file_signature("/a.txt", op, "user", "tok", exp);
        let s = sig(FileOperation::Read, None);
        assert!(s.starts_with("v1_"));
        assert!(!s.ends_with('='));
        assert_eq!(s, sig(FileOperation::Read, None));
        assert_ne!(s, sig(FileOperation::Write, None));
        assert_ne!(s, sig(FileOperation::Read, Some(1)));
    }
}
