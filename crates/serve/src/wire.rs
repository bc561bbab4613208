//! The JSON bodies of E2B's sandbox API (`openapi/e2b.yml`), as `e2b serve` reads and writes
//! them. Field names are the wire names of the spec (`templateID`, `allow_internet_access`, ...).
//!
//! This module is the one place the serve crate spells the wire; it is meant to be replaced by
//! the model types of `e2b-api` generated from the same document.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// `NewSandbox`: the body of `POST /sandboxes`. Unknown fields are ignored, as in E2B's API.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewSandbox {
    #[serde(rename = "templateID")]
    pub(crate) template_id: String,
    pub(crate) timeout: Option<i64>,
    pub(crate) auto_pause: Option<bool>,
    pub(crate) secure: Option<bool>,
    #[serde(rename = "allow_internet_access")]
    pub(crate) allow_internet_access: Option<bool>,
    pub(crate) metadata: Option<HashMap<String, String>>,
    pub(crate) env_vars: Option<HashMap<String, String>>,
}

/// `SandboxTimeoutRequest` and `ConnectSandbox`: `{"timeout": seconds}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TimeoutBody {
    pub(crate) timeout: i64,
}

/// `ResumedSandbox` (deprecated `POST /sandboxes/{id}/resume`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumedSandbox {
    pub(crate) timeout: Option<i64>,
}

/// `Sandbox`: what create and connect answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Sandbox {
    #[serde(rename = "templateID")]
    pub(crate) template_id: String,
    #[serde(rename = "sandboxID")]
    pub(crate) sandbox_id: String,
    #[serde(rename = "clientID")]
    pub(crate) client_id: String,
    pub(crate) alias: String,
    pub(crate) envd_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) envd_access_token: Option<String>,
    pub(crate) traffic_access_token: Option<String>,
    pub(crate) domain: Option<String>,
}

/// `SandboxDetail`: `GET /sandboxes/{id}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxDetail {
    #[serde(rename = "templateID")]
    pub(crate) template_id: String,
    #[serde(rename = "sandboxID")]
    pub(crate) sandbox_id: String,
    #[serde(rename = "clientID")]
    pub(crate) client_id: String,
    pub(crate) alias: String,
    pub(crate) started_at: String,
    pub(crate) end_at: String,
    pub(crate) cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub(crate) memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    pub(crate) disk_size_mb: u64,
    pub(crate) state: &'static str,
    pub(crate) envd_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) envd_access_token: Option<String>,
    pub(crate) allow_internet_access: Option<bool>,
    pub(crate) domain: Option<String>,
    pub(crate) metadata: HashMap<String, String>,
    pub(crate) lifecycle: Lifecycle,
}

/// `SandboxLifecycle` in `SandboxDetail`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Lifecycle {
    pub(crate) auto_resume: bool,
    pub(crate) on_timeout: &'static str,
}

/// `ListedSandbox`: one item of `GET /v2/sandboxes`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedSandbox {
    #[serde(rename = "templateID")]
    pub(crate) template_id: String,
    #[serde(rename = "sandboxID")]
    pub(crate) sandbox_id: String,
    #[serde(rename = "clientID")]
    pub(crate) client_id: String,
    pub(crate) alias: String,
    pub(crate) started_at: String,
    pub(crate) end_at: String,
    pub(crate) cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub(crate) memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    pub(crate) disk_size_mb: u64,
    pub(crate) state: &'static str,
    pub(crate) envd_version: String,
    pub(crate) metadata: HashMap<String, String>,
}

/// `SandboxMetric`: one resource sample.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxMetric {
    pub(crate) timestamp: String,
    pub(crate) timestamp_unix: i64,
    pub(crate) cpu_count: u32,
    pub(crate) cpu_used_pct: f64,
    pub(crate) mem_used: u64,
    pub(crate) mem_total: u64,
    pub(crate) mem_cache: u64,
    pub(crate) disk_used: u64,
    pub(crate) disk_total: u64,
}

/// `SandboxLogEntry`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SandboxLogEntry {
    pub(crate) timestamp: String,
    pub(crate) level: &'static str,
    pub(crate) message: String,
    pub(crate) fields: HashMap<String, String>,
}

/// `SandboxLog` (v1 logs): a timestamp and a JSON line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SandboxLog {
    pub(crate) timestamp: String,
    pub(crate) line: String,
}

/// `Error`: every error body. `code` equals the HTTP status.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    pub(crate) message: String,
}
