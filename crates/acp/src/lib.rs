//! Run ACP coding agents inside an E2B sandbox and drive them from the host.
