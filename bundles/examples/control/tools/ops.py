"""The example's deploy tool: it only says what it would have deployed."""

from __future__ import annotations

from typing import Any

from bundles.sdk import ToolContext


def deploy(ctx: ToolContext, input: dict[str, Any]) -> Any:
    return {"deployed": input["env"]}


handlers = {"deploy": deploy}
