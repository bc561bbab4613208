//! Read, write, list and watch files in an E2B sandbox over envd's filesystem API and /files.
