#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod cli;
mod config;
mod connect;
mod error;
mod filesystem;
#[doc(hidden)]
pub mod fuzzing;
mod process;
mod rest;
mod server;
mod state;
mod users;

pub use cli::{EnvdArgs, run_cli};
pub use config::{DEFAULT_PORT, EnvdConfig, IMPLEMENTED_ENVD_VERSION};
pub use error::EnvdError;
pub use server::{Envd, EnvdHandle, LocalService};
