//! Run commands in an E2B sandbox over envd's process API, with streaming output that the
//! handle need not keep.
//!
//! [`Commands`] mirrors the E2B SDKs' `sandbox.commands`: [`run`](Commands::run) (foreground,
//! exit status as data), [`start`](Commands::start) (background, output retained),
//! [`start_streaming`](Commands::start_streaming) (long-lived: no retention, stdin open, no
//! command timeout, output only to callbacks or an event stream with back-pressure),
//! [`connect`](Commands::connect), [`list`](Commands::list), [`kill`](Commands::kill),
//! [`signal`](Commands::signal), [`send_stdin`](Commands::send_stdin) and
//! [`close_stdin`](Commands::close_stdin) (gated on envd 0.5.2). For many small writes (an
//! agent's JSON-RPC messages) [`StdinWriter`] keeps one `StreamInput` stream open instead of
//! one `SendInput` request per write.
//!
//! ```no_run
//! use e2b_commands::{CommandEvent, CommandOptions, Commands, OutputCallback};
//! use e2b_envd_client::{EnvdConnection, EnvdEndpoint};
//! use futures::StreamExt as _;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let conn = EnvdConnection::new(EnvdEndpoint::new("http://127.0.0.1:49983").access_token("t"))?;
//! let commands = Commands::new(conn);
//!
//! // Foreground: a non-zero exit is data; `check()` makes it an error.
//! let out = commands.run("ls /; exit 2", CommandOptions::new()).await?;
//! assert_eq!(out.exit_code, 2);
//!
//! // Streaming: nothing is kept in memory; events come with back-pressure.
//! let mut handle = commands.start_streaming("yes | head -c 1000000000", CommandOptions::new()).await?;
//! let mut events = handle.take_events().expect("fed from the start");
//! let mut total = 0;
//! while let Some(ev) = events.next().await {
//!     match ev? {
//!         CommandEvent::Stdout(b) => total += b.len(),
//!         CommandEvent::Exit(status) => println!("exit {}", status.exit_code),
//!         _ => {}
//!     }
//! }
//! # let _ = total;
//! # Ok(()) }
//! ```
//!
//! Two clocks, both explicit: the **request timeout** bounds the wait for envd to start the
//! command (until its start event); the **command timeout** is the process's lifetime, sent as
//! `Connect-Timeout-Ms` on `Start` over every transport, after which envd kills it (60 s by
//! default for `run`/`start` as E2B, none for `start_streaming`, zero = none).

mod commands;
mod decode;
mod error;
mod handle;
mod options;
mod output;
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
