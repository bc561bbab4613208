//! Options, callbacks and small value types.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::error::CallbackError;

/// The command timeout `run` and `start` use when none is given (E2B's default).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a call waits for envd to answer (for a command: until the start event) when no
/// request timeout is given (E2B's default).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What a command runs.
///
/// A string runs through the shell like E2B does: `/bin/bash -l -c <cmd>`. Use
/// [`CommandLine::exec`] to run a program with arguments directly, with no shell.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandLine {
    /// `/bin/bash -l -c <script>`.
    Shell(String),
    /// A program and its arguments, run directly.
    Exec {
        /// The program (a path, or a name looked up in `PATH`).
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl CommandLine {
    /// `/bin/bash -l -c <script>`.
    pub fn shell(script: impl Into<String>) -> Self {
        Self::Shell(script.into())
    }

    /// `program args...`, with no shell.
    pub fn exec<I, S>(program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::Exec {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// The `cmd` and `args` envd receives.
    pub fn to_process(&self) -> (String, Vec<String>) {
        match self {
            Self::Shell(s) => (
                "/bin/bash".to_owned(),
                vec!["-l".to_owned(), "-c".to_owned(), s.clone()],
            ),
            Self::Exec { program, args } => (program.clone(), args.clone()),
        }
    }
}

impl From<&str> for CommandLine {
    fn from(s: &str) -> Self {
        Self::shell(s)
    }
}

impl From<String> for CommandLine {
    fn from(s: String) -> Self {
        Self::Shell(s)
    }
}

impl From<&String> for CommandLine {
    fn from(s: &String) -> Self {
        Self::Shell(s.clone())
    }
}

/// Which process to reattach to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessSelector {
    /// By process id.
    Pid(u32),
    /// By the tag given at start.
    Tag(String),
}

impl From<u32> for ProcessSelector {
    fn from(pid: u32) -> Self {
        Self::Pid(pid)
    }
}

impl From<&str> for ProcessSelector {
    fn from(tag: &str) -> Self {
        Self::Tag(tag.to_owned())
    }
}

impl From<String> for ProcessSelector {
    fn from(tag: String) -> Self {
        Self::Tag(tag)
    }
}

impl ProcessSelector {
    pub(crate) fn to_proto(&self) -> e2b_envd_proto::process::ProcessSelector {
        use e2b_envd_proto::process::process_selector::Selector;
        e2b_envd_proto::process::ProcessSelector {
            selector: Some(match self {
                Self::Pid(p) => Selector::Pid(*p),
                Self::Tag(t) => Selector::Tag(t.clone()),
            }),
        }
    }
}

impl fmt::Display for ProcessSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pid(p) => write!(f, "pid {p}"),
            Self::Tag(t) => write!(f, "tag {t:?}"),
        }
    }
}

/// A signal envd can send to a process (and, with our daemon, to its whole process group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// SIGTERM: ask the process to stop.
    Term,
    /// SIGKILL: stop it now.
    Kill,
}

impl Signal {
    pub(crate) fn to_proto(self) -> e2b_envd_proto::process::Signal {
        match self {
            Self::Term => e2b_envd_proto::process::Signal::Sigterm,
            Self::Kill => e2b_envd_proto::process::Signal::Sigkill,
        }
    }
}

/// The size of a pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtySize {
    /// Columns.
    pub cols: u32,
    /// Rows.
    pub rows: u32,
}

impl PtySize {
    /// `cols` × `rows`.
    pub fn new(cols: u32, rows: u32) -> Self {
        Self { cols, rows }
    }
}

/// What a callback may return: `()` or `Result<(), E>`. An error stops the reading of the output
/// and is returned by [`CommandHandle::wait`](crate::CommandHandle::wait).
pub trait IntoCallbackResult {
    /// Converts to the callback result.
    fn into_callback_result(self) -> Result<(), CallbackError>;
}

