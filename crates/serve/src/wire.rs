//! The JSON bodies of E2B's sandbox API: the model types `e2b-api` generates from
//! `openapi/e2b.yml`, so the server and the client share one definition of the wire.

pub(crate) use e2b_api::models::{
    ConnectSandbox, Error as ApiError, ListedSandbox, LogLevel, NewSandbox, ResumedSandbox,
    Sandbox, SandboxDetail, SandboxLifecycle, SandboxLog, SandboxLogEntry, SandboxLogs,
    SandboxLogsV2Response, SandboxMetric, SandboxNetworkConfig, SandboxOnTimeout,
    SandboxPauseRequest, SandboxState, SandboxTimeoutRequest, SandboxesWithMetrics,
};

/// A count in the spec's `int32` fields (`cpuCount`, `memoryMB`, `diskSizeMB`), saturated.
pub(crate) fn int32(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A byte count in the spec's `int64` fields, saturated.
pub(crate) fn int64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
