#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

/// Declares the module of one proto package: the prost messages and tonic services generated
/// into `OUT_DIR/<package>.rs` and their proto3-JSON serde (`<package>.serde.rs`), with the
/// lints generated code cannot meet allowed.
macro_rules! proto_package {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[allow(
            missing_docs,
            unreachable_pub,
            clippy::all,
            clippy::unwrap_used,
            clippy::expect_used
        )]
        pub mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".rs"));
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".serde.rs"));
        }
    };
}

proto_package!(
    /// `package process`: envd's Process service and its messages.
    process
);
proto_package!(
    /// `package filesystem`: envd's Filesystem service and its messages.
    filesystem
);

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
