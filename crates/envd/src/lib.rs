#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod cli;
mod config;
mod connect;
mod error;
mod filesystem;
#[doc(hidden)]
pub mod fuzzing;
mod memory;
mod process;
mod rest;
mod server;
mod state;
mod users;

pub use cli::{EnvdArgs, run_cli};
pub use config::{DEFAULT_PORT, EnvdConfig, IMPLEMENTED_ENVD_VERSION};
pub use error::DaemonError;

/// The daemon's error type under its former name (it shared the name with
/// `e2b_envd_client::EnvdError`, the client's).
#[deprecated(note = "renamed to `DaemonError`")]
pub type EnvdError = DaemonError;
pub use server::{Envd, EnvdHandle, LocalService};
