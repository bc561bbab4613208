//! Results: exit status, command output, events.

use bytes::Bytes;
use e2b_envd_proto::process::process_event::EndEvent;

use crate::error::{CommandError, CommandExitError};

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExitStatus {
    /// The exit code; `-1` when a signal ended the process (Go's convention, as envd reports it).
    pub exit_code: i32,
    /// The signal that ended the process, if one did (parsed from envd's status text).
    pub signal: Option<i32>,
    /// Whether the process exited normally (rather than by a signal).
    pub exited: bool,
    /// envd's status text: `exit status 0`, `signal: killed`, ...
    pub status: String,
    /// envd's error text, set for any unsuccessful end.
    pub error: Option<String>,
}

impl ExitStatus {
    /// Exit code 0 and no signal.
    pub fn success(&self) -> bool {
        self.exit_code == 0 && self.signal.is_none()
    }

    /// The shell convention: the exit code, or `128 + signal`.
    pub fn code_or_128_plus_signal(&self) -> i32 {
        match self.signal {
            Some(s) => 128 + s,
            None => self.exit_code,
        }
    }

    pub(crate) fn from_end(end: EndEvent) -> Self {
        let signal = if end.exited {
            None
        } else {
            parse_signal(&end.status)
        };
        Self {
            exit_code: end.exit_code,
            signal,
            exited: end.exited,
            status: end.status,
            error: end.error.filter(|e| !e.is_empty()),
        }
    }
}

/// Go's `syscall.Signal.String()` text back to the number.
pub(crate) fn parse_signal(status: &str) -> Option<i32> {
    let rest = status.strip_prefix("signal: ")?;
    let name = rest.strip_suffix(" (core dumped)").unwrap_or(rest);
    Some(match name {
        "hangup" => 1,
        "interrupt" => 2,
        "quit" => 3,
        "illegal instruction" => 4,
        "trace/breakpoint trap" => 5,
        "aborted" => 6,
        "bus error" => 7,
        "floating point exception" => 8,
        "killed" => 9,
        "user defined signal 1" => 10,
        "segmentation fault" => 11,
        "user defined signal 2" => 12,
        "broken pipe" => 13,
        "alarm clock" => 14,
        "terminated" => 15,
        other => other
            .strip_prefix("signal ")
            .and_then(|n| n.trim().parse().ok())?,
    })
}

/// The result of a command: its output (when retained) and how it ended. A non-zero exit is data
/// here; call [`check`](Self::check) to turn it into an error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandOutput {
    /// Standard output (or PTY output) as text, decoded incrementally (invalid bytes → U+FFFD).
    /// Empty when output was not retained.
    pub stdout: String,
    /// Standard error as text. Empty when output was not retained.
    pub stderr: String,
    /// The exact stdout bytes. Empty when output was not retained.
    pub stdout_bytes: Bytes,
    /// The exact stderr bytes. Empty when output was not retained.
    pub stderr_bytes: Bytes,
    /// The exit code (`-1` when a signal ended the process).
    pub exit_code: i32,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
    /// envd's error text (`exit status 1`, `signal: killed`), set for any unsuccessful end.
    pub error: Option<String>,
    /// The full exit status.
    pub status: ExitStatus,
}

impl CommandOutput {
    pub(crate) fn new(status: ExitStatus, stdout: Bytes, stderr: Bytes) -> Self {
        Self {
            stdout: crate::decode::decode_buffer(&stdout, true),
            stderr: crate::decode::decode_buffer(&stderr, true),
            stdout_bytes: stdout,
            stderr_bytes: stderr,
            exit_code: status.exit_code,
            signal: status.signal,
            error: status.error.clone(),
            status,
        }
    }

    /// Exit code 0 and no signal.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `Ok(self)` on success, else [`CommandError::Exit`] carrying the exit code, output and
    /// error text.
    pub fn check(self) -> Result<Self, CommandError> {
        if self.success() {
            Ok(self)
        } else {
            Err(CommandError::Exit(CommandExitError::new(
                self.exit_code,
                self.signal,
                self.stdout,
                self.stderr,
                self.error,
            )))
        }
    }
}

/// One event of a command, in arrival order, from
/// [`CommandHandle::take_events`](crate::CommandHandle::take_events).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandEvent {
    /// A chunk of standard output (exact bytes; chunk boundaries are arbitrary).
    Stdout(Bytes),
    /// A chunk of standard error.
    Stderr(Bytes),
    /// A chunk of PTY output.
    Pty(Bytes),
    /// The process ended. Always the last event of a stream that ended normally.
    Exit(ExitStatus),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse() {
        assert_eq!(parse_signal("signal: killed"), Some(9));
        assert_eq!(parse_signal("signal: terminated"), Some(15));
        assert_eq!(
            parse_signal("signal: segmentation fault (core dumped)"),
            Some(11)
        );
        assert_eq!(parse_signal("signal: signal 40"), Some(40));
        assert_eq!(parse_signal("exit status 1"), None);
    }

    #[test]
    fn check_turns_failure_into_exit_error() {
        let st = ExitStatus {
            exit_code: 3,
            signal: None,
            exited: true,
            status: "exit status 3".into(),
            error: Some("exit status 3".into()),
        };
        let out = CommandOutput::new(st, Bytes::from_static(b"o"), Bytes::from_static(b"e"));
        assert!(!out.success());
        match out.check() {
            Err(CommandError::Exit(e)) => {
                assert_eq!(e.exit_code, 3);
                assert_eq!(e.stdout, "o");
                assert_eq!(e.stderr, "e");
                assert_eq!(e.error.as_deref(), Some("exit status 3"));
            }
            other => panic!("{other:?}"),
        }
    }
}
