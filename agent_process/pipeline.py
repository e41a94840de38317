"""Onion middleware for `turn`, `step` and `toolCall` (ARCHITECTURE.md §6), and its error policy,
once.

A middleware is `async def mw(ctx) -> result`; `await ctx.next()` runs the inner layers and the
core, and returns their result, which the middleware may replace. The first registered is the
outermost (extensions register in `Agent.spec.extensions` order).

Error policy (STYLE habit 9), applied in `_Onion.next` only:
- `MiddlewareError` raised by a layer is a deliberate short-circuit and propagates as is;
- any other exception raised *by a layer* is logged with the extension's name and re-raised as
  `LayerFailed` (a `MiddlewareError` with a code: `E_TOOL_MIDDLEWARE` or `E_AGENT_TURN_FAILED`);
- exceptions of the core pass through untouched, so the engine keeps handling its own
  (e.g. model errors) and an outer layer may still catch them.
The caller of `run` turns `MiddlewareError` into a coded result (a tool error, a failed turn).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import structlog

from bundles.sdk import MiddlewareError
from protocol.errors import ErrorCode

R = TypeVar("R")
_log = structlog.get_logger("goondan.pipeline")


class PipelineKind(StrEnum):
    TURN = "turn"
    STEP = "step"
    TOOL_CALL = "toolCall"


_FAILURE_CODE = {
    PipelineKind.TURN: ErrorCode.E_AGENT_TURN_FAILED,
    PipelineKind.STEP: ErrorCode.E_AGENT_TURN_FAILED,
    PipelineKind.TOOL_CALL: ErrorCode.E_TOOL_MIDDLEWARE,
}


class LayerFailed(MiddlewareError):
    """A middleware raised something other than MiddlewareError: a bug in that extension."""


@dataclass(frozen=True, slots=True)
class Layer:
    owner: str
    """The extension that registered it (for error messages and logs)."""
    fn: Callable[[Any], Awaitable[Any]]


class _Onion(Generic[R]):
    """Base of the three middleware contexts: the chain position and `next()`."""

    __slots__ = ("_core", "_core_error", "_kind", "_layers", "_pos")

    def _bind_chain(
        self,
        kind: PipelineKind,
        layers: tuple[Layer, ...],
        core: Callable[[Any], Awaitable[R]],
    ) -> None:
        self._kind = kind
        self._layers = layers
        self._core = core
        self._pos = 0
        self._core_error: BaseException | None = None

    async def next(self) -> R:
        pos = self._pos
        if pos == len(self._layers):
            try:
                return await self._core(self)
            except Exception as exc:
                self._core_error = exc
                raise
        layer = self._layers[pos]
        self._pos = pos + 1
        try:
            result: R = await layer.fn(self)
            return result
        except MiddlewareError:
            raise
        except Exception as exc:
            if exc is self._core_error:
                raise
            _log.error(
                "middleware_failed",
                extension=layer.owner,
                pipeline=self._kind.value,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise LayerFailed(
                f"{self._kind.value} middleware of extension {layer.owner!r} raised "
                f"{type(exc).__name__}: {exc}",
                code=_FAILURE_CODE[self._kind],
                suggestion=f"fix extension {layer.owner!r} or remove it from Agent.spec.extensions",
            ) from exc
        finally:
            # Re-entrant: a layer may call next() again (a retry) and get the inner layers anew.
            self._pos = pos


class Pipelines:
    """The registered layers of each kind, in registration order."""

    __slots__ = ("_layers",)

    def __init__(self) -> None:
        self._layers: dict[PipelineKind, tuple[Layer, ...]] = {k: () for k in PipelineKind}

    def register(self, kind: str, fn: Callable[[Any], Awaitable[Any]], *, owner: str) -> None:
        try:
            pk = PipelineKind(kind)
        except ValueError:
            raise ValueError(
                f"unknown pipeline {kind!r}; use one of: turn, step, toolCall"
            ) from None
        if not callable(fn):
            raise TypeError(f"pipeline middleware for {kind!r} must be an async function")
        self._layers[pk] = (*self._layers[pk], Layer(owner=owner, fn=fn))

    def layers(self, kind: PipelineKind) -> tuple[Layer, ...]:
        return self._layers[kind]

    async def run(
        self, kind: PipelineKind, ctx: _Onion[R], core: Callable[[Any], Awaitable[R]]
    ) -> R:
        """Run the onion around `core`; raises MiddlewareError (incl. LayerFailed) or what the
        core raised."""
        ctx._bind_chain(kind, self._layers[kind], core)
        return await ctx.next()
