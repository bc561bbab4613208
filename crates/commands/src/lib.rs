#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod commands;
mod decode;
mod error;
mod handle;
mod options;
mod output;
mod pump;
mod rpc;
mod state;
mod stdin;

pub use commands::Commands;
pub use decode::Utf8Decoder;
pub use error::{CallbackError, CommandError, CommandExitError};
pub use handle::{CommandEvents, CommandHandle, EVENT_BUFFER};
pub use options::{
    CommandLine, CommandOptions, ConnectOptions, DEFAULT_COMMAND_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
    IntoCallbackResult, OutputCallback, ProcessInfo, ProcessSelector, PtySize, Signal,
};
pub use output::{CommandEvent, CommandOutput, ExitStatus};
pub use stdin::StdinWriter;

/// Re-exported so users name the same connection types.
pub use e2b_envd_client::{EnvdConnection, EnvdEndpoint, EnvdVersion, Transport};
