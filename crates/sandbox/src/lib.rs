#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

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
#[cfg(feature = "local")]
pub use local::{LocalNetwork, LocalOptions};

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
