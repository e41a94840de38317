"""A tool that takes a while: a turn still running when its node is stopped or killed."""

from __future__ import annotations

import asyncio
from typing import Any


async def wait(ctx: Any, args: dict[str, Any]) -> str:
    await asyncio.sleep(float(args.get("seconds", 3)))
    return "waited"


handlers = {"wait": wait}
