//! `e2b serve`: E2B's sandbox API on one machine.
//!
//! - **API port** (default 3000, `E2B_API_URL`): `POST /sandboxes`, `GET /v2/sandboxes`, info,
//!   kill, timeout, connect, pause, resume, metrics and logs, as in E2B's `openapi.yml`, with
//!   `X-API-Key` auth and E2B's error bodies.
//! - **Edge port** (default 49983, `E2B_SANDBOX_URL`): every sandbox's envd behind one address,
//!   routed by the `E2b-Sandbox-Id` header, by `Host: 49983-<id>.<domain>`, or by the
//!   signature of a signed `/files` URL; streamed both ways, HTTP/1.1 and h2c.
//! - **Sandboxes**: each its own envd process, started by a [`Runtime`] ([`PlainRuntime`] now;
//!   an isolated runtime slots into the same seam), initialised with `POST /init` as E2B's
//!   orchestrator does (default user `user`, its own working directory, env vars, access token
//!   when `secure`). Timeouts kill (or pause, with `autoPause`), pause freezes every process,
//!   connect resumes and only extends the TTL, metrics sample CPU and memory every 5 s.
//! - **No stray process**: every sandbox's envd dies with `e2b serve`, even on SIGKILL, and its
//!   commands with it (see [`sandbox_init`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), e2b_serve::ServeError> {
//! use std::sync::Arc;
//! let runtime = e2b_serve::PlainRuntime::new(e2b_serve::EnvdCommand::current_exe(&[])?);
//! let serve = e2b_serve::Serve::start(e2b_serve::ServeConfig::ephemeral("e2b_0123"), Arc::new(runtime)).await?;
//! println!("E2B_API_URL={} E2B_SANDBOX_URL={}", serve.api_url(), serve.edge_url());
//! serve.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! See `docs/control-plane.md` ("Server") for what maps to what in E2B's cloud.

mod api;
mod cli;
mod edge;
mod error;
mod h2splice;
mod proctree;
mod runtime;
mod sandboxes;
mod server;
mod shim;
mod util;
mod wire;

pub use cli::{Internal, ServeArgs, load_or_create_key, run_cli, run_cli_with};
pub use error::ServeError;
pub use runtime::{
    EnvdCommand, Instance, PlainRuntime, Runtime, SandboxSpec, Usage, isolation_available,
};
pub use server::{Serve, ServeConfig, ServeHandle};
pub use shim::sandbox_init;