impl IntoCallbackResult for () {
    fn into_callback_result(self) -> Result<(), CallbackError> {
        Ok(())
    }
}

impl<E: Into<CallbackError>> IntoCallbackResult for Result<(), E> {
    fn into_callback_result(self) -> Result<(), CallbackError> {
        self.map_err(Into::into)
    }
}

type SyncBytes = Arc<Mutex<dyn FnMut(&[u8]) -> Result<(), CallbackError> + Send>>;
type SyncText = Arc<Mutex<dyn FnMut(&str) -> Result<(), CallbackError> + Send>>;
type AsyncBytes =
    Arc<Mutex<dyn FnMut(Bytes) -> BoxFuture<'static, Result<(), CallbackError>> + Send>>;
type AsyncText =
    Arc<Mutex<dyn FnMut(String) -> BoxFuture<'static, Result<(), CallbackError>> + Send>>;

#[derive(Clone)]
pub(crate) enum CallbackKind {
    Bytes(SyncBytes),
    Text(SyncText),
    BytesAsync(AsyncBytes),
    TextAsync(AsyncText),
}

/// A callback that receives one output stream, as bytes or as text, sync or async.
///
/// Callbacks are called one at a time, in order, from the task that reads the command's output;
/// the next chunk is not read until the callback returns (or its future completes), so a slow
/// callback slows the process down instead of losing output. Text callbacks get UTF-8 decoded
/// incrementally (a character split across chunks is never broken; invalid bytes become U+FFFD;
/// empty chunks are skipped). Bytes callbacks get the exact bytes.
///
/// ```
/// use e2b_commands::OutputCallback;
/// let print = OutputCallback::text(|s: &str| print!("{s}"));
/// let count = {
///     let mut n = 0usize;
///     OutputCallback::bytes(move |b: &[u8]| { n += b.len(); })
/// };
/// let forward = OutputCallback::bytes_async(|b: bytes::Bytes| async move {
///     // e.g. write to a socket; an Err stops reading and is returned by wait()
///     Ok::<(), std::io::Error>(())
/// });
/// # let _ = (print, count, forward);
/// ```
#[derive(Clone)]
pub struct OutputCallback(pub(crate) CallbackKind);

impl fmt::Debug for OutputCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.0 {
            CallbackKind::Bytes(_) => "bytes",
            CallbackKind::Text(_) => "text",
            CallbackKind::BytesAsync(_) => "bytes_async",
            CallbackKind::TextAsync(_) => "text_async",
        };
        f.debug_tuple("OutputCallback").field(&kind).finish()
    }
}

impl OutputCallback {
    /// A sync callback on the exact bytes.
    pub fn bytes<F, R>(mut f: F) -> Self
    where
        F: FnMut(&[u8]) -> R + Send + 'static,
        R: IntoCallbackResult,
    {
        Self(CallbackKind::Bytes(Arc::new(Mutex::new(
            move |b: &[u8]| f(b).into_callback_result(),
        ))))
    }

    /// A sync callback on the decoded text.
    pub fn text<F, R>(mut f: F) -> Self
    where
        F: FnMut(&str) -> R + Send + 'static,
        R: IntoCallbackResult,
    {
        Self(CallbackKind::Text(Arc::new(Mutex::new(move |s: &str| {
            f(s).into_callback_result()
        }))))
    }

    /// An async callback on the exact bytes; each future completes before the next chunk is read.
    pub fn bytes_async<F, Fut, R>(mut f: F) -> Self
    where
        F: FnMut(Bytes) -> Fut + Send + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoCallbackResult,
    {
        Self(CallbackKind::BytesAsync(Arc::new(Mutex::new(
            move |b: Bytes| -> BoxFuture<'static, Result<(), CallbackError>> {
                let fut = f(b);
                Box::pin(async move { fut.await.into_callback_result() })
            },
        ))))
    }

    /// An async callback on the decoded text; each future completes before the next chunk is read.
    pub fn text_async<F, Fut, R>(mut f: F) -> Self
    where
        F: FnMut(String) -> Fut + Send + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoCallbackResult,
    {
        Self(CallbackKind::TextAsync(Arc::new(Mutex::new(
            move |s: String| -> BoxFuture<'static, Result<(), CallbackError>> {
                let fut = f(s);
                Box::pin(async move { fut.await.into_callback_result() })
            },
        ))))
    }

    pub(crate) fn wants_text(&self) -> bool {
        matches!(self.0, CallbackKind::Text(_) | CallbackKind::TextAsync(_))
    }
}

