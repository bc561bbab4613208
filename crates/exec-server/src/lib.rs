//! An MCP server whose exec and file tools run in an E2B sandbox.
