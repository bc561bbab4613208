//! The seam to a control plane that creates sandboxes (E2B's cloud API comes later).

use std::collections::HashMap;
use std::time::Duration;

use e2b_envd_client::EnvdEndpoint;

use crate::error::SandboxError;

/// Options for creating a sandbox through a [`ControlPlane`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CreateOptions {
    /// How long the sandbox may live before the control plane stops it.
    pub timeout: Option<Duration>,
    /// Metadata to attach to the sandbox.
    pub metadata: HashMap<String, String>,
    /// Environment variables for every command in the sandbox.
    pub envs: HashMap<String, String>,
    /// Whether envd requires an access token (E2B's `secure`, default true there).
    pub secure: Option<bool>,
}

/// Something that creates sandboxes and says where their envd is: E2B's API
/// (`POST /sandboxes`), a self-hosted E2B, or a local pool. No cloud implementation exists yet;
/// implement this trait to plug one in and use [`Sandbox::create`](crate::Sandbox::create).
#[async_trait::async_trait]
pub trait ControlPlane: Send + Sync {
    /// Creates a sandbox from `template` and returns its envd endpoint (URL, access token,
    /// sandbox id, envd version from the response's `envdVersion`).
    async fn create(
        &self,
        template: &str,
        opts: CreateOptions,
    ) -> Result<EnvdEndpoint, SandboxError>;

    /// Stops a sandbox created here. The default does nothing.
    async fn kill(&self, _sandbox_id: &str) -> Result<(), SandboxError> {
        Ok(())
    }
}
