"""MCP tools <-> registry entries: names, schemas, and call results as tool data.

A server's tool `search.web` on the Tool `kb` becomes `kb__search_web`: characters outside
`[A-Za-z0-9_-]` become `_`, runs of `_` that would form the `__` separator collapse, and a name
that still breaks the rules (or the 64-character limit, or clashes after sanitising) is skipped
with a logged warning naming it. Results: `isError` -> `E_TOOL_MCP` with the server's text;
otherwise `structuredContent` when present, else the content blocks as text.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import mcp.types as mt
import structlog

from agent_process.mcp.config import ServerConfig
from agent_process.registry import (
    MAX_TOOL_NAME,
    NAME_PART,
    SEPARATOR,
    SourceKind,
    ToolEntry,
    ToolOrigin,
)
from agent_process.schema import ArgsValidator, SchemaInvalid
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode

_log = structlog.get_logger("goondan.mcp")

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_UNDERSCORES = re.compile(r"_{2,}")

Caller = Callable[[str, dict[str, Any]], Awaitable[mt.CallToolResult]]
"""`(mcp tool name, arguments) -> result`: the live connection's `call`."""


def export_name(mcp_name: str) -> str | None:
    """The export part of the model-facing name, or None when no valid name can be made."""
    name = _UNDERSCORES.sub("_", _UNSAFE.sub("_", mcp_name)).strip("_")
    return name if NAME_PART.match(name) and SEPARATOR not in name else None


def build_entries(cfg: ServerConfig, listed: Iterable[mt.Tool], call: Caller) -> list[ToolEntry]:
    """Entries for the listed tools the allow-list keeps; bad names/schemas skipped, logged."""
    origin = ToolOrigin(SourceKind.MCP, cfg.owner, cfg.where)
    by_name = {tool.name: tool for tool in listed}
    wanted = [by_name[n] for n in cfg.exports if n in by_name] if cfg.exports else by_name.values()
    missing = sorted(set(cfg.exports) - set(by_name))
    if missing:
        _log.warning(
            "mcp_exports_not_offered",
            server=cfg.describe(),
            missing=missing,
            offered=sorted(by_name),
        )
    entries: dict[str, ToolEntry] = {}
    for tool in wanted:
        entry = _entry(cfg, origin, tool, call)
        if entry is None:
            continue
        if entry.name in entries:
            _skip(cfg, tool.name, f"its sanitised name {entry.name!r} clashes with another tool")
            continue
        entries[entry.name] = entry
    return list(entries.values())


def _entry(cfg: ServerConfig, origin: ToolOrigin, tool: mt.Tool, call: Caller) -> ToolEntry | None:
    part = export_name(tool.name)
    if part is None:
        _skip(cfg, tool.name, "no valid tool name can be made of it")
        return None
    name = f"{cfg.owner}{SEPARATOR}{part}"
    if len(name) > MAX_TOOL_NAME:
        _skip(cfg, tool.name, f"{name!r} is over {MAX_TOOL_NAME} characters")
        return None
    schema = dict(tool.input_schema) if tool.input_schema else {"type": "object"}
    try:
        validator = ArgsValidator(name, schema)
    except SchemaInvalid as exc:
        _skip(cfg, tool.name, f"its inputSchema is invalid: {exc}")
        return None
    export = cfg.exports.get(tool.name)
    return ToolEntry(
        name=name,
        handler=_handler(tool.name, call),
        is_async=True,
        origin=origin,
        description=(export.description if export else "") or tool.description or tool.title or "",
        parameters=schema,
        timeout_ms=(export.timeout_ms if export else None) or cfg.timeout_ms,
        error_message_limit=cfg.error_message_limit,
        validator=validator,
    )


def _skip(cfg: ServerConfig, tool: str, why: str) -> None:
    _log.warning("mcp_tool_skipped", server=cfg.describe(), tool=tool, reason=why)


def _handler(mcp_name: str, call: Caller) -> Callable[[Any, dict[str, Any]], Awaitable[Any]]:
    async def handler(ctx: Any, args: dict[str, Any]) -> Any:
        return output_of(await call(mcp_name, dict(args)))

    return handler


def output_of(result: mt.CallToolResult) -> Any:
    """The tool output the model sees; `isError` raises ToolFailed(E_TOOL_MCP, server's text)."""
    if result.is_error:
        text = content_text(result.content)
        raise ToolFailed(
            text or "the MCP tool reported an error without a message",
            code=ErrorCode.E_TOOL_MCP,
            suggestion="read the server's message; fix the arguments or try another approach",
        )
    if result.structured_content is not None:
        return result.structured_content
    return content_text(result.content)


def content_text(blocks: Iterable[mt.ContentBlock]) -> str:
    """Text blocks joined by newlines; other blocks as a short bracketed note (no base64)."""
    return "\n".join(_block_text(block) for block in blocks)


def _block_text(block: mt.ContentBlock) -> str:
    match block:
        case mt.TextContent():
            return block.text
        case mt.ImageContent() | mt.AudioContent():
            return f"[{block.type} {block.mime_type}, {len(block.data)} base64 characters omitted]"
        case mt.EmbeddedResource():
            inner = block.resource
            if isinstance(inner, mt.TextResourceContents):
                return inner.text
            return f"[binary resource {inner.uri}]"
        case mt.ResourceLink():
            return f"[resource link {block.uri}]"
