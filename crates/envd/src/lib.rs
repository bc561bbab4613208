#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod blocking;
#[cfg(feature = "cli")]
mod cli;
mod config;
mod connect;
mod error;
mod filesystem;
#[doc(hidden)]
pub mod fuzzing;
pub mod isolated;
// The idle trimmer serves the command line (`run_cli`); the request counter is always on.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
mod memory;
mod process;
mod rest;
mod server;
mod state;
mod users;

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub use cli::{EnvdArgs, run_cli};
pub use config::{DEFAULT_PORT, EnvdConfig, IMPLEMENTED_ENVD_VERSION};
pub use error::DaemonError;

/// The daemon's error type under its former name (it shared the name with
/// `e2b_envd_client::EnvdError`, the client's).
#[deprecated(note = "renamed to `DaemonError`")]
pub type EnvdError = DaemonError;
pub use server::{Envd, EnvdHandle, LocalService};
