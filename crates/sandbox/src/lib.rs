//! Sandboxes for AI agents: a local embedded envd or any remote envd, with commands and files.
