//! How a client reaches envd.
//!
//! An [`EnvdEndpoint`] says where an envd is and what it needs: its URL, access token, sandbox
//! id, envd version and the transport to use. [`EnvdConnection::new`] turns it into a cheap,
//! cloneable connection carrying one tonic channel (gRPC over h2c for the local daemon, or
//! gRPC-Web over HTTP/1.1, plain or TLS, for a real envd, which serves no HTTP/2) plus an HTTP
//! client for envd's REST routes. Every request carries envd's headers (`X-Access-Token`,
//! `E2b-Sandbox-Id`, `E2b-Sandbox-Port`, `User-Agent`); per-call headers (user, keepalive,
//! process lifetime) come from [`CallOptions`].
//!
//! ```no_run
//! use e2b_envd_client::{EnvdConnection, EnvdEndpoint, CallOptions};
//! use e2b_envd_proto::process::ListRequest;
//!
//! # async fn demo() -> Result<(), e2b_envd_client::EnvdError> {
//! let conn = EnvdConnection::new(
//!     EnvdEndpoint::new("http://127.0.0.1:49983").access_token("secret"),
//! )?;
//! let mut process = conn.process();
//! let list = process.list(conn.request(ListRequest {}, &CallOptions::default())?).await?;
//! println!("{} processes", list.into_inner().processes.len());
//! # Ok(()) }
//! ```

mod call;
mod connection;
mod endpoint;
mod error;
mod stream;

pub use call::{CallOptions, DEFAULT_KEEPALIVE_INTERVAL, basic_auth_value, headers};
pub use connection::{ChannelError, EnvdChannel, EnvdConnection, FilesystemClient, ProcessClient};
pub use endpoint::{DEFAULT_ENVD_PORT, EnvdEndpoint, Transport};
pub use error::{EnvdError, RpcCode};
pub use stream::{MAX_STREAM_MESSAGE_BYTES, ServerStream};

/// Re-exported so users of this crate name the same version types.
pub use e2b_envd_version::{EnvdVersion, Feature, UnsupportedFeature};
