#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod call;
mod channel;
mod connection;
mod endpoint;
mod error;
mod stream;

pub use call::{CallOptions, DEFAULT_KEEPALIVE_INTERVAL, basic_auth_value, headers};
pub use channel::{ChannelError, EnvdChannel, FilesystemClient, ProcessClient};
pub use connection::EnvdConnection;
pub use endpoint::{DEFAULT_ENVD_PORT, EnvdEndpoint, Transport};
pub use error::{EnvdError, RpcCode};
pub use stream::{MAX_STREAM_MESSAGE_BYTES, ServerStream};

/// Re-exported so users of this crate name the same version types.
pub use e2b_envd_version::{EnvdVersion, Feature, UnsupportedFeature};
