//! A typed client for E2B's control-plane API (the "E2B API", `openapi/e2b.yml`).
//!
//! [`models`] holds the sandbox schemas of the spec as serde types, usable on both sides of the
//! wire (the client here, and a server such as `e2b serve`).

pub mod models;
