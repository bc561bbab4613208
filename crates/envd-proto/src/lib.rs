#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

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
