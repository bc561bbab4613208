//! Run commands in an E2B sandbox over envd's process API, with streaming output that the handle need not keep.