/// Options of [`Commands::run`](crate::Commands::run), [`start`](crate::Commands::start) and
/// [`start_streaming`](crate::Commands::start_streaming).
///
/// Private fields and one by-value setter each (`docs/api-style.md`); a setting left unset
/// takes the method's default (each setter says which):
///
/// ```
/// use std::time::Duration;
/// use e2b_commands::{CommandOptions, OutputCallback};
///
/// let opts = CommandOptions::new()
///     .cwd("/tmp")
///     .env("RUST_LOG", "debug")
///     .timeout(Duration::from_secs(10))
///     .on_stdout(OutputCallback::text(|s: &str| print!("{s}")));
/// # let _ = opts;
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct CommandOptions {
    /// Working directory. `None` = the sandbox's default (the user's home, or the daemon's
    /// workdir). A directory that does not exist fails with [`CommandError::InvalidArgument`](crate::CommandError::InvalidArgument).
    pub(crate) cwd: Option<String>,
    /// Extra environment variables (added to envd's own).
    pub(crate) envs: HashMap<String, String>,
    /// The user to run as. `None` = the endpoint's user, else envd's default user.
    pub(crate) user: Option<String>,
    /// Whether the command gets a stdin pipe. Default: closed (`/dev/null`) for `run`/`start`,
    /// as E2B; open for `start_streaming`.
    pub(crate) stdin: Option<bool>,
    /// A tag to find the process by ([`Commands::connect`](crate::Commands::connect), `list`).
    pub(crate) tag: Option<String>,
    /// Run in a pseudo-terminal of this size. PTY output arrives as
    /// [`CommandEvent::Pty`](crate::CommandEvent::Pty) and goes to `on_stdout` and the retained stdout.
    pub(crate) pty: Option<PtySize>,
    /// How long to wait for envd to start the command (until the start event).
    /// Default [`DEFAULT_REQUEST_TIMEOUT`]; zero = no limit.
    pub(crate) request_timeout: Option<Duration>,
    /// The command timeout: the process's lifetime, after which envd kills it (sent as
    /// `Connect-Timeout-Ms`). Default [`DEFAULT_COMMAND_TIMEOUT`] for `run` and `start`, none for
    /// `start_streaming`; `Some(Duration::ZERO)` = none.
    pub(crate) timeout: Option<Duration>,
    /// Whether the handle keeps the output. Default `true` for `run`/`start`, `false` for
    /// `start_streaming`. With `false` no output byte is kept; only callbacks and the event
    /// stream see it. The exit status is kept either way.
    pub(crate) retain_output: Option<bool>,
    /// Called with each stdout (or PTY) chunk.
    pub(crate) on_stdout: Option<OutputCallback>,
    /// Called with each stderr chunk.
    pub(crate) on_stderr: Option<OutputCallback>,
    /// Whether the handle's event stream ([`CommandHandle::take_events`](crate::CommandHandle::take_events))
    /// receives every event from the start. Default: on when nothing else would see the output
    /// (no retention and no callbacks), else off; a stream taken later sees events from then on.
    /// While on and unread, the stream applies back-pressure.
    pub(crate) events: Option<bool>,
    /// Make [`Commands::run`](crate::Commands::run) fail with
    /// [`CommandError::Exit`](crate::CommandError::Exit) on a non-zero exit (default: exit status is data).
    pub(crate) check: bool,
    /// Ask envd for keepalive events this often on the output stream. Default 50 s (E2B's).
    pub(crate) keepalive: Option<Duration>,
}

