"""A tool that takes a while (a turn still running when its node is stopped or killed), and one
that runs only once a person approved it."""

from __future__ import annotations

import asyncio
from typing import Any


async def wait(ctx: Any, args: dict[str, Any]) -> str:
    await asyncio.sleep(float(args.get("seconds", 3)))
    return "waited"


async def wipe(ctx: Any, args: dict[str, Any]) -> str:
    return "wiped"


handlers = {"wait": wait, "wipe": wipe}
