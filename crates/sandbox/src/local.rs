//! The embedded daemon behind `Sandbox::local()`.

use std::path::Path;

use e2b_envd::{Envd, EnvdConfig, EnvdHandle};

use crate::error::SandboxError;

pub(crate) struct LocalDaemon {
    // Dropped first: stops the server and kills every process group it started.
    handle: Option<EnvdHandle>,
    workdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for LocalDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalDaemon")
            .field("url", &self.handle.as_ref().map(EnvdHandle::url))
            .field(
                "workdir",
                &self.workdir.as_ref().map(tempfile::TempDir::path),
            )
            .finish()
    }
}

fn random_token() -> String {
    use rand::Rng as _;
    let bytes: [u8; 24] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl LocalDaemon {
    /// Starts the daemon. A config without a token gets a random one; without a default
    /// workdir, a fresh temporary directory (removed when the sandbox goes).
    pub(crate) async fn start(mut config: EnvdConfig) -> Result<Self, SandboxError> {
        if config.access_token.is_none() {
            config.access_token = Some(random_token());
        }
        let workdir = if config.default_workdir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("e2b-sandbox-")
                .tempdir()
                .map_err(|e| SandboxError::Local {
                    message: "cannot create a workdir",
                    source: Box::new(e),
                })?;
            config.default_workdir = Some(dir.path().to_path_buf());
            Some(dir)
        } else {
            None
        };
        let handle = Envd::start(config).await.map_err(|e| SandboxError::Local {
            message: "cannot start the daemon",
            source: Box::new(e),
        })?;
        Ok(Self {
            handle: Some(handle),
            workdir,
        })
    }

    pub(crate) fn url(&self) -> String {
        self.handle
            .as_ref()
            .map(EnvdHandle::url)
            .unwrap_or_default()
    }

    pub(crate) fn access_token(&self) -> Option<String> {
        self.handle.as_ref().and_then(EnvdHandle::access_token)
    }

    pub(crate) fn port(&self) -> u16 {
        self.handle.as_ref().map_or(0, |h| h.local_addr().port())
    }

    /// The daemon as an in-process service (its gRPC calls skip the loopback socket).
    pub(crate) fn local_service(&self) -> Option<e2b_envd::LocalService> {
        self.handle.as_ref().map(EnvdHandle::local_service)
    }

    pub(crate) fn envd_version(&self) -> Option<String> {
        self.handle.as_ref().map(|h| h.envd_version().to_owned())
    }

    pub(crate) fn workdir(&self) -> Option<&Path> {
        self.workdir.as_ref().map(tempfile::TempDir::path)
    }

    /// Graceful stop: every process killed and reaped, then the server stopped.
    pub(crate) async fn shutdown(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
    }
}

impl Drop for LocalDaemon {
    fn drop(&mut self) {
        // The handle's own Drop kills every process group; do it before removing the workdir.
        drop(self.handle.take());
        drop(self.workdir.take());
    }
}
