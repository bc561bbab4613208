#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

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
