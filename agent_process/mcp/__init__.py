"""MCP servers as tools (issue 7): a Tool or Extension with `spec.mcp` bridges a server's tools
into the registry as `<resource>__<tool>` (catalog source `mcp`)."""

from agent_process.mcp.bridge import McpBridge
from agent_process.mcp.config import McpStartError, ServerConfig
from agent_process.mcp.connection import Backoff, McpConnection

__all__ = ["Backoff", "McpBridge", "McpConnection", "McpStartError", "ServerConfig"]
