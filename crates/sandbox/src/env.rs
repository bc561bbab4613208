//! The environment variables the facade reads (the E2B SDKs' names where they apply).

use e2b_envd_client::{EnvdEndpoint, Transport};
use e2b_envd_version::EnvdVersion;

use crate::error::SandboxError;

/// envd's base URL (E2B SDKs: the sandbox URL override), e.g. `http://127.0.0.1:49983`.
pub const E2B_SANDBOX_URL: &str = "E2B_SANDBOX_URL";
/// envd's access token (sent as `X-Access-Token`).
pub const E2B_ACCESS_TOKEN: &str = "E2B_ACCESS_TOKEN";
/// The sandbox id (sent as `E2b-Sandbox-Id`; needed behind E2B's shared proxy host).
pub const E2B_SANDBOX_ID: &str = "E2B_SANDBOX_ID";
/// The envd version the sandbox runs (gates features), e.g. `0.5.1`.
pub const E2B_ENVD_VERSION: &str = "E2B_ENVD_VERSION";
/// `true` (any case): debug mode as in the E2B SDKs: URL `http://localhost:49983` unless
/// `E2B_SANDBOX_URL` says otherwise, envd version 99.99.99 (every feature), id `debug_sandbox_id`.
pub const E2B_DEBUG: &str = "E2B_DEBUG";
/// `grpc` or `grpc-web` (default: by URL scheme: `https` → gRPC-Web, `http` → gRPC).
pub const E2B_ENVD_TRANSPORT: &str = "E2B_ENVD_TRANSPORT";
/// The default user commands run as.
pub const E2B_USER: &str = "E2B_USER";

/// The sandbox id of debug mode's sandbox, as in the SDKs.
pub(crate) const DEBUG_SANDBOX_ID: &str = "debug_sandbox_id";

pub(crate) fn endpoint_from(
    get: impl Fn(&str) -> Option<String>,
) -> Result<EnvdEndpoint, SandboxError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let debug = get(E2B_DEBUG).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let url = match get(E2B_SANDBOX_URL) {
        Some(u) => u,
        None if debug => "http://localhost:49983".to_owned(),
        None => {
            return Err(SandboxError::Config(format!(
                "{E2B_SANDBOX_URL} is not set: set it to envd's URL (for example http://127.0.0.1:49983), \
                 or set {E2B_DEBUG}=true for a debug envd on localhost:49983"
            )));
        }
    };
    let mut ep = EnvdEndpoint::new(url);
    if let Some(t) = get(E2B_ACCESS_TOKEN) {
        ep = ep.access_token(t);
    }
    match get(E2B_SANDBOX_ID) {
        Some(id) => ep = ep.sandbox_id(id),
        None if debug => ep = ep.sandbox_id(DEBUG_SANDBOX_ID),
        None => {}
    }
    if debug {
        ep = ep.envd_version(EnvdVersion::debug_fallback());
    }
    if let Some(v) = get(E2B_ENVD_VERSION) {
        let v: EnvdVersion = v.parse().map_err(|e| SandboxError::InvalidVariable {
            variable: E2B_ENVD_VERSION,
            source: Box::new(e),
        })?;
        ep = ep.envd_version(v);
    }
    apply_transport_and_user(ep, get)
}

/// Applies `E2B_ENVD_TRANSPORT` and `E2B_USER` to an endpoint (also for sandboxes from the API).
pub(crate) fn apply_transport_and_user(
    mut ep: EnvdEndpoint,
    get: impl Fn(&str) -> Option<String>,
) -> Result<EnvdEndpoint, SandboxError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    if let Some(t) = get(E2B_ENVD_TRANSPORT) {
        ep = ep.transport(match t.trim().to_ascii_lowercase().as_str() {
            "grpc" | "h2c" => Transport::Grpc,
            "grpc-web" | "grpcweb" => Transport::GrpcWeb,
            "auto" => Transport::Auto,
            other => {
                return Err(SandboxError::Config(format!(
                    "{E2B_ENVD_TRANSPORT}={other:?}: use grpc (h2c, our daemon), grpc-web (any envd) or auto"
                )));
            }
        });
    }
    if let Some(u) = get(E2B_USER) {
        ep = ep.user(u);
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<EnvdEndpoint, SandboxError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        endpoint_from(|k| map.get(k).cloned())
    }

    /// The endpoint's settings, read back through the connection built from it (nothing is
    /// dialled; building it needs a tokio runtime).
    fn conn(ep: EnvdEndpoint) -> e2b_envd_client::EnvdConnection {
        e2b_envd_client::EnvdConnection::new(ep).unwrap()
    }

    #[tokio::test]
    async fn url_is_required_unless_debug() {
        let err = from(&[]).unwrap_err().to_string();
        assert!(err.contains("E2B_SANDBOX_URL"), "{err}");
        let ep = conn(from(&[("E2B_DEBUG", "TRUE")]).unwrap());
        assert_eq!(ep.url(), "http://localhost:49983");
        assert_eq!(ep.envd_version(), &EnvdVersion::debug_fallback());
        assert_eq!(ep.sandbox_id(), Some("debug_sandbox_id"));
    }

    #[tokio::test]
    async fn every_variable_is_read() {
        let ep = from(&[
            ("E2B_SANDBOX_URL", "https://49983-abc.e2b.app/"),
            ("E2B_ACCESS_TOKEN", "tok"),
            ("E2B_SANDBOX_ID", "abc"),
            ("E2B_ENVD_VERSION", "v0.5.1"),
            ("E2B_ENVD_TRANSPORT", "grpc-web"),
            ("E2B_USER", "user"),
        ])
        .unwrap();
        let ep = conn(ep);
        assert_eq!(ep.url(), "https://49983-abc.e2b.app");
        assert_eq!(ep.access_token(), Some("tok"));
        assert_eq!(ep.sandbox_id(), Some("abc"));
        assert_eq!(ep.envd_version(), &EnvdVersion::new(0, 5, 1));
        assert_eq!(ep.transport(), Transport::GrpcWeb);
        assert_eq!(ep.effective_user(None), Some("user"));
        assert!(
            from(&[
                ("E2B_SANDBOX_URL", "http://x"),
                ("E2B_ENVD_VERSION", "nope")
            ])
            .is_err()
        );
    }
}
