#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod api;
mod cli;
mod edge;
mod error;
mod h2splice;
mod pidns;
mod proctree;
mod runtime;
mod sandboxes;
mod server;
mod util;
mod wire;

pub use cli::{Internal, ServeArgs, load_or_create_key, run_cli, run_cli_with};
pub use error::ServeError;
pub use runtime::{
    EnvdCommand, Instance, PlainRuntime, Runtime, SandboxLimits, SandboxSpec, Usage,
    isolation_available,
};
pub use server::{Serve, ServeConfig, ServeHandle};