impl fmt::Debug for CommandOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandOptions")
            .field("cwd", &self.cwd)
            .field("envs", &self.envs.keys().collect::<Vec<_>>())
            .field("user", &self.user)
            .field("stdin", &self.stdin)
            .field("tag", &self.tag)
            .field("pty", &self.pty)
            .field("request_timeout", &self.request_timeout)
            .field("timeout", &self.timeout)
            .field("retain_output", &self.retain_output)
            .field("on_stdout", &self.on_stdout)
            .field("on_stderr", &self.on_stderr)
            .field("events", &self.events)
            .field("check", &self.check)
            .field("keepalive", &self.keepalive)
            .finish()
    }
}

impl CommandOptions {
    /// Default options: every setting takes the method's default (each setter says which).
    pub fn new() -> Self {
        Self::default()
    }
    /// The working directory. Default: the sandbox's (the user's home, or the daemon's workdir).
    /// A directory that does not exist fails with
    /// [`CommandError::InvalidArgument`](crate::CommandError::InvalidArgument).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
    /// Adds one environment variable (on top of envd's own).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.insert(key.into(), value.into());
        self
    }
    /// Adds environment variables (on top of envd's own).
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.envs
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }
    /// The user to run as. Default: the endpoint's user, else envd's default user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }
    /// Opens (`true`) or closes (`false`, `/dev/null`) the command's stdin. Default: closed for
    /// `run`/`start`, as E2B; open for `start_streaming`.
    pub fn stdin(mut self, open: bool) -> Self {
        self.stdin = Some(open);
        self
    }
    /// A tag to find the process by ([`Commands::connect`](crate::Commands::connect),
    /// [`Commands::list`](crate::Commands::list)).
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }
    /// Runs in a pseudo-terminal of this size. PTY output arrives as
    /// [`CommandEvent::Pty`](crate::CommandEvent::Pty) and goes to `on_stdout` and the retained
    /// stdout.
    pub fn pty(mut self, size: PtySize) -> Self {
        self.pty = Some(size);
        self
    }
    /// How long to wait for envd to start the command (until the start event). Default
    /// [`DEFAULT_REQUEST_TIMEOUT`]; zero = no limit.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = Some(t);
        self
    }
    /// The command timeout: the process's lifetime, after which envd kills it (sent as
    /// `Connect-Timeout-Ms`). Default [`DEFAULT_COMMAND_TIMEOUT`] for `run` and `start`, none for
    /// `start_streaming`; zero = none (see [`no_timeout`](Self::no_timeout)).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
    /// No command timeout: the process may run forever.
    pub fn no_timeout(self) -> Self {
        self.timeout(Duration::ZERO)
    }
    /// Keeps (`true`) or discards (`false`) output in the handle. Default `true` for
    /// `run`/`start`, `false` for `start_streaming`. With `false` no output byte is kept; only
    /// callbacks and the event stream see it. The exit status is kept either way.
    pub fn retain_output(mut self, retain: bool) -> Self {
        self.retain_output = Some(retain);
        self
    }
    /// Called with each stdout (or PTY) chunk.
    pub fn on_stdout(mut self, cb: OutputCallback) -> Self {
        self.on_stdout = Some(cb);
        self
    }
    /// Called with each stderr chunk.
    pub fn on_stderr(mut self, cb: OutputCallback) -> Self {
        self.on_stderr = Some(cb);
        self
    }
    /// Whether the handle's event stream ([`CommandHandle::take_events`](crate::CommandHandle::take_events))
    /// receives every event from the start (`true`) or only once taken (`false`). Default: on
    /// when nothing else would see the output (no retention and no callbacks), else off. While
    /// on and unread, the stream applies back-pressure.
    pub fn events(mut self, on: bool) -> Self {
        self.events = Some(on);
        self
    }
    /// Makes [`Commands::run`](crate::Commands::run) fail with
    /// [`CommandError::Exit`](crate::CommandError::Exit) on a non-zero exit. Default `false`: the
    /// exit status is data.
    pub fn check(mut self, check: bool) -> Self {
        self.check = check;
        self
    }
    /// Asks envd for keepalive events this often on the output stream. Default 50 s (E2B's).
    pub fn keepalive(mut self, every: Duration) -> Self {
        self.keepalive = Some(every);
        self
    }
}

