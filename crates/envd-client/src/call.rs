//! Per-call options; envd's header names come from [`e2b_envd_proto::wire`].

use std::time::Duration;

/// Header names envd reads (from [`e2b_envd_proto::wire::headers`]).
pub use e2b_envd_proto::wire::headers;

/// The keepalive interval the E2B SDKs ask for on streams.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(50);

/// Options for one RPC.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CallOptions {
    /// Run as this user (overrides the endpoint's user).
    pub(crate) user: Option<String>,
    /// Ask for keepalive events on a stream this often.
    pub(crate) keepalive: Option<Duration>,
    /// Sent as `Connect-Timeout-Ms`. On `Start` envd kills the process when it expires, so this
    /// is the *command* timeout there; `None` or zero sends nothing (no deadline).
    pub(crate) deadline: Option<Duration>,
    /// Send no user at all, even when the endpoint has one (envd's `Connect`, `List`, ... take none).
    pub(crate) no_user: bool,
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

    /// Asks for keepalive events on a stream this often.
    pub fn keepalive(mut self, interval: Duration) -> Self {
        self.keepalive = Some(interval);
        self
    }

    /// Sends no user header.
    pub fn without_user(mut self) -> Self {
        self.no_user = true;
        self
    }
}

/// `Basic base64("<user>:")`, the value envd reads the user from.
pub use e2b_envd_proto::wire::basic_auth_value;
