//! The one error type of this crate.

use std::time::Duration;

/// Which way a message was travelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Direction {
    /// From the agent's stdout to the client.
    FromAgent,
    /// From the client to the agent's stdin.
    ToAgent,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Direction::FromAgent => f.write_str("from the agent"),
            Direction::ToAgent => f.write_str("to the agent"),
        }
    }
}

/// Everything that can go wrong while running an ACP agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcpError {
    /// An option given to the transport is out of range.
    #[error("invalid ACP option: {reason}")]
    InvalidOptions {
        /// What is wrong and what the allowed values are.
        reason: String,
    },

    /// A message is larger than the per-message limit (`AcpOptions::max_message_bytes`).
    ///
    /// For messages from the agent the agent is stopped: the stream cannot be resynchronised.
    /// For messages to the agent nothing was sent.
    #[error(
        "ACP message {direction} exceeds the limit of {limit} bytes{}; raise AcpOptions::max_message_bytes if the agent legitimately sends messages this large",
        size.map(|s| format!(" (at least {s} bytes)")).unwrap_or_default()
    )]
    MessageTooLarge {
        /// Which way the message was going.
        direction: Direction,
        /// The configured limit in bytes (line bytes without the line ending).
        limit: usize,
        /// How many bytes were seen when the limit was passed, if known.
        size: Option<usize>,
    },

    /// An outgoing message is not a single JSON-RPC line.
    #[error(
        "invalid outgoing ACP message: {reason}; send one JSON object per call, without embedded newlines"
    )]
    InvalidMessage {
        /// What is wrong with it.
        reason: String,
    },

    /// The agent process could not be started.
    #[error(
        "could not start the ACP agent `{command}`: {reason}; check that the command exists in the sandbox and is executable"
    )]
    Spawn {
        /// The command line that was run.
        command: String,
        /// Why it failed.
        reason: String,
    },

    /// The transport was stopped or killed, or the agent closed its stdin; nothing more can be sent.
    #[error("the ACP agent transport is closed ({reason}); start a new agent to continue")]
    Closed {
        /// Why it is closed.
        reason: String,
    },

    /// Writing to, closing or signalling the agent process failed.
    #[error("ACP agent process I/O failed while {action}: {reason}")]
    Process {
        /// What was being done (for example "writing to stdin").
        action: &'static str,
        /// The underlying error.
        reason: String,
    },

    /// The agent exited with a failure that this crate did not cause.
    #[error("the ACP agent exited with {}{}{}", describe_exit(*code, *signal), if stderr_tail.is_empty() { "" } else { "; last stderr:\n" }, stderr_tail)]
    AgentFailed {
        /// Exit code, when it exited normally.
        code: Option<i32>,
        /// Signal number, when it was killed by a signal.
        signal: Option<i32>,
        /// The last bytes the agent wrote to stderr (lossy UTF-8), for diagnosis.
        stderr_tail: String,
    },

    /// `stop()` could not confirm that the agent exited within its timeout (it was sent a kill).
    #[error(
        "the ACP agent did not exit within {timeout:?} of stop(); it was killed but its exit was not observed; call kill() and wait() again, or check the sandbox"
    )]
    StopTimeout {
        /// The timeout passed to `stop`.
        timeout: Duration,
    },

    /// The sandbox's envd is too old for an operation.
    #[error(
        "{feature} needs envd {required} or newer, but the sandbox runs envd {actual}; rebuild the sandbox template on a newer envd"
    )]
    Unsupported {
        /// The feature, for example "closing a command's stdin".
        feature: &'static str,
        /// The minimum version.
        required: String,
        /// The sandbox's version.
        actual: String,
    },

    /// The ACP protocol layer (the `agent-client-protocol` crate) reported an error.
    #[error("ACP protocol error: {0}")]
    Protocol(#[from] agent_client_protocol::Error),

    /// The sandbox (envd, the commands API) reported an error.
    #[error("sandbox error while {action}: {source}")]
    Sandbox {
        /// What was being done.
        action: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

fn describe_exit(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (_, Some(s)) => format!("signal {s}"),
        (Some(c), None) => format!("exit code {c}"),
        (None, None) => "an unknown status".to_owned(),
    }
}

impl AcpError {
    /// True for [`AcpError::MessageTooLarge`].
    pub fn is_message_too_large(&self) -> bool {
        matches!(self, AcpError::MessageTooLarge { .. })
    }

    pub(crate) fn closed(reason: impl Into<String>) -> Self {
        AcpError::Closed {
            reason: reason.into(),
        }
    }

    pub(crate) fn process(action: &'static str, err: impl std::fmt::Display) -> Self {
        AcpError::Process {
            action,
            reason: err.to_string(),
        }
    }

    /// A copy for fan-out to several waiters (the error is not `Clone` because of boxed sources).
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            AcpError::InvalidOptions { reason } => AcpError::InvalidOptions {
                reason: reason.clone(),
            },
            AcpError::MessageTooLarge {
                direction,
                limit,
                size,
            } => AcpError::MessageTooLarge {
                direction: *direction,
                limit: *limit,
                size: *size,
            },
            AcpError::InvalidMessage { reason } => AcpError::InvalidMessage {
                reason: reason.clone(),
            },
            AcpError::Spawn { command, reason } => AcpError::Spawn {
                command: command.clone(),
                reason: reason.clone(),
            },
            AcpError::Closed { reason } => AcpError::Closed {
                reason: reason.clone(),
            },
            AcpError::Process { action, reason } => AcpError::Process {
                action,
                reason: reason.clone(),
            },
            AcpError::AgentFailed {
                code,
                signal,
                stderr_tail,
            } => AcpError::AgentFailed {
                code: *code,
                signal: *signal,
                stderr_tail: stderr_tail.clone(),
            },
            AcpError::StopTimeout { timeout } => AcpError::StopTimeout { timeout: *timeout },
            AcpError::Unsupported {
                feature,
                required,
                actual,
            } => AcpError::Unsupported {
                feature,
                required: required.clone(),
                actual: actual.clone(),
            },
            AcpError::Protocol(e) => AcpError::Protocol(e.clone()),
            AcpError::Sandbox { action, source } => AcpError::Process {
                action,
                reason: source.to_string(),
            },
        }
    }
}
