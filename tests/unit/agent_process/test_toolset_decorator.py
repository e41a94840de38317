"""bundles.toolset: schemas from type hints and docstrings; handlers that convert arguments."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import msgspec
import pytest

from bundles.toolset import Toolset, parse_docstring


class Range(msgspec.Struct):
    start: int
    end: int


def test_schema_comes_from_hints_defaults_docstrings_and_meta() -> None:
    toolset = Toolset("demo")

    @toolset.tool
    async def search(
        ctx: Any,
        query: str,
        mode: Literal["fast", "full"] = "fast",
        limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10,
        within: Range | None = None,
    ) -> list[str]:
        """Search the workspace.

        Longer text stays in the description.

        Args:
            query: What to look for.
            mode: How hard to look.
        """
        return []

    tool = toolset.tools["search"]
    assert tool.is_async and tool.name == "search"
    assert tool.description == "Search the workspace.\n\nLonger text stays in the description."
    props = tool.parameters["properties"]
    assert tool.parameters["required"] == ["query"]
    assert tool.parameters["additionalProperties"] is False
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["mode"]["enum"] == ["fast", "full"] and props["mode"]["default"] == "fast"
    assert (props["limit"]["minimum"], props["limit"]["maximum"]) == (1, 100)
    assert "Range" in tool.parameters["$defs"]


def test_handlers_fill_defaults_and_build_typed_values() -> None:
    toolset = Toolset("demo")
    seen: dict[str, Any] = {}

    @toolset.tool(name="span", description="custom", timeout_ms=50)
    def make_span(ctx: Any, within: Range, label: str = "x") -> str:
        seen.update(within=within, label=label)
        return "ok"

    tool = toolset.tools["span"]
    assert (tool.description, tool.timeout_ms, tool.is_async) == ("custom", 50, False)
    assert tool.handler(None, {"within": {"start": 1, "end": 2}}) == "ok"
    assert seen == {"within": Range(1, 2), "label": "x"}


async def test_async_handler_awaits_the_function() -> None:
    toolset = Toolset("demo")

    @toolset.tool
    async def double(ctx: Any, n: int) -> int:
        return n * 2

    async with asyncio.timeout(5):
        assert await toolset.tools["double"].handler(None, {"n": 4}) == 8


def test_mistakes_are_reported_at_decoration_time() -> None:
    toolset = Toolset("demo")

    @toolset.tool
    def one(ctx: Any) -> None:
        return None

    with pytest.raises(ValueError, match="already has a tool named 'one'"):
        toolset.tool(name="one")(lambda ctx: None)
    with pytest.raises(TypeError, match="ToolContext as first parameter"):
        toolset.tool(lambda: None)
    with pytest.raises(TypeError, match="kwargs"):

        @toolset.tool
        def variadic(ctx: Any, **kw: Any) -> None:
            return None


def test_docstring_parser_handles_continuations_and_other_sections() -> None:
    summary, args = parse_docstring(
        "Do it.\n\nArgs:\n    a (int): first\n        continued\n    b: second\n\nReturns:\n    x\n"
    )
    assert summary == "Do it."
    assert args == {"a": "first continued", "b": "second"}
