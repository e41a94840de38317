"""MCP servers as tools (issue 7): a Tool or Extension with `spec.mcp` bridges a server's tools
into the registry as `<resource>__<tool>` (catalog source `mcp`).

Importing this package is cheap; the `mcp` SDK is imported by `connection`/`tools`/`streams`,
which the bridge loads only when a server is declared.
"""

from agent_process.mcp.bridge import McpBridge
from agent_process.mcp.config import McpStartError, ServerConfig

__all__ = ["McpBridge", "McpStartError", "ServerConfig"]
