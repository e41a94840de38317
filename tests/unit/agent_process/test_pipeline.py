"""The onion: order, re-entrance, short-circuits and the error policy written once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_process.pipeline import LayerFailed, PipelineKind, Pipelines, _Onion
from bundles.sdk import MiddlewareError


class Ctx(_Onion[list[str]]):
    __slots__ = ("log",)

    def __init__(self) -> None:
        self.log: list[str] = []


def layer(name: str) -> Any:
    async def mw(ctx: Ctx) -> list[str]:
        ctx.log.append(f"{name}>")
        result = await ctx.next()
        ctx.log.append(f"<{name}")
        return [*result, name]

    return mw


async def core(ctx: Ctx) -> list[str]:
    ctx.log.append("core")
    return ["core"]


async def run(pipes: Pipelines, kind: PipelineKind = PipelineKind.TOOL_CALL) -> tuple[Ctx, Any]:
    ctx = Ctx()
    async with asyncio.timeout(5):
        return ctx, await pipes.run(kind, ctx, core)


async def test_first_registered_is_outermost() -> None:
    pipes = Pipelines()
    for name in "ABC":
        pipes.register("toolCall", layer(name), owner=name)
    ctx, result = await run(pipes)
    assert ctx.log == ["A>", "B>", "C>", "core", "<C", "<B", "<A"]
    assert result == ["core", "C", "B", "A"]


async def test_no_layers_runs_the_core_and_kinds_are_separate() -> None:
    pipes = Pipelines()
    pipes.register("step", layer("S"), owner="s")
    ctx, result = await run(pipes)
    assert result == ["core"] and ctx.log == ["core"]


async def test_a_layer_may_retry_the_inner_chain_or_skip_it() -> None:
    async def retry(ctx: Ctx) -> list[str]:
        await ctx.next()
        return await ctx.next()

    async def skip(ctx: Ctx) -> list[str]:
        return ["cached"]

    pipes = Pipelines()
    pipes.register("toolCall", retry, owner="r")
    pipes.register("toolCall", layer("B"), owner="b")
    ctx, result = await run(pipes)
    assert ctx.log == ["B>", "core", "<B", "B>", "core", "<B"]
    assert result == ["core", "B"]
    pipes = Pipelines()
    pipes.register("toolCall", skip, owner="s")
    pipes.register("toolCall", layer("never"), owner="n")
    ctx, result = await run(pipes)
    assert result == ["cached"] and ctx.log == []


async def test_middleware_error_passes_through_as_a_deliberate_short_circuit() -> None:
    async def deny(ctx: Ctx) -> list[str]:
        raise MiddlewareError("no", code="E_TOOL")

    pipes = Pipelines()
    pipes.register("toolCall", layer("A"), owner="a")
    pipes.register("toolCall", deny, owner="d")
    with pytest.raises(MiddlewareError) as caught:
        await run(pipes)
    assert type(caught.value) is MiddlewareError and caught.value.code == "E_TOOL"


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (PipelineKind.TOOL_CALL, "E_TOOL_MIDDLEWARE"),
        (PipelineKind.STEP, "E_AGENT_TURN_FAILED"),
        (PipelineKind.TURN, "E_AGENT_TURN_FAILED"),
    ],
)
async def test_a_crashing_layer_is_reported_once_with_its_extension(
    kind: PipelineKind, code: str
) -> None:
    async def crash(ctx: Ctx) -> list[str]:
        raise KeyError("oops")

    pipes = Pipelines()
    pipes.register(kind.value, layer("outer"), owner="outer")
    pipes.register(kind.value, crash, owner="buggy")
    with pytest.raises(LayerFailed) as caught:
        await run(pipes, kind)
    assert caught.value.code == code
    assert "extension 'buggy'" in caught.value.message and "KeyError" in caught.value.message
    assert "outer" not in caught.value.message


async def test_core_errors_pass_through_untouched_and_outer_layers_may_catch_them() -> None:
    async def failing_core(ctx: Ctx) -> list[str]:
        raise TimeoutError("model slow")

    async def catcher(ctx: Ctx) -> list[str]:
        try:
            return await ctx.next()
        except TimeoutError:
            return ["fallback"]

    pipes = Pipelines()
    pipes.register("turn", layer("A"), owner="a")
    with pytest.raises(TimeoutError):
        await pipes.run(PipelineKind.TURN, Ctx(), failing_core)
    pipes = Pipelines()
    pipes.register("turn", catcher, owner="c")
    pipes.register("turn", layer("A"), owner="a")
    assert await pipes.run(PipelineKind.TURN, Ctx(), failing_core) == ["fallback"]


def test_register_rejects_unknown_kinds_and_non_callables() -> None:
    pipes = Pipelines()
    with pytest.raises(ValueError, match="use one of: turn, step, toolCall"):
        pipes.register("tool", layer("x"), owner="e")
    with pytest.raises(TypeError):
        pipes.register("turn", "not a function", owner="e")  # type: ignore[arg-type]
