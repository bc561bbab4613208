//! A local envd-compatible daemon: envd's Process service (and, later, its Filesystem service)
//! plus its REST API, served on **one port** in four protocols:
//!
//! - gRPC over h2c (our tonic clients),
//! - gRPC-Web over HTTP/1.1 (tonic clients behind proxies that lack HTTP/2),
//! - Connect, JSON or binary protobuf, unary and streaming (the official E2B SDKs),
//! - plain REST (`/health`, `/envs`, `/metrics`, `/init`).
//!
//! Requests are routed by `Content-Type`. All protocols call the same
//! [`tonic`] service implementation, so behaviour is identical whichever protocol a client speaks.
//!
//! # Embedding
//!
//! ```no_run
//! # async fn demo() -> Result<(), e2b_envd::EnvdError> {
//! let mut config = e2b_envd::EnvdConfig::default();
//! config.bind = "127.0.0.1:0".parse().expect("addr");
//! config.access_token = Some("secret".into());
//! let handle = e2b_envd::Envd::start(config).await?;
//! println!("envd listening on {}", handle.url());
//! handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! [`EnvdHandle::local_service`] is the same daemon as an in-process [`tower::Service`]: an
//! embedding program's own clients (`e2b::Sandbox::local()`) call it without a socket.
//!
//! See `docs/envd.md` for the behaviour, the deviations from E2B's envd, and how to plug another
//! service (the Filesystem service) into the Connect dispatcher and the REST router.

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
