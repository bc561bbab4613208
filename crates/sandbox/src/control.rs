//! The seam to a control plane that creates sandboxes. [`e2b_api::ApiClient`] implements it
//! (E2B's cloud, a self-hosted E2B, `e2b serve`); [`Sandbox::create`](crate::Sandbox::create)
//! and [`Sandbox::builder`](crate::Sandbox::builder) use that client directly.

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
    /// Whether the sandbox may reach the internet (default true).
    pub allow_internet_access: Option<bool>,
    /// Pause instead of kill when the timeout expires.
    pub auto_pause: Option<bool>,
}

/// Something that creates sandboxes and says where their envd is: E2B's API
/// (`POST /sandboxes`, implemented by [`e2b_api::ApiClient`]), a self-hosted E2B, or a local
/// pool. Implement this trait to plug another one in and use
/// [`Sandbox::create_with`](crate::Sandbox::create_with).
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

#[async_trait::async_trait]
impl ControlPlane for e2b_api::ApiClient {
    async fn create(
        &self,
        template: &str,
        opts: CreateOptions,
    ) -> Result<EnvdEndpoint, SandboxError> {
        let mut builder = crate::Sandbox::builder(template)
            .envs(opts.envs)
            .timeout(opts.timeout.unwrap_or(e2b_api::DEFAULT_SANDBOX_TIMEOUT));
        for (k, v) in opts.metadata {
            builder = builder.metadata(k, v);
        }
        if let Some(s) = opts.secure {
            builder = builder.secure(s);
        }
        if let Some(a) = opts.allow_internet_access {
            builder = builder.allow_internet_access(a);
        }
        if let Some(p) = opts.auto_pause {
            builder = builder.auto_pause(p);
        }
        let info = self.create_sandbox(&builder.request()).await?;
        crate::cloud::endpoint_for(self.config(), &info)
    }

    async fn kill(&self, sandbox_id: &str) -> Result<(), SandboxError> {
        self.kill_sandbox(sandbox_id).await?;
        Ok(())
    }
}