/// Options of [`Commands::connect`](crate::Commands::connect).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// How long to wait for envd to answer. Default [`DEFAULT_REQUEST_TIMEOUT`]; zero = none.
    pub(crate) request_timeout: Option<Duration>,
    /// Stop following the process after this long; the handle's `wait()` then fails with
    /// [`CommandError::DeadlineExceeded`](crate::CommandError::DeadlineExceeded), but the process
    /// is **not** killed (envd's lifetime applies only to `Start`). Default none.
    pub(crate) timeout: Option<Duration>,
    /// Whether the handle keeps output from now on. Default `true`.
    pub(crate) retain_output: Option<bool>,
    /// Called with each stdout (or PTY) chunk.
    pub(crate) on_stdout: Option<OutputCallback>,
    /// Called with each stderr chunk.
    pub(crate) on_stderr: Option<OutputCallback>,
    /// See [`CommandOptions::events`].
    pub(crate) events: Option<bool>,
    /// Keepalive interval asked of envd. Default 50 s.
    pub(crate) keepalive: Option<Duration>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("request_timeout", &self.request_timeout)
            .field("timeout", &self.timeout)
            .field("retain_output", &self.retain_output)
            .field("on_stdout", &self.on_stdout)
            .field("on_stderr", &self.on_stderr)
            .field("events", &self.events)
            .field("keepalive", &self.keepalive)
            .finish()
    }
}

impl ConnectOptions {
    /// Default options: every setting takes its default (each setter says which).
    pub fn new() -> Self {
        Self::default()
    }
    /// How long to wait for envd to answer. Default [`DEFAULT_REQUEST_TIMEOUT`]; zero = none.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = Some(t);
        self
    }
    /// Stops following the process after `t`; the handle's `wait()` then fails with
    /// [`CommandError::DeadlineExceeded`](crate::CommandError::DeadlineExceeded), but the process
    /// is **not** killed (envd's lifetime applies only to `Start`). Default: no limit.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
    /// Keeps (`true`) or discards (`false`) output in the handle from now on. Default `true`.
    pub fn retain_output(mut self, retain: bool) -> Self {
        self.retain_output = Some(retain);
        self
    }
    /// Called with each stdout (or PTY) chunk.
    pub fn on_stdout(mut self, cb: OutputCallback) -> Self {
        self.on_stdout = Some(cb);
        self
    }
    /// Called with each stderr chunk.
    pub fn on_stderr(mut self, cb: OutputCallback) -> Self {
        self.on_stderr = Some(cb);
        self
    }
    /// Feeds the event stream from the start; see [`CommandOptions::events`].
    pub fn events(mut self, on: bool) -> Self {
        self.events = Some(on);
        self
    }
    /// Asks envd for keepalive events this often. Default 50 s.
    pub fn keepalive(mut self, every: Duration) -> Self {
        self.keepalive = Some(every);
        self
    }
}

/// A running process, as [`Commands::list`](crate::Commands::list) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Tag given at start.
    pub tag: Option<String>,
    /// The program (`/bin/bash` for shell commands).
    pub cmd: String,
    /// Its arguments (`["-l", "-c", "<cmd>"]` for shell commands).
    pub args: Vec<String>,
    /// Environment variables given at start.
    pub envs: HashMap<String, String>,
    /// Working directory given at start.
    pub cwd: Option<String>,
}
