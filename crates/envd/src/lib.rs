//! A local envd-compatible daemon: envd's process and filesystem services over gRPC, gRPC-Web and Connect on one port.
