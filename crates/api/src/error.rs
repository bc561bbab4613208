//! The client's error type: the SDKs' error kinds, each saying what to do.

use std::time::Duration;

/// What can go wrong calling the E2B API.
///
/// The kinds follow the official SDKs (`AuthenticationException`, `SandboxNotFoundException`,
/// `RateLimitException`, `InvalidArgumentException`, `TimeoutException`, ...). `message` is the
/// server's `Error.message` (or the raw body when it sent no `Error`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No API key is configured.
    #[error(
        "an API key is required: set E2B_API_KEY (get one at https://e2b.dev/dashboard?tab=keys), or for `e2b serve` use the key it printed at start"
    )]
    MissingApiKey,
    /// The API key does not look like `e2b_<hex>`; nothing was sent.
    #[error(
        "the API key does not look like an E2B key (e2b_ followed by hex digits): check E2B_API_KEY, or set E2B_VALIDATE_API_KEY=false to send it anyway"
    )]
    InvalidApiKey,
    /// 401: the server refused the API key.
    #[error("401: Unauthorized, please check your credentials (E2B_API_KEY) - {message}")]
    Authentication {
        /// The server's message.
        message: String,
    },
    /// 404: no such sandbox (or other resource).
    #[error(
        "404: {message}. Check the sandbox id; a sandbox that timed out or was killed is gone (list them with `e2b sandbox list`)"
    )]
    NotFound {
        /// The server's message.
        message: String,
    },
    /// 429: too many requests or too many sandboxes for the team's limits.
    #[error("429: Rate limit exceeded, please try again later - {message}")]
    RateLimit {
        /// The server's message.
        message: String,
    },
    /// 400: the request was malformed (bad id, bad filter, bad body).
    #[error("400: {message}. Fix the argument named in the message")]
    InvalidArgument {
        /// The server's message.
        message: String,
    },
    /// 409: the sandbox is in a state that conflicts with the request (already paused, being
    /// killed).
    #[error("409: {message}. Check the sandbox's state with `e2b sandbox info <id>` and retry")]
    Conflict {
        /// The server's message.
        message: String,
    },
    /// Any other non-success status (5xx, 403, 410, ...).
    #[error("{status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
        /// The server's machine-readable `error_code`, when sent.
        error_code: Option<String>,
    },
    /// The request did not finish within the request timeout.
    #[error(
        "the request to the E2B API timed out after {0:?}: the API may be overloaded or unreachable; retry, or raise the request timeout"
    )]
    Timeout(Duration),
    /// The API could not be reached (DNS, connection refused, TLS).
    #[error(
        "cannot reach the E2B API at {url}: {source}. Check E2B_API_URL / E2B_DOMAIN and your network"
    )]
    Connect {
        /// The API URL.
        url: String,
        /// The underlying error.
        #[source]
        source: reqwest::Error,
    },
    /// The request failed on the wire after connecting.
    #[error("the E2B API request failed: {0}")]
    Http(#[source] reqwest::Error),
    /// A success response whose body does not match the spec.
    #[error(
        "the E2B API answered {status} with a body this client cannot read ({detail}); the server may speak a different API version"
    )]
    Decode {
        /// The HTTP status.
        status: u16,
        /// What did not match.
        detail: String,
    },
    /// A setting is malformed (e.g. an API URL that is not a URL).
    #[error("configuration error: {0}")]
    Config(String),
}

impl ApiError {
    /// The HTTP status this error came from, if it came from a response.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Authentication { .. } => Some(401),
            Self::NotFound { .. } => Some(404),
            Self::RateLimit { .. } => Some(429),
            Self::InvalidArgument { .. } => Some(400),
            Self::Conflict { .. } => Some(409),
            Self::Status { status, .. } | Self::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Maps an error status and body as the SDKs do: the body's `Error.message` when it parses,
    /// else the raw body.
    pub fn from_response(status: u16, body: &[u8]) -> Self {
        let (message, error_code) = match serde_json::from_slice::<crate::models::Error>(body) {
            Ok(e) => (e.message, e.error_code),
            Err(_) => {
                let raw = String::from_utf8_lossy(body);
                let raw: String = raw.trim().chars().take(2000).collect();
                (raw, None)
            }
        };
        match status {
            400 => Self::InvalidArgument { message },
            401 => Self::Authentication { message },
            404 => Self::NotFound { message },
            409 => Self::Conflict { message },
            429 => Self::RateLimit { message },
            _ => Self::Status {
                status,
                message,
                error_code,
            },
        }
    }
}
