//! envd's wire contract for Rust: the `process` and `filesystem` packages as prost messages,
//! tonic clients and servers, and proto3-JSON serde (pbjson) for the Connect protocol.
//!
//! The proto files in `proto/` keep envd's packages, names and field numbers, so every type here
//! encodes exactly as envd's own does, in binary protobuf and in canonical proto3 JSON
//! (camelCase out, both name styles in, enum names, int64 as strings, base64 bytes, RFC 3339
//! timestamps, unknown fields ignored).
//!
//! ```
//! use e2b_envd_proto::process::{ProcessConfig, StartRequest};
//!
//! let req = StartRequest {
//!     process: Some(ProcessConfig {
//!         cmd: "/bin/bash".into(),
//!         args: vec!["-l".into(), "-c".into(), "echo hi".into()],
//!         ..Default::default()
//!     }),
//!     stdin: Some(false),
//!     ..Default::default()
//! };
//! let json = serde_json::to_string(&req).unwrap();
//! assert_eq!(json, r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}"#);
//! ```

/// `package process`: envd's Process service and its messages.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod process {
    include!(concat!(env!("OUT_DIR"), "/process.rs"));
    include!(concat!(env!("OUT_DIR"), "/process.serde.rs"));
}

/// `package filesystem`: envd's Filesystem service and its messages.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod filesystem {
    include!(concat!(env!("OUT_DIR"), "/filesystem.rs"));
    include!(concat!(env!("OUT_DIR"), "/filesystem.serde.rs"));
}

/// Well-known protobuf types as used by envd (`google.protobuf.Timestamp`), with proto3-JSON serde.
pub use pbjson_types;

/// The encoded `FileDescriptorSet` of both packages, for reflection or dynamic clients.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envd_descriptor.bin"));

pub mod wire;

/// Fully qualified gRPC/Connect service names, as they appear in request paths.
pub mod service_names {
    /// `process.Process`
    pub const PROCESS: &str = "process.Process";
    /// `filesystem.Filesystem`
    pub const FILESYSTEM: &str = "filesystem.Filesystem";
}
