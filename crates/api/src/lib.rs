//! A typed client for E2B's control-plane API (the "E2B API", `openapi/e2b.yml`).
//!
//! - [`ApiClient`] calls the sandbox endpoints: create, list (with a [`Paginator`] that follows
//!   `X-Next-Token`), get, kill, set timeout, connect (resumes a paused sandbox), pause, metrics
//!   and logs, authenticated with `X-API-Key`.
//! - [`ConnectionConfig`] reads the settings as the official SDKs do (`E2B_API_KEY`,
//!   `E2B_DOMAIN`, `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_DEBUG`) and applies their envd URL rule.
//! - [`ApiError`] has the SDKs' error kinds (authentication, not found, rate limit, invalid
//!   argument, conflict, timeout), each message saying what to do.
//! - [`models`] holds the spec's sandbox schemas as serde types, usable on both sides of the
//!   wire (this client, and a server such as `e2b serve`). They are generated from the vendored
//!   spec; a test fails when they drift.
//!
//! ```no_run
//! use e2b_api::{ApiClient, ListQuery, models::NewSandbox};
//!
//! # async fn demo() -> Result<(), e2b_api::ApiError> {
//! let api = ApiClient::from_env()?; // E2B_API_KEY, and E2B_API_URL for `e2b serve`
//! let sandbox = api.create_sandbox(&NewSandbox::new("base")).await?;
//! let everything = api.list(ListQuery::new()).collect(None).await?;
//! assert!(everything.iter().any(|s| s.sandbox_id == sandbox.sandbox_id));
//! api.kill_sandbox(&sandbox.sandbox_id).await?;
//! # Ok(()) }
//! ```

mod client;
mod config;
mod error;
pub mod models;

pub use client::{
    API_KEY_HEADER, ApiClient, Connected, ListPage, ListQuery, LogsQuery, MAX_RESPONSE_BYTES,
    NEXT_TOKEN_HEADER, Paginator, TOTAL_RUNNING_HEADER, encode_metadata, seconds,
};
pub use config::{
    ConnectionConfig, DEBUG_API_URL, DEBUG_ENVD_URL, DEFAULT_DOMAIN, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SANDBOX_TIMEOUT, DEFAULT_TEMPLATE, E2B_API_KEY, E2B_API_URL, E2B_DEBUG, E2B_DOMAIN,
    E2B_SANDBOX_URL, E2B_SHARED_HOST_DOMAINS, E2B_VALIDATE_API_KEY, ENVD_PORT, looks_like_api_key,
};
pub use error::ApiError;

impl models::NewSandbox {
    /// A request for a sandbox from `template` (id or alias) with every option left to the
    /// server.
    pub fn new(template: impl Into<String>) -> Self {
        Self {
            template_id: template.into(),
            allow_internet_access: None,
            auto_pause: None,
            auto_pause_memory: None,
            auto_resume: None,
            env_vars: None,
            iam: None,
            mcp: None,
            metadata: None,
            network: None,
            secure: None,
            timeout: None,
            volume_mounts: None,
        }
    }
}
