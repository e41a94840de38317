"""A tool that sometimes sleeps (0-80 ms, one call in three): turns overlap with the monkey."""

from __future__ import annotations

import asyncio
import random

from bundles.sdk import JsonObject, ToolContext


async def nap(ctx: ToolContext, input: JsonObject) -> JsonObject:
    ms = random.choice([0, 0, random.randint(1, 80)])
    if ms:
        await asyncio.sleep(ms / 1000)
    return {"slept_ms": ms}


handlers = {"nap": nap}
