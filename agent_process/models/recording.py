"""Record a Model's responses, or replay them instead of calling the provider.

`Model.spec.recording: {mode: record|replay, dir: DIR}` sets it for one Model (DIR relative to
the bundle); the `GOONDAN_MODEL_RECORDING=record:DIR` (or `replay:DIR`) environment variable,
which `goondan eval --record/--replay` sets for the daemon it starts, sets it for every Model of
the run and wins over the spec. Each response is stored under the hash of its normalized request
(replay_key.py), with the pieces of its text when it was streamed, so a replay hands the same
deltas to a waiting client. A replayed request with no recording fails the step with
E_REPLAY_MISSING naming the agent, the step and the hash: the provider is never called.

The wrapper sits under `Governed` (models/governed.py): a replayed response's recorded usage is
reported and priced like a live one, so an eval's report is the same under replay.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from agent_process.models import replay_key, replay_store
from agent_process.models.base import Model, ModelError, ModelRequest, ModelResponse
from bundles import redact
from bundles.kinds import ModelSpec
from bundles.model import Resource
from protocol.errors import ErrorCode
from protocol.launch import MODEL_RECORDING_ENV

ENV = MODEL_RECORDING_ENV

_log = structlog.get_logger("goondan.models.recording")

Mode = Literal["record", "replay"]


@dataclass(frozen=True, slots=True)
class Setting:
    mode: Mode
    dir: Path


def setting_of(
    resource: Resource[ModelSpec], environ: Mapping[str, str] = os.environ
) -> Setting | None:
    """This Model's recording: the environment's, else its spec's, else None."""
    raw = environ.get(ENV, "").strip()
    if raw:
        mode, _, where = raw.partition(":")
        if mode not in ("record", "replay") or not where:
            raise ModelError(
                ErrorCode.E_MODEL_BAD_REQUEST,
                f"{ENV}={raw!r}: expected record:DIR or replay:DIR",
                suggestion=f"unset {ENV}, or set it to record:DIR or replay:DIR",
            )
        return Setting("record" if mode == "record" else "replay", Path(where).absolute())
    spec = resource.spec.taping
    if spec is None:
        return None
    root = resource.root if isinstance(resource.root, Path) else Path(resource.root)
    return Setting(spec.mode, (root / spec.dir).absolute())


def replays(resource: Resource[ModelSpec]) -> bool:
    """Whether this Model serves recordings: its provider is never called, its key never read
    (CI replays without the provider's key)."""
    setting = setting_of(resource)
    return setting is not None and setting.mode == "replay"


def wrap(inner: Model, resource: Resource[ModelSpec], *, agent: str | None) -> Model:
    setting = setting_of(resource)
    if setting is None:
        return inner
    return RecordingModel(inner, resource, setting, agent=agent)


class RecordingModel:
    """`Model` that records `inner`'s responses, or serves them without calling it."""

    def __init__(
        self, inner: Model, resource: Resource[ModelSpec], setting: Setting, *, agent: str | None
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.setting = setting
        self._provider = resource.spec.provider
        self._model = resource.spec.model
        self._who = f"agent {agent}" if agent else f"Model/{resource.name}"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        shape = replay_key.normalized(self._provider, self._model, request)
        key = replay_key.request_hash(shape)
        if self.setting.mode == "replay":
            return await self._replay(request, key)
        chunks: list[str] | None = None
        if request.on_text is not None:
            chunks = []
            request = msgspec.structs.replace(request, on_text=_tee(request.on_text, chunks))
        # the request copy is only read by people (and committed): the bundle's secrets are
        # masked in it; the key was taken from the request as sent
        masked = redact.current().value(shape)
        stored = replay_store.Stored(format=replay_store.FORMAT, key=key, chunks=chunks,
                                     agent=self._who, request=masked)  # fmt: skip
        try:
            stored.response = await self.inner.complete(request)
        except ModelError as exc:  # recorded too: a replay fails (or falls back) the same way
            stored.error = replay_store.StoredError(
                code=exc.info.code, message=redact.redact_text(exc.info.message), status=exc.status
            )
            raise
        finally:
            if stored.response is not None or stored.error is not None:
                path = replay_store.write(self.setting.dir, stored)
                _log.debug("model.recorded", who=self._who, key=key, path=str(path))
        return stored.response

    async def _replay(self, request: ModelRequest, key: str) -> ModelResponse:
        try:
            stored = replay_store.read(self.setting.dir, key)
        except replay_store.Missing:
            step = replay_key.step_of(request)
            raise ModelError(
                ErrorCode.E_REPLAY_MISSING,
                f"{self._who}, step {step}: no recording of request {key} in "
                f"{self.setting.dir} (the prompt, an input, a tool or a param changed)",
                suggestion="record it again against the real model (goondan eval --record DIR)",
            ) from None
        _log.debug("model.replayed", who=self._who, key=key)
        return await _serve(stored, request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _serve(stored: replay_store.Stored, request: ModelRequest) -> ModelResponse:
    """The recorded pieces to `on_text`, then the recorded response or failure."""
    text = stored.response.text if stored.response is not None else ""
    if request.on_text is not None:
        for piece in stored.chunks if stored.chunks is not None else [text] if text else []:
            request.on_text(piece)
            # one loop turn per piece, as a provider's socket reads: each goes out as its
            # own delta instead of one burst that leaves the rest to the reply
            await asyncio.sleep(0)
    if stored.error is not None:
        error = stored.error
        code = ErrorCode(error.code) if error.code in ErrorCode.__members__ else None
        raise ModelError(code or ErrorCode.E_MODEL_ERROR, f"{error.message} (replayed)",
                         status=error.status)  # fmt: skip
    assert stored.response is not None, "replay_store.read checked: one of the two"
    return stored.response


def _tee(on_text: Callable[[str], None], chunks: list[str]) -> Callable[[str], None]:
    def both(piece: str) -> None:
        chunks.append(piece)
        on_text(piece)

    return both
