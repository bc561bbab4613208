//! envd version parsing and feature gating with errors that say how to fix them.
