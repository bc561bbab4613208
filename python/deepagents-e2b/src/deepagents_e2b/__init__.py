"""A DeepAgents `BaseSandbox` backend over the e2b exec-server (MCP)."""

from deepagents_e2b.sandbox import E2BExecSandbox, ExecServerError

__all__ = ["E2BExecSandbox", "ExecServerError"]
__version__ = "0.1.0"
