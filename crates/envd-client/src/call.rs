//! Per-call options and envd's header names.

use std::time::Duration;

use base64::Engine as _;

/// Header names envd reads.
pub mod headers {
    /// The access token.
    pub const ACCESS_TOKEN: &str = "x-access-token";
    /// The sandbox id, for E2B's shared proxy host.
    pub const SANDBOX_ID: &str = "e2b-sandbox-id";
    /// The envd port behind the proxy.
    pub const SANDBOX_PORT: &str = "e2b-sandbox-port";
    /// Seconds between keepalive events on a stream with no data.
    pub const KEEPALIVE_PING_INTERVAL: &str = "keepalive-ping-interval";
    /// The deadline in milliseconds; on `Start` it is also the process lifetime.
    pub const CONNECT_TIMEOUT_MS: &str = "connect-timeout-ms";
    /// The user, as HTTP Basic with an empty password.
    pub const AUTHORIZATION: &str = "authorization";
}

/// The keepalive interval the E2B SDKs ask for on streams.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(50);

/// Options for one RPC.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CallOptions {
    /// Run as this user (overrides the endpoint's user).
    pub user: Option<String>,
    /// Ask for keepalive events on a stream this often.
    pub keepalive: Option<Duration>,
    /// Sent as `Connect-Timeout-Ms`. On `Start` envd kills the process when it expires, so this
    /// is the *command* timeout there; `None` or zero sends nothing (no deadline).
    pub deadline: Option<Duration>,
    /// Send no user at all, even when the endpoint has one (envd's `Connect`, `List`, ... take none).
    pub no_user: bool,
}

impl CallOptions {
    /// Options for a streaming call: keepalive every [`DEFAULT_KEEPALIVE_INTERVAL`].
    pub fn streaming() -> Self {
        Self {
            keepalive: Some(DEFAULT_KEEPALIVE_INTERVAL),
            ..Self::default()
        }
    }

    /// Sets the user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets `Connect-Timeout-Ms` (zero = none).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sends no user header.
    pub fn without_user(mut self) -> Self {
        self.no_user = true;
        self
    }
}

/// `Basic base64("<user>:")`, the value envd reads the user from.
pub fn basic_auth_value(user: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:"));
    format!("Basic {encoded}")
}
