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
    /// An environment variable holds a value that does not parse (the source says why).
    #[error("{variable} is malformed: {source}. Fix the value or unset the variable")]
    InvalidVariable {
        /// The variable's name, e.g. `E2B_ENVD_VERSION`.
        variable: &'static str,
        /// The parse error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The embedded daemon could not start.
    #[error(
        "the local envd daemon could not start: {message}: {source}. Check that 127.0.0.1 allows binding a port and that the temporary directory is writable"
    )]
    Local {
        /// What failed (creating the workdir, starting the daemon).
        message: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An isolated local sandbox ([`Sandbox::local`](crate::Sandbox::local)) could not start;
    /// the message names what is missing (root, user namespaces, the NAT helper, the daemon
    /// binary) or why the daemon did not start. There is no fallback to an unisolated sandbox.
    #[error(
        "the isolated local sandbox could not start: {0} (Sandbox::local_unisolated() runs without isolation, on this machine)"
    )]
    Isolated(String),
    /// The control plane refused or failed to create the sandbox.
    #[error("the control plane could not create the sandbox: {0}")]
    ControlPlane(String),
    /// E2B's API (cloud or `e2b serve`) refused or failed a call; the message says what to do.
    #[error(transparent)]
    Api(#[from] e2b_api::ApiError),
    /// The sandbox's template cannot serve this SDK or feature (envd too old).
    #[error("{0}")]
    Template(String),
    /// A lifecycle call on a sandbox that did not come from E2B's API.
    #[error(
        "{operation} works only on a sandbox from E2B's API (Sandbox::create, Sandbox::connect_by_id); this one is local or connected by URL"
    )]
    NotFromApi {
        /// The call that was refused.
        operation: &'static str,
    },
}
