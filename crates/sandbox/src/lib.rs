//! Sandboxes for AI agents: a local embedded envd or any remote envd, with commands and files.
//!
//! Start here. A [`Sandbox`] is one envd (E2B's in-sandbox daemon) and the clients that talk to
//! it, [`Sandbox::commands`] and [`Sandbox::files`]:
//!
//! - [`Sandbox::local`] starts the embedded daemon on `127.0.0.1:<free port>`, with a random
//!   access token and a fresh temporary working directory (needs the `local` feature, on by
//!   default). Dropping the sandbox or calling [`Sandbox::kill`] stops the daemon and every
//!   process it started.
//! - [`Sandbox::connect`] reaches any envd (our daemon elsewhere, or a real E2B sandbox) from an
//!   [`EnvdEndpoint`]; [`Sandbox::from_env`] builds that endpoint from `E2B_*` variables.
//! - Creating sandboxes in E2B's cloud goes through a [`ControlPlane`] (no cloud implementation
//!   yet).
//! - [`Sandbox::create`] / [`Sandbox::builder`] create a sandbox through E2B's API (E2B's cloud
//!   with `E2B_API_KEY`, or `e2b serve` with `E2B_API_URL`); [`Sandbox::connect_by_id`],
//!   [`Sandbox::list`], and on a sandbox `set_timeout`, `info`, `metrics`, `pause`, `resume`,
//!   `kill` manage it (crate `e2b-api`, re-exported as [`api`]).
//!
//! ```no_run
//! use e2b::{CommandOptions, Sandbox};
//!
//! # #[cfg(feature = "local")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let sandbox = Sandbox::local().await?;
//! let out = sandbox.commands().run("echo hello from $PWD", CommandOptions::new()).await?;
//! print!("{}", out.stdout);
//! sandbox.kill().await?;
//! # Ok(()) }
//! ```

mod cloud;
mod control;
mod env;
mod error;
#[cfg(feature = "local")]
mod local;
mod sandbox;

pub use cloud::{SandboxBuilder, endpoint_for};
pub use control::{ControlPlane, CreateOptions};
/// E2B's control-plane API client and models (`e2b-api`).
pub use e2b_api as api;
pub use e2b_api::{ApiClient, ApiError, ConnectionConfig, ListQuery, Paginator};
pub use env::{
    E2B_ACCESS_TOKEN, E2B_DEBUG, E2B_ENVD_TRANSPORT, E2B_ENVD_VERSION, E2B_SANDBOX_ID,
    E2B_SANDBOX_URL, E2B_USER,
};
pub use error::SandboxError;
pub use sandbox::{LocalTransport, Sandbox};

#[cfg(feature = "local")]
pub use e2b_envd::EnvdConfig;

/// The commands client and its types (`e2b-commands`).
pub use e2b_commands::{
    CommandError, CommandEvent, CommandEvents, CommandExitError, CommandHandle, CommandLine,
    CommandOptions, CommandOutput, Commands, ConnectOptions, ExitStatus, OutputCallback,
    ProcessInfo, ProcessSelector, PtySize, Signal, Utf8Decoder,
};
/// The connection types (`e2b-envd-client`).
pub use e2b_envd_client::{EnvdConnection, EnvdEndpoint, EnvdError, Transport};
/// envd versions and features (`e2b-envd-version`).
pub use e2b_envd_version::{EnvdVersion, Feature, UnsupportedFeature};
/// The filesystem client and its types (`e2b-filesystem`).
pub use e2b_filesystem::{
    EntryInfo, EventType, FileType, Filesystem, FilesystemError, FilesystemEvent, WatchHandle,
    WatchOptions, WriteEntry, WriteInfo, WriteOptions,
};

/// The crates this facade builds on, for what it does not re-export.
pub mod crates {
    pub use e2b_api as api;
    pub use e2b_commands as commands;
    pub use e2b_envd_client as envd_client;
    pub use e2b_envd_version as envd_version;
    pub use e2b_filesystem as filesystem;
}
