//! The e2b command: run the local envd, run commands, bridge ACP agents and serve MCP exec tools.
