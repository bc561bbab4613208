//! The facade's error type.

use e2b_commands::CommandError;
use e2b_envd_client::EnvdError;

/// What can go wrong creating, reaching or stopping a sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A setting (environment variable, endpoint) is missing or malformed.
    #[error("configuration error: {0}")]
    Config(String),
    /// The connection to envd could not be set up or failed.
    #[error(transparent)]
    Envd(#[from] EnvdError),
    /// A command failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A file operation failed.
    #[error(transparent)]
    Files(#[from] e2b_filesystem::FilesystemError),
    /// The embedded daemon could not start.
    #[error(
        "the local envd daemon could not start: {0}. Check that 127.0.0.1 allows binding a port and that the temporary directory is writable"
    )]
    Local(String),
    /// The control plane refused or failed to create the sandbox.
    #[error("the control plane could not create the sandbox: {0}")]
    ControlPlane(String),
}
